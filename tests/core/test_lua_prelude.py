"""The Lua prelude ``lua/_lib.lua``: every script runs behind the helpers of it that it uses, and what it
holds is written once.

Scripts share their helpers (the wrong-type guard, task keys built from an ARGV prefix) through
the prelude, never by copying them; reasons and defaults come from Python in ARGV.
"""

from __future__ import annotations

import hashlib
import re
from importlib import resources

import pytest
import redis

from queuecore.core import reasons
from queuecore.core.keys import Keys
from queuecore.core.limits import CALL_BYTES
from queuecore.core.scripts import PRELUDE, SCRIPT_NAMES, Scripts, prelude_for, prelude_helpers, script_source


def lua(name: str) -> str:
    return resources.files("queuecore.core").joinpath("lua", f"{name}.lua").read_text()


def code(text: str) -> str:
    """The Lua without comments (whole-line and trailing)."""
    return "\n".join(re.sub(r"--.*", "", line) for line in text.splitlines())


def defined_helpers() -> set[str]:
    return set(re.findall(r"^local function (qc_\w+)\(", lua(PRELUDE), re.MULTILINE))


def test_the_prelude_has_a_header_and_only_local_helpers() -> None:
    text = lua(PRELUDE)
    assert text.startswith(f"-- {PRELUDE}: ")
    assert not re.search(r"\b(KEYS|ARGV)\[", code(text)), "the prelude reads no KEYS or ARGV of its own"
    assert defined_helpers()
    top_level = [line for line in code(text).splitlines() if line and not line.startswith((" ", "end"))]
    assert all(line.startswith("local function qc_") for line in top_level), top_level


def test_the_prelude_splits_into_its_helpers_whole() -> None:
    helpers = prelude_helpers()
    assert list(helpers) == re.findall(r"^local function (qc_\w+)\(", lua(PRELUDE), re.MULTILINE)
    for name, text in helpers.items():
        assert text in lua(PRELUDE)
        assert text.splitlines()[-1] == "end" and f"local function {name}(" in text
        assert text.count("\nend") == 1, f"{name}: one helper's text, not two"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_every_script_source_is_the_helpers_it_uses_then_the_script(name: str) -> None:
    source = script_source(name)
    assert source == prelude_for(lua(name)) + "\n" + lua(name)
    defined = re.findall(r"^local function (qc_\w+)\(", source, re.MULTILINE)
    called = set(re.findall(r"\b(qc_\w+)\(", code(source).replace("local function ", "")))
    assert set(defined) == called, f"{name}: defined but not called {set(defined) - called}, " \
                                   f"called but not defined {called - set(defined)}"
    order = list(prelude_helpers())
    assert defined == sorted(defined, key=order.index), "helpers keep the prelude's order (each after those it calls)"


def test_the_prelude_is_not_a_script_source() -> None:
    with pytest.raises(ValueError):
        script_source(PRELUDE)


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_the_registered_sha_is_that_of_the_full_source(name: str) -> None:
    """EVALSHA's SHA and the SCRIPT LOAD after NOSCRIPT both use the helpers + the script."""
    scripts = Scripts(redis.Redis(), Keys("qcx"))  # registering computes the SHA locally: no connection
    assert scripts._script(name).sha == hashlib.sha1(script_source(name).encode()).hexdigest()


def test_every_helper_a_script_calls_is_in_the_prelude_and_every_helper_is_used() -> None:
    helpers = defined_helpers()
    used: set[str] = set()
    for name in SCRIPT_NAMES:
        called = set(re.findall(r"\b(qc_\w+)\(", code(lua(name))))
        assert called <= helpers, f"{name}.lua calls {called - helpers}, which the prelude does not define"
        assert not re.search(r"^local function qc_", lua(name), re.MULTILINE), f"{name}.lua redefines a helper"
        # with the helpers those call (as script_source carries them)
        used |= set(re.findall(r"local function (qc_\w+)\(", prelude_for(lua(name))))
    assert used == helpers, f"helpers no script calls: {helpers - used}"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_no_script_copies_the_wrong_type_guard(name: str) -> None:
    """TYPE and the QCWRONGTYPE reply are the prelude's: a script checks types only through it."""
    body = code(lua(name))
    assert 'redis.call("TYPE"' not in body
    assert "QCWRONGTYPE" not in body
    assert "error_reply" not in body


def test_the_prelude_holds_the_wrong_type_reply_redis_errors_parses() -> None:
    assert '"QCWRONGTYPE " .. key .. " holds a " .. got .. ", expected a " .. want' in lua(PRELUDE)


def test_the_lua_read_budget_is_the_python_one() -> None:
    """Script calls that read messages stop at qc_read_enough; the client and the acker cut their calls
    at limits.CALL_BYTES: one number, written twice (Lua cannot import it), kept equal here."""
    (budget,) = re.findall(r"return bytes >= (\d+)", code(lua(PRELUDE)))
    assert int(budget) == CALL_BYTES
    for name in ("dequeue", "recover", "repair"):
        assert "qc_read_enough(" in code(lua(name)), name


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_reasons_and_defaults_come_in_argv(name: str) -> None:
    body = code(lua(name))
    texts = [value for key, value in vars(reasons).items() if key.isupper() and isinstance(value, str)]
    for text in texts:
        assert text not in body, f"{name}.lua spells out {text!r}: pass reasons.* in ARGV"
    assert not re.search(r'"[a-z]+ [a-z]+ [a-z]+', body), f"{name}.lua has an English phrase in a string"
    assert not re.search(r"max_retry\s*=\s*-?\d", body), f"{name}.lua has a literal default max_retry"
