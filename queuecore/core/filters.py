"""The task filter language of the dashboard's search box and ``adminctl task ls --filter``.

A filter is terms separated by spaces; a value with spaces goes in double quotes:

- ``type:emails.send`` — the task type (``*`` matches any characters: ``type:emails.*``);
- ``error:"connection refused"`` — text in the last error;
- ``id:5f13`` — the start of the task id;
- ``payload.user.plan:pro`` — the value at a path of the payload (dots between keys, numbers index
  lists); the value is read as JSON when it can be (``payload.count:3``, ``payload.vip:true``), else
  as text, where ``*`` matches any characters;
- anything else — text looked for in the id, the payload and the last error (as the plain search,
  which also finds a fragment copied from the displayed payload);
- a ``-`` before a term keeps the tasks that do not match it (``-type:emails.send``).

Every term must match. ``parse`` raises ``ConfigurationError`` naming what is wrong.
"""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from queuecore.core.errors import ConfigurationError
from queuecore.core.limits import MAX_PAYLOAD_DEPTH
from queuecore.core.message import TaskInfo, dumps, nesting

FIELDS = ("type", "error", "id", "payload")
MAX_TERMS = 20
MAX_LENGTH = 2000
_TOKEN = re.compile(r'(-?)(?:([A-Za-z_][\w.\-\[\]]*):)?("(?:[^"\\]|\\.)*"|\S+)')
_MISSING = object()
_TOO_DEEP = object()  # a filter value past the JSON parser's own depth
_BARE_FIELD = re.compile(r"-?(?:type|error|id|payload(?:\.[\w.\-]+)?):")


@dataclass(frozen=True)
class Term:
    """One term: ``field`` ("" for free text; ``payload.<path>`` for a payload path), its value, and
    whether it is negated."""

    field: str
    value: str
    negated: bool = False
    quoted: bool = False  # the value was in double quotes: always text, never read as JSON


_FIELD_TERM = re.compile(r'(?:^|\s)-?(?:type|error|id|payload\.[\w.\-]+):\S')


def looks_like_filter(text: str) -> bool:
    """True when a search text uses the language (a ``type:``, ``error:``, ``id:`` or ``payload.<path>:``
    term): the search box and ``--search`` then read it as a filter, and as plain text otherwise
    (a pasted JSON fragment such as ``"user_id": 5005`` stays plain text)."""
    return bool(_FIELD_TERM.search(text))


def parse(text: str) -> list[Term]:
    """The terms of a filter (see the module); an empty text is no term."""
    if not isinstance(text, str):
        raise ConfigurationError(f"a filter is text, not {type(text).__name__}")
    if len(text) > MAX_LENGTH:
        raise ConfigurationError(f"a filter is at most {MAX_LENGTH:,} characters")
    terms: list[Term] = []
    position = 0
    stripped = text.strip()
    while position < len(stripped):
        if stripped[position].isspace():
            position += 1
            continue
        match = _TOKEN.match(stripped, position)
        if not match or match.end() == position:  # pragma: no cover - \S+ always matches
            raise ConfigurationError(f"cannot read the filter at {stripped[position:position + 20]!r}")
        negated, field, raw = bool(match[1]), match[2] or "", match[3]
        quoted = raw.startswith('"')
        if quoted and not (len(raw) >= 2 and raw.endswith('"') and not raw.endswith('\\"')):
            raise ConfigurationError(f"a quote is not closed in {raw!r}")
        if not field and _BARE_FIELD.fullmatch(raw):
            raise ConfigurationError(f"{raw[:-1].lstrip('-')}: needs a value")
        value = _unquote(raw) if quoted else raw
        if field and field not in FIELDS and not field.startswith("payload."):
            raise ConfigurationError(f"unknown filter field {field!r}: use {', '.join(FIELDS[:-1])}, "
                                     "payload.<path>, or words")
        if field == "payload" or (field.startswith("payload.") and "" in field[len("payload."):].split(".")):
            # payload.:1 or payload.a..b named no key and so matched nothing
            raise ConfigurationError("name a path of the payload: payload.<key>[.<key>...]:<value>")
        if not value:
            raise ConfigurationError(f"{field or 'a term'}: needs a value")
        terms.append(Term(field, value, negated, quoted))
        position = match.end()
    if len(terms) > MAX_TERMS:
        raise ConfigurationError(f"a filter has at most {MAX_TERMS} terms")
    return terms


def _unquote(raw: str) -> str:
    try:
        return str(json.loads(raw))
    except ValueError:
        raise ConfigurationError(f"a quoted value is malformed: {raw!r}") from None


def _payload_value(payload: Any, path: str) -> Any:
    value = payload
    for part in path.split("."):
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            return _MISSING
    return value


def _glob(pattern: str, text: str) -> bool:
    return fnmatch.fnmatchcase(text.lower(), pattern.lower()) if "*" in pattern else text.lower() == pattern.lower()


def _term_matcher(term: Term, text_matches: Callable[[TaskInfo, str], bool]) -> Callable[[TaskInfo], bool]:
    if term.field == "type":
        return lambda info: _glob(term.value, info.type)
    if term.field == "error":
        needle = term.value.lower()
        return lambda info: needle in (info.last_error or "").lower()
    if term.field == "id":
        return lambda info: info.id.startswith(term.value)
    if term.field.startswith("payload."):
        path = term.field[len("payload."):]
        wanted: Any = term.value
        if not term.quoted:
            try:
                wanted = json.loads(term.value)
            except ValueError:
                pass
            except RecursionError:  # "[[[[..." past the parser's depth (Python < 3.13's is about 1,000)
                wanted = _TOO_DEEP
            if wanted is _TOO_DEEP or nesting(wanted) > MAX_PAYLOAD_DEPTH:  # no payload value is that deep
                raise ConfigurationError(f"the value of {term.field}: is nested too deeply") from None

        def payload_matches(info: TaskInfo) -> bool:
            found = _payload_value(info.payload, path)
            if found is _MISSING:
                return False
            if isinstance(wanted, str) and isinstance(found, str):
                return _glob(wanted, found)
            return bool(found == wanted and type(found) is type(wanted)) or dumps(found) == dumps(wanted)
        return payload_matches
    return lambda info: text_matches(info, term.value)


def matcher(terms: list[Term], text_matches: Callable[[TaskInfo, str], bool]) -> Callable[[TaskInfo], bool]:
    """A predicate on tasks that every term holds for; free text uses ``text_matches(info, text)``."""
    checks = [(_term_matcher(t, text_matches), t.negated) for t in terms]
    return lambda info: all(check(info) != negated for check, negated in checks)


def describe(terms: list[Term]) -> str:
    """The filter written back in its canonical form."""
    def one(t: Term) -> str:
        value = t.value if re.fullmatch(r'[^\s"]+', t.value) else json.dumps(t.value)
        return ("-" if t.negated else "") + (f"{t.field}:" if t.field else "") + value
    return " ".join(one(t) for t in terms)
