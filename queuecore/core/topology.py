"""Where Redis is: one server, a Redis Cluster, or a master found through Redis Sentinel.

One URL names each topology:

- ``redis://``, ``rediss://`` (TLS) or ``unix://``: one server (redis-py's own URL syntax and options);
- ``redis+cluster://[user:password@]host:port[,host:port...][/]``: a Redis Cluster, found from any
  of the given nodes (``rediss+cluster://`` for TLS);
- ``redis+sentinel://[user:password@]host:port[,host:port...]/<master name>[/<db>]``: the master that
  the sentinels name, followed through a failover (``rediss+sentinel://`` for TLS to the sentinels and
  the master). The user and password are the master's; the sentinels' own, if they have any, are
  the query options ``sentinel_username`` and ``sentinel_password``.

Cluster and sentinel URLs accept these query options and no others: ``sentinel_username``,
``sentinel_password`` (sentinel only), ``ssl_ca_certs``, ``ssl_certfile``, ``ssl_keyfile`` and
``ssl_cert_reqs`` (``none``, ``optional`` or ``required``; TLS schemes only).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import ipaddress
import logging
import math
import os
import re
import socket
import threading
import time
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import unquote, unquote_plus, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.retry
import redis.asyncio.sentinel
import redis.cluster
import redis.retry
import redis.sentinel
from redis.backoff import NoBackoff

from queuecore.core.errors import ConfigurationError, shown
from queuecore.core.redis_errors import broker_errors

SINGLE_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")

logger = logging.getLogger("queuecore.topology")
MAX_NODES = 64  # seed nodes or sentinels named in one URL
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_CERT_REQS = ("none", "optional", "required")
# A host name is dot-separated labels of letters, digits, "_" and inner "-" (an IPv4 address is one);
# an IPv6 address in brackets is checked by ``ipaddress``. "-", "..." or "[:]" are no host.
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?"
                        r"(?:\.[A-Za-z0-9_](?:[A-Za-z0-9_-]*[A-Za-z0-9_])?)*)):(?P<port>[0-9]{1,5})$")
_SERVICE = re.compile(r"^[A-Za-z0-9._-]{1,200}$")

Kind = Literal["single", "cluster", "sentinel"]


@dataclass(frozen=True)
class RedisTarget:
    """A parsed Redis URL: the topology, its nodes, credentials and options."""

    kind: Kind
    url: str
    nodes: tuple[tuple[str, int], ...] = ()
    service: str = ""  # the sentinel master's name
    db: int = 0
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    tls: bool = False
    options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def is_cluster(self) -> bool:
        return self.kind == "cluster"

    def __repr__(self) -> str:  # the URL without its password (a traceback's locals, a debug log)
        return (f"RedisTarget(kind={self.kind!r}, url={redact_url(self.url)!r}, nodes={self.nodes!r}, "
                f"service={self.service!r}, db={self.db!r}, username={self.username!r}, tls={self.tls!r})")


_ADVICE = ("if it has a user name or password holding '/', '?', '#' or '@', percent-encode those (%2F, %3F, %23, "
           "%40)")


# What a single server's or a node list's host part may be: host[:port], comma-separated (no "@"); an
# IPv6 address may carry a zone (``[fe80::1%25eth0]``).
_HOST = r"(?:\[[0-9A-Fa-f:.]*(?:%25[\w.~-]+)?\]|[\w.~%-]*)(?::[0-9]*)?"
_HOST_LIST = re.compile(rf"{_HOST}(?:,{_HOST})*")
_OPTION_NAME = re.compile(r"([^=&?#]*)=")
_OPTION = r"(?:[\w.~-]|%[0-9A-Fa-f]{2})+"  # an option's name (redis-py's are identifiers, perhaps percent-encoded)
_NEXT_OPTION = re.compile(rf"&(?={_OPTION}=)")


def _is_password_option(name: str) -> bool:
    """Whether an option names a password (``password``, ``sentinel_password``, ``ssl_password``...), under
    whatever spelling redis-py decodes to that name (``pass%77ord``)."""
    return unquote_plus(name).lower().endswith("password")


def _password_values(text: str) -> list[tuple[int, int]]:
    """Where the values of password options in ``text`` (a URL's part after its credentials) stand, each
    up to the next "&" that begins another option (an "@", "?", "#" or a lone "&" in one ends nothing).
    Every "?" and "&" is looked at, so a text that only looks like an option (an earlier value, a piece
    of a host) hides no later password."""
    spans: list[tuple[int, int]] = []
    for separator in re.finditer(r"[?&]", text):
        name = _OPTION_NAME.match(text, separator.end())
        if (spans and separator.start() < spans[-1][1]) or name is None or not _is_password_option(name[1]):
            continue
        following = _NEXT_OPTION.search(text, name.end())  # an "&" not followed by name= is the value's
        spans.append((name.end(), len(text) if following is None else following.start()))
    return spans


def _without_option_passwords(text: str) -> str:
    """``text`` with the values of its password options as ``***`` (``_password_values``)."""
    shown, done = [], 0
    for start, end in _password_values(text):
        shown += [text[done:start], "***"]
        done = end
    return "".join(shown) + text[done:]


def _blanked(text: str) -> str:
    """``text`` with the values of its password options blanked out, their length kept: what an "@",
    "#" or "?" in them is no part of."""
    for start, end in _password_values(text):
        text = text[:start] + "*" * (end - start) + text[end:]
    return text


def _credentials(rest: str, scheme: str) -> tuple[int, bool]:
    """In a URL after its "://": the index of the "@" that ends its credentials (-1: none), and whether
    that is in doubt. Normally it is the last "@" before the path, query or fragment. An "@" after them
    that only a user name or password holding "/", "?" or "#" unencoded explains puts it in doubt: one in
    the path (except a unix socket's after a user name's own "@"), or with a path holding a character no
    path has, a query with an item whose name is no option's, a fragment, or a host part that is no host
    list (or empty, or a port without a host, or a ":" without a port). Then the last "@" is taken,
    hiding too much rather than a piece of a password. An "@" in an option's value
    (``client_name=me@host``, ``password=p@ss``) is not one, and no "@", "?" or "#" in a password
    option's value counts."""
    special = re.search(r"[/?#]", rest)
    cut = len(rest) if special is None else special.start()
    authority, tail = rest[:cut], _blanked(rest[cut:])
    last = (authority + tail).rfind("@")
    if last < cut:
        return last, False
    path, _, fragment = tail.partition("#")
    path, _, query = path.partition("?")
    host = authority.rpartition("@")[2]
    in_doubt = (("@" in path and not (_unix_path(scheme, authority) and ":" not in authority))
                or re.search(r"[^\w./~%@-]", path) is not None or "@" in fragment
                or ("@" in query and not all(re.fullmatch(_OPTION, item.partition("=")[0])
                                             for item in query.split("&") if item))
                or not _HOST_LIST.fullmatch(host) or re.search(r"(?:^|,):|:(?:,|$)", host) is not None
                or (host == "" and scheme != "unix"))
    return (last, True) if in_doubt else (authority.rfind("@"), False)


def _unix_path(scheme: str, authority: str) -> bool:
    """Whether what follows ``authority`` is a unix socket's path (which may hold an "@"): no host, and
    credentials, if any, ended by their own "@" (``unix://default@/run/r@d/redis.sock``)."""
    return scheme == "unix" and (authority == "" or authority.endswith("@"))


def _credentials_in_doubt(url: str) -> bool:
    """Whether the URL may hold a user name or password with "/", "?" or "#" not percent-encoded."""
    scheme, _, rest = url.partition("://")
    return _credentials(rest, scheme.lower())[1]


def redact_url(url: str) -> str:
    """The Redis URL with any password replaced by ``***``, safe to print or log (a password holding
    "/", "?", "#" or "@" unencoded too: then the whole user part is hidden)."""
    if not isinstance(url, str):
        return "<not a Redis URL>"
    scheme, sep, rest = url.partition("://")
    if not sep:  # no URL's shape ("redis:/u:pw@host"): what precedes an "@" may be a password
        return _from_the_last_at(url) or _without_option_passwords(url)
    at, in_doubt = _credentials(rest, scheme.lower())
    if at < 0:
        return f"{scheme}://{_without_option_passwords(rest)}"
    userinfo, rest = rest[:at], rest[at + 1:]
    user, colon, _ = userinfo.partition(":")
    masked = "***@" if in_doubt or "@" in userinfo else f"{user}:***@" if colon else f"{userinfo}@"
    return f"{scheme}://{masked}{_without_option_passwords(rest)}"


def _check_encoded(url: str) -> None:
    """Refuse what only an unencoded "/", "?", "#" or "@" in a user name or password makes: a fragment,
    an "@" in the path (a unix socket's path aside), a query item without "=" (redis-py would read the
    rest as host and path)."""
    scheme, _, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    path_and_query = rest[len(authority):]
    path, _, query = path_and_query.partition("?")
    if "#" in rest:
        raise _refuse(url, "a Redis URL has no '#' fragment; " + _ADVICE)
    if "@" in path and not _unix_path(scheme.lower(), authority):
        raise _refuse(url, "its path holds an '@'; " + _ADVICE)
    if any(item and "=" not in item for item in query.split("&")):
        raise _refuse(url, "an option without '=' (options are name=value); " + _ADVICE)


def _refuse(url: str, why: str) -> ConfigurationError:
    if _credentials_in_doubt(url):  # what a parser says of such a URL may quote a piece of the password
        why = "it does not parse; " + _ADVICE if "percent-encode" not in why else why
    shown_url = _shown_refused(url)
    if "percent-encode" not in why and any(_hidden_piece(piece, url, shown_url)
                                           for pieces in re.findall(r"'([^']*)'|\"([^\"]*)\"", why)
                                           for piece in pieces if piece):
        why = "it does not parse; " + _ADVICE  # the reason quotes what the URL as shown hides (a password's piece)
    return ConfigurationError(f"invalid Redis URL {shown_url!r}: {why}", field="redis_url")


def _hidden_piece(piece: str, url: str, shown_url: str) -> bool:
    """Whether ``piece`` (quoted by a refusal's reason) is text of the URL that its shown form hides."""
    return (piece in url or piece in unquote_plus(url)) and piece not in shown_url \
        and piece not in unquote_plus(shown_url)


def _shown_refused(url: str) -> str:
    """A refused URL as its error shows it: redacted, and with everything up to its last "@" hidden when
    an "@" follows the host part (a URL that does not work may have had its password read as a host,
    a path or an option: ``redis://:123?x=SECRET@host``)."""
    scheme, sep, rest = url.partition("://")
    authority = re.split(r"[/?#]", rest, maxsplit=1)[0]
    hidden = _from_the_last_at(rest[len(authority):]) if sep else None
    return redact_url(url) if hidden is None else f"{scheme}://{hidden}"


def _from_the_last_at(text: str) -> str | None:
    """``text`` shown from its last "@" outside password options' values, all before it hidden
    (``***@host...``, option passwords masked); None when it has no such "@"."""
    blanked = _blanked(text)
    at = blanked.rfind("@")
    return None if at < 0 else f"***@{_without_option_passwords(text[at + 1:])}"


def _parse_nodes(url: str, hosts: str) -> tuple[tuple[str, int], ...]:
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        match = _HOST_PORT.fullmatch(part.strip())
        if not match or not 0 < int(match["port"]) < 65536 or (match["v6"] and not _is_ipv6(match["v6"])):
            raise _refuse(url, f"{part.strip()!r} is not host:port (a port from 1 to 65535)")
        nodes.append((match["v6"] or match["host"], int(match["port"])))
    if len(nodes) > MAX_NODES:
        raise _refuse(url, f"at most {MAX_NODES} nodes")
    return tuple(dict.fromkeys(nodes))


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _check_single(url: str, scheme: str) -> None:
    """Refuse a one-server URL that redis-py would refuse only at the first command, or misread: a bad
    port, a database path that is not a number (redis-py ignores it and uses 0), an option it does not
    know or a value it cannot take."""
    try:
        parts = urlsplit(url)
        if scheme != "unix" and parts.port == 0:  # redis-py would take port 0 for "none given": 6379
            raise ValueError("port 0 is not a port (a port from 1 to 65535)")
        if scheme != "unix" and parts.path not in ("", "/") and not re.fullmatch(r"/\d{1,5}", parts.path):
            raise ValueError(f"the path {parts.path!r} is not a database number (as in /0)")
        pool = redis.ConnectionPool.from_url(url)  # parses each option's value; connects to nothing
        unknown = sorted(set(pool.connection_kwargs) - _connection_options(pool.connection_class))
        if unknown:
            raise ValueError(f"unknown option {unknown[0]!r}")
        if pool.connection_kwargs.get("protocol", 2) not in (2, 3, "2", "3"):
            raise ValueError("protocol must be 2 or 3")
        _check_option_values(pool.connection_kwargs)
    except (ValueError, redis.RedisError) as exc:
        raise _refuse(url, str(exc)) from None


def _check_option_values(options: Mapping[str, Any]) -> None:
    """Refuse option values redis-py parses but fails on at the first command (or misreads)."""
    for name in ("socket_timeout", "socket_connect_timeout", "timeout"):
        value = options.get(name)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a number of seconds above 0, got {value!r}")
    for name in ("health_check_interval", "socket_read_size"):
        value = options.get(name)
        if value is not None and value < 0:
            raise ValueError(f"{name} must not be negative, got {value!r}")
    cert_reqs = options.get("ssl_cert_reqs")
    if isinstance(cert_reqs, str) and cert_reqs not in _CERT_REQS:
        raise ValueError(f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")


@functools.cache
def _connection_options(connection_class: type) -> frozenset[str]:
    """The keyword arguments ``connection_class`` takes (what a URL's options become)."""
    names: set[str] = set()
    for cls in connection_class.__mro__:
        if cls is not object and "__init__" in vars(cls):
            names.update(name for name, p in inspect.signature(vars(cls)["__init__"]).parameters.items()
                         if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name != "self")
    return frozenset(names)


def parse_redis_url(url: object) -> RedisTarget:
    """Parse and check a Redis URL (see the module); ``ConfigurationError`` names what is wrong."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"the Redis URL must be a non-empty string, got {shown(url)}", field="redis_url")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    _check_encoded(url)
    if scheme in SINGLE_SCHEMES:
        _check_single(url, scheme)
        return RedisTarget("single", url)
    if scheme not in CLUSTER_SCHEMES + SENTINEL_SCHEMES:
        raise _refuse(url, "use redis://, rediss://, unix://, redis+cluster:// or redis+sentinel:// "
                           "(rediss+cluster://, rediss+sentinel:// for TLS)")
    rest = url.split("://", 1)[1]
    rest, _, query = rest.partition("?")
    if "#" in query or "#" in rest:
        raise _refuse(url, "no '#' fragment")
    netloc, _, path = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    username = password = None
    if at:
        user, colon, secret = userinfo.partition(":")
        username, password = (unquote(user) or None), (unquote(secret) if colon else None)
    if not hosts:
        raise _refuse(url, "name at least one host:port")
    nodes = _parse_nodes(url, hosts)
    tls = scheme.startswith("rediss")
    options: dict[str, str] = {}
    # Decoded as the password before "@" is (unquote): a "+" stays a "+" (parse_qsl makes it a space,
    # so a generated password holding one failed to authenticate, with nothing to say why).
    for pair in filter(None, query.split("&")):
        raw_name, _, raw_value = pair.partition("=")
        name, value = unquote(raw_name), unquote(raw_value)
        allowed = _TLS_OPTIONS + (("sentinel_username", "sentinel_password") if scheme in SENTINEL_SCHEMES else ())
        if name not in allowed:
            raise _refuse(url, f"unknown option {name!r} (allowed: {', '.join(allowed)})")
        if name in _TLS_OPTIONS and not tls:
            raise _refuse(url, f"{name} needs a TLS scheme (rediss+...)")
        if name == "ssl_cert_reqs" and value not in _CERT_REQS:
            raise _refuse(url, f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
        options[name] = value
    parts = path.split("/")
    if parts[-1] == "":  # one trailing "/" (or none at all) is fine; an empty segment inside is not
        parts.pop()
    if "" in parts:
        raise _refuse(url, "an empty segment in the path (two '/' in a row)")
    if scheme in CLUSTER_SCHEMES:
        if parts and parts != ["0"]:
            raise _refuse(url, "a Redis Cluster has database 0 only: end the URL with '/' or '/0'")
        return RedisTarget("cluster", url, nodes, username=username, password=password, tls=tls, options=options)
    if not parts or not _SERVICE.fullmatch(parts[0]) or len(parts) > 2:
        raise _refuse(url, "name the sentinel master after the hosts: "
                           "redis+sentinel://host:port,.../<master name>[/db]")
    db = 0
    if len(parts) == 2:
        if not re.fullmatch(r"[0-9]{1,2}", parts[1]) or not 0 <= int(parts[1]) <= 15:  # not str.isdigit: "²"
            raise _refuse(url, f"database {parts[1]!r} is not a number from 0 to 15")
        db = int(parts[1])
    return RedisTarget("sentinel", url, nodes, service=parts[0], db=db, username=username, password=password,
                       tls=tls, options=options)


def _tls_kwargs(target: RedisTarget) -> dict[str, Any]:
    if not target.tls:
        return {}
    kwargs: dict[str, Any] = {"ssl": True}
    for name in _TLS_OPTIONS:
        if name in target.options:
            kwargs[name] = target.options[name]
    return kwargs


# Connections a client's pool may open at once (per node of a cluster): Redis's own default
# ``maxclients``. redis-py 8 caps a pool at 100, so that a 101st thread that needs a connection at the
# same moment (a worker with concurrency above 100 writing outcomes, the 101st caller waiting for a
# result) failed with "Too many connections", reported as Redis being unreachable.
MAX_CONNECTIONS = 10_000


def _common_kwargs(target: RedisTarget, socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
    return {"decode_responses": True, "socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout,
            "username": target.username, "password": target.password, "max_connections": MAX_CONNECTIONS,
            **_tls_kwargs(target)}


MASTER_RECHECK = 1.0  # seconds: how often a sentinel client asks the sentinels whether its master still is
IN_FLUX_RECHECK = 0.1  # seconds, instead, while no sentinel names a master that is up (a failover under way)
SENTINEL_SKIP = 30.0  # seconds a sentinel that failed to answer is left out of those checks

# The events a sentinel publishes as it fails a master over (the one that leads it), from the start
# to the promotion of a replica, and the end: on one about its master, a client refuses the master at
# once and asks the sentinels at its next command, rather than at its next periodic question. The
# leader announces the failover about 0.1 s before it promotes the replica: what the old master
# acknowledged from the promotion on, until the client's next question (up to MASTER_RECHECK), was
# discarded when it was demoted (a probe lost 3 to 266 enqueues per planned failover at 400 a second).
FAILOVER_BEGUN = ("+try-failover", "+elected-leader", "+failover-state-select-slave", "+selected-slave",
                  "+failover-state-send-slaveof-noone", "+failover-state-wait-promotion", "+promoted-slave")
FAILOVER_ENDED = ("+switch-master", "-failover-abort-not-elected", "-failover-abort-no-good-slave",
                  "-failover-abort-slave-timeout", "+failover-end", "+failover-end-for-timeout")
_WATCH_BACKOFF_MAX = 5.0  # seconds between attempts to reach a sentinel that does not answer


class _FailoverWatch:
    """The failover events of one service's sentinels, in one process: a thread per sentinel, shared by
    every client (pool) of theirs, telling each of them; the threads end once no pool is left."""

    def __init__(self, key: tuple[Any, ...], nodes: list[tuple[str, int]], kwargs: dict[str, Any]) -> None:
        self.key = key
        self.pools: weakref.WeakSet[Any] = weakref.WeakSet()
        self.ended = False
        for host, port in nodes:
            threading.Thread(target=self._listen, args=(host, port, kwargs), daemon=True,
                             name=f"queuecore-sentinel-events-{host}:{port}").start()

    def _over(self) -> bool:
        """True (for good) once no pool listens; then it leaves the registry, and a new pool starts anew."""
        if self.pools:
            return False
        with _watches_lock:
            if not self.pools:
                self.ended = True
                if _watches.get(self.key) is self:
                    del _watches[self.key]
        return self.ended

    def _listen(self, host: str, port: int, kwargs: dict[str, Any]) -> None:
        """Subscribe to one sentinel's failover events; a sentinel that does not answer, refuses the
        subscription (an ACL user without the channels), or whose connection dies (TCP keepalive) is
        tried again after a growing wait, said once at WARNING (the periodic questions go on meanwhile)."""
        wait, warned = 0.1, False
        while not self._over():
            client = pubsub = None
            subscribed_at = None
            try:
                client = redis.Redis(host=host, port=port, decode_responses=True, **kwargs)
                pubsub = client.pubsub(ignore_subscribe_messages=True)  # type: ignore[no-untyped-call]
                pubsub.subscribe(*FAILOVER_BEGUN, *FAILOVER_ENDED)
                subscribed_at = time.monotonic()
                while not self._over():
                    message = pubsub.get_message(timeout=1.0)  # no pool is held while it waits
                    if time.monotonic() - subscribed_at > 5 * _WATCH_BACKOFF_MAX:
                        wait = 0.1  # it lived: a later failure is a new one
                    if message is not None:
                        self._tell(str(message["channel"]), str(message["data"]))
            except Exception as exc:  # a sentinel away or refusing: its events are missed meanwhile
                if not warned:
                    warned = True
                    logger.warning("cannot listen to sentinel %s:%s for failover events (%s); trying again, and "
                                   "asking the sentinels every %.0f s meanwhile", host, port, exc, MASTER_RECHECK)
                time.sleep(wait)
                wait = min(wait * 2, _WATCH_BACKOFF_MAX)
            finally:
                for closable in (pubsub, client):
                    with contextlib.suppress(Exception):  # closing a connection that broke
                        if closable is not None:
                            closable.close()

    def _tell(self, channel: str, data: str) -> None:
        """Tell every pool of an event (a method of its own: no pool outlives it in ``_listen``'s frame)."""
        with _watches_lock:  # a WeakSet changed by another thread while it is read raises
            pools = list(self.pools)
        for pool in pools:
            _note_failover_event(pool, channel, data)


_watches: dict[tuple[Any, ...], _FailoverWatch] = {}
_watches_lock = threading.Lock()


def _forget_watches_in_child() -> None:
    """A forked child has none of its parent's threads (and may hold a lock a parent's thread held)."""
    global _watches_lock
    _watches_lock = threading.Lock()
    _watches.clear()


os.register_at_fork(after_in_child=_forget_watches_in_child)


def _watch_failovers(pool: Any) -> None:
    """Have ``pool`` told of its service's failover events (``_FailoverWatch``), once per process;
    ``connect`` and ``connect_async`` say where the sentinels are (``_tell_where_sentinels_are``)."""
    if getattr(pool, "_qc_watch_pid", None) == os.getpid():
        return
    found = getattr(pool, "_qc_sentinels", None)
    if found is None:
        return
    ref, key, nodes, kwargs = found
    real = ref()
    if real is None:
        return
    with _watches_lock:
        watch = _watches.get(key)
        if watch is None or watch.ended:
            try:
                watch = _watches[key] = _FailoverWatch(key, nodes, kwargs)
            except RuntimeError:  # no thread can be started now: the periodic questions still run
                return
        watch.pools.add(real)
        pool._qc_watch_pid = os.getpid()


def _note_failover_event(pool: Any, channel: str, data: str) -> None:
    """A sentinel's event: about ``pool``'s master, its next command asks the sentinels (whose leader
    then says the master is being failed over), and a command that was not going to ask refuses the
    master meanwhile (``_former_master``; cleared by the next answers)."""
    words = data.split()
    if channel == "+switch-master":  # "<master name> <old ip> <old port> <new ip> <new port>"
        name, address = (words[0], None) if words else ("", None)
    elif "@" in words and len(words) >= words.index("@") + 4:  # "<type> <name> <ip> <port> @ <master> <ip> <port>"
        at = words.index("@")
        name, address = words[at + 1], (words[at + 2], words[at + 3])
    elif len(words) >= 4 and words[0] == "master":  # "master <name> <ip> <port>"
        name, address = words[1], (words[2], words[3])
    else:
        return
    if name != pool.service_name:
        return
    if channel in FAILOVER_BEGUN and address is not None and address[1].isdigit():
        pool._qc_event_replaced = frozenset({(address[0], int(address[1]))})
    pool._qc_event_at = time.monotonic()
    pool._qc_checked_at = -math.inf


class _AskTheSentinels:
    """A master connection that asks the sentinels where the master is: before every (re)connection,
    and, while connected, at most every ``MASTER_RECHECK`` seconds per client.

    redis-py's ``SentinelManagedConnection`` asks only in ``connect()``, which its pool calls when it
    hands a connection out. Two gaps follow. A connection kept outside the pool (``Scripts.dedicated()``:
    the worker's fetcher and acker) reconnects from ``send_command`` through ``connect_check_health``,
    which skips the question: a new one went to the class's default address (localhost:6379), and one
    that lost its master kept dialling the dead master's address after a failover. And a connection
    that is never broken never asks again: when a master stalls (a paused VM, a partition) long enough
    for the sentinels to promote a replica and then resumes, the clients still connected to it went on
    writing to it until the sentinels demoted it (about 10 s later), and every one of those
    acknowledged writes was then discarded. Now a connection whose server the sentinels no longer
    name is closed before it sends, and the command fails with ``ConnectionError`` (redis-py's retry,
    or the caller's, sends it again, to the new master).

    Every sentinel is asked, and the answer with the highest configuration epoch wins: a sentinel
    that has not yet heard of a failover (they tell each other every 2 s) still names the old master.
    """

    def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        this = cast(Any, self)
        if this._sock is None and this.connection_pool.is_master:
            pool = this.connection_pool
            address = _newest_master(_ask_sentinels(pool, time.monotonic()))
            this.host, this.port = address or pool.get_master_address()  # redis-py's: MasterNotFoundError
        return super().connect_check_health(*args, **kwargs)  # type: ignore[misc]

    def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        this = cast(Any, self)
        if this._sock is not None and this.connection_pool.is_master:
            pool = this.connection_pool
            now = time.monotonic()
            if now - getattr(pool, "_qc_checked_at", 0.0) >= MASTER_RECHECK:
                _newest_master(_ask_sentinels(pool, now))
            _leave_a_former_master(this, pool)
        return super().send_packed_command(*args, **kwargs)  # type: ignore[misc]


def _ask_sentinels(pool: Any, now: float) -> list[Any]:
    """``SENTINEL MASTER <service>`` of every sentinel not skipped (a failing one is skipped a while)."""
    _watch_failovers(pool)
    answers = []
    for sentinel in _sentinels_to_ask(pool, now):
        try:
            answers.append(sentinel.sentinel_master(pool.service_name))
        except redis.RedisError:
            _skip_sentinel(pool, sentinel, now)
    _note_answers(pool, answers, now)
    return answers


async def _ask_sentinels_async(pool: Any, now: float) -> list[Any]:
    _watch_failovers(pool)
    answers = []
    for sentinel in _sentinels_to_ask(pool, now):
        try:
            answers.append(await sentinel.sentinel_master(pool.service_name))
        except redis.RedisError:
            _skip_sentinel(pool, sentinel, now)
    _note_answers(pool, answers, now)
    return answers


def _sentinels_to_ask(pool: Any, now: float) -> list[Any]:
    skipped: dict[int, float] = getattr(pool, "_qc_skipped", {})
    return [s for s in pool.sentinel_manager.sentinels if skipped.get(id(s), 0.0) <= now]


def _skip_sentinel(pool: Any, sentinel: Any, now: float) -> None:
    skipped: dict[int, float] = getattr(pool, "_qc_skipped", {})
    skipped[id(sentinel)] = now + SENTINEL_SKIP
    pool._qc_skipped = skipped


def _note_answers(pool: Any, answers: list[Any], now: float) -> None:
    """Remember, on the pool that all its connections share, when the sentinels were asked and the
    master they named. While none names a master that is up (a failover under way), ask again soon,
    and remember the servers that the sentinels agree are down (objectively down: a quorum) or are
    replacing (``PROMOTING``): connections to them are closed before they send (``_former_master``)."""
    newest = _newest_master(answers)
    if newest is not None:
        pool._qc_master, pool._qc_down, pool._qc_replaced = newest, frozenset(), frozenset()
        pool._qc_checked_at = now
    elif not answers:  # no sentinel answered (or every one is left out a while): the master known may be
        # stale, so none is refused for not being it (redis-py finds the master again when one refuses writes)
        pool._qc_master = None
        pool._qc_checked_at = now - MASTER_RECHECK + IN_FLUX_RECHECK
    else:
        pool._qc_down = frozenset((str(a["ip"]), int(a["port"])) for a in answers
                                  if isinstance(a, dict) and a.get("is_odown"))
        pool._qc_replaced = _being_replaced(answers)
        pool._qc_checked_at = now - MASTER_RECHECK + IN_FLUX_RECHECK
    if answers and getattr(pool, "_qc_event_at", -math.inf) < now:  # these answers came after the last event
        pool._qc_event_replaced = frozenset()
    else:  # an event came while the sentinels were asked: ask again at the next command
        pool._qc_checked_at = -math.inf


# The failover states (``SENTINEL MASTER``'s ``failover-state``, shown by the sentinel that leads the
# failover) once a replica is being promoted: from then on, writes that the old master takes are lost
# when it is demoted, though every other sentinel still names it until the switch is announced. The
# leader also flags the master ``failover_in_progress`` from the failover's start: a client refuses
# the master from then on (a refusal the caller is told of, rather than a write lost later).
PROMOTING = frozenset({"send_slaveof_noone", "wait_promotion", "reconf_slaves", "update_config"})


def _being_replaced(answers: list[Any]) -> frozenset[tuple[str, int]]:
    """The masters a sentinel is failing over (``failover_in_progress``, or a state of ``PROMOTING``)."""
    return frozenset((str(a["ip"]), int(a["port"])) for a in answers
                     if isinstance(a, dict) and (a.get("failover-state") in PROMOTING
                                                 or "failover_in_progress" in str(a.get("flags", ""))))


def _newest_master(answers: list[Any]) -> tuple[str, int] | None:
    """The master that the ``SENTINEL MASTER`` answers name in the newest configuration (the highest
    epoch), or None while that configuration names no master that is up: a sentinel failing over has
    a higher epoch than one that, not yet told, still names the old master as up; and while a
    sentinel promotes a replica, the master it replaces is named by the others until the switch."""
    states = [a for a in answers if isinstance(a, dict)]
    if not states:
        return None
    newest = max(int(a.get("config-epoch") or 0) for a in states)
    replaced = _being_replaced(states)
    for state in states:
        if int(state.get("config-epoch") or 0) == newest and state.get("is_master") \
                and not state.get("is_sdown") and not state.get("is_odown") \
                and "failover_in_progress" not in str(state.get("flags", "")) \
                and (str(state["ip"]), int(state["port"])) not in replaced:
            return str(state["ip"]), int(state["port"])
    return None


def _former_master(connection: Any, pool: Any) -> str | None:
    """Why ``connection`` must not be used any more, or None: its server is not the master the sentinels
    name now, or the sentinels agree that it is down (a stalled master that came back mid-failover:
    what it takes now is lost when it is demoted)."""
    address = (connection.host, int(connection.port))
    master = getattr(pool, "_qc_master", None)
    if address in getattr(pool, "_qc_down", ()):
        return f"{address[0]}:{address[1]} is no longer the master: the sentinels agree it is down"
    if address in getattr(pool, "_qc_replaced", ()) or address in getattr(pool, "_qc_event_replaced", ()):
        return (f"{address[0]}:{address[1]} is being replaced: the sentinels are promoting a replica in its place "
                "(what it takes now would be lost)")
    if master is not None and master != address:
        return f"{address[0]}:{address[1]} is no longer the master: the sentinels name {master[0]}:{master[1]}"
    return None


def _leave_a_former_master(connection: Any, pool: Any) -> None:
    why = _former_master(connection, pool)
    if why:
        connection.disconnect()
        raise redis.ConnectionError(why)


class _SentinelConnection(_AskTheSentinels, redis.sentinel.SentinelManagedConnection):
    pass


class _SentinelSSLConnection(_AskTheSentinels, redis.sentinel.SentinelManagedSSLConnection):
    pass


class _AskTheSentinelsAsync:
    """``_AskTheSentinels`` for asyncio connections."""

    async def connect_check_health(self, *args: Any, **kwargs: Any) -> Any:
        this = cast(Any, self)
        if not this.is_connected and this.connection_pool.is_master:
            pool = this.connection_pool
            address = _newest_master(await _ask_sentinels_async(pool, time.monotonic()))
            this.host, this.port = address or await pool.get_master_address()
        return await super().connect_check_health(*args, **kwargs)  # type: ignore[misc]

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        this = cast(Any, self)
        if this.is_connected and this.connection_pool.is_master:
            pool = this.connection_pool
            now = time.monotonic()
            if now - getattr(pool, "_qc_checked_at", 0.0) >= MASTER_RECHECK:
                await _ask_sentinels_async(pool, now)
            why = _former_master(this, pool)
            if why:
                await this.disconnect()
                raise redis.ConnectionError(why)
        return await super().send_packed_command(*args, **kwargs)  # type: ignore[misc]


class _SentinelAsyncConnection(_AskTheSentinelsAsync, redis.asyncio.sentinel.SentinelManagedConnection):
    pass


class _SentinelAsyncSSLConnection(_AskTheSentinelsAsync, redis.asyncio.sentinel.SentinelManagedSSLConnection):
    pass


def _sentinel_kwargs(target: RedisTarget, socket_timeout: float, connect_timeout: float,
                     retry: Any) -> dict[str, Any]:
    """How to reach the sentinels: their own credentials, and ``retry`` (none): the master's address is
    asked of each sentinel in turn, so one that does not answer is passed over at once (with redis-py's
    default retries, each sentinel down or refusing the password cost seconds, before the next one was
    asked); the master connection's own retries repeat the whole round."""
    return {"socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout,
            "username": target.options.get("sentinel_username"),
            "password": target.options.get("sentinel_password"), "retry": retry, **_tls_kwargs(target)}


def connect(target: RedisTarget, *, socket_timeout: float, connect_timeout: float) -> redis.Redis:
    """A new client for ``target`` (strings decoded as UTF-8).

    A cluster client is a ``redis.cluster.RedisCluster``: it answers the same commands, routing each
    to the node that holds its keys, so it is typed as ``redis.Redis`` here.
    """
    if target.kind == "single":
        return redis.Redis.from_url(target.url, decode_responses=True, socket_timeout=socket_timeout,
                                    socket_connect_timeout=connect_timeout, health_check_interval=30,
                                    max_connections=MAX_CONNECTIONS)
    kwargs = _common_kwargs(target, socket_timeout, connect_timeout)
    if target.kind == "cluster":
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in target.nodes]  # type: ignore[no-untyped-call]
        with broker_errors():  # it reads the slot map at once: no node answering is RedisUnavailable
            return cast("redis.Redis", redis.cluster.RedisCluster(startup_nodes=nodes, health_check_interval=30,
                                                                    **kwargs))
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.nodes), sentinel_kwargs=_sentinel_kwargs(target, socket_timeout, connect_timeout,
                                                              redis.retry.Retry(NoBackoff(), 0)))
    connection_class = _SentinelSSLConnection if target.tls else _SentinelConnection
    client = sentinel.master_for(  # type: ignore[no-untyped-call]
        target.service, db=target.db, health_check_interval=30, connection_class=connection_class, **kwargs)
    _tell_where_sentinels_are(client.connection_pool.proxy, target, socket_timeout, connect_timeout)
    return cast("redis.Redis", client)


# The errors on which an asyncio client sends a command again (redis-py's asyncio client retries none
# unless told, where its sync client retries these): a connection that broke, or that a sentinel
# client closed because its server is no longer the master (``_AskTheSentinels``).
ASYNC_RETRY_ON = (redis.ConnectionError,)


def connect_async(target: RedisTarget, *, socket_timeout: float, connect_timeout: float) -> redis.asyncio.Redis:
    """``connect`` for asyncio: a ``redis.asyncio`` client of the same topology. A command whose
    connection broke is sent again on a new one, as the sync client does (``ASYNC_RETRY_ON``)."""
    if target.kind == "single":
        return redis.asyncio.Redis.from_url(target.url, decode_responses=True, socket_timeout=socket_timeout,
                                            socket_connect_timeout=connect_timeout, max_connections=MAX_CONNECTIONS,
                                            retry_on_error=list(ASYNC_RETRY_ON))
    kwargs = _common_kwargs(target, socket_timeout, connect_timeout)
    if target.kind == "cluster":
        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in target.nodes]
        return cast("redis.asyncio.Redis", redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **kwargs))
    sentinel = redis.asyncio.sentinel.Sentinel(  # type: ignore[no-untyped-call]
        list(target.nodes), sentinel_kwargs=_sentinel_kwargs(target, socket_timeout, connect_timeout,
                                                              redis.asyncio.retry.Retry(NoBackoff(), 0)))
    connection_class = _SentinelAsyncSSLConnection if target.tls else _SentinelAsyncConnection
    client = sentinel.master_for(
        target.service, db=target.db, connection_class=connection_class, retry_on_error=list(ASYNC_RETRY_ON),
        **kwargs)
    _tell_where_sentinels_are(client.connection_pool, target, socket_timeout, connect_timeout)
    return cast("redis.asyncio.Redis", client)


def _tell_where_sentinels_are(pool: Any, target: RedisTarget, socket_timeout: float, connect_timeout: float) -> None:
    """What ``_watch_failovers`` needs, on the object the connections see as their pool (redis-py's
    proxy of a sync pool): itself (weakly: a watch ends once none of its pools is left), which watch
    (the sentinels, the service and how to reach them), the sentinels, their settings."""
    kwargs = _sentinel_kwargs(target, socket_timeout, connect_timeout, redis.retry.Retry(NoBackoff(), 0))
    if hasattr(socket, "TCP_KEEPIDLE"):  # a sentinel gone without a word is noticed in about 25 s
        kwargs.update(socket_keepalive=True, socket_keepalive_options={
            socket.TCP_KEEPIDLE: 10, socket.TCP_KEEPINTVL: 5, socket.TCP_KEEPCNT: 3})
    key = (tuple(sorted(target.nodes)), target.tls, tuple(sorted(target.options.items())))  # how to reach them
    pool._qc_sentinels = (weakref.ref(pool), key, list(target.nodes), kwargs)


# A single-server sync client's connection class, and the asyncio one that talks to the same server.
_ASYNC_CONNECTION_CLASSES: dict[type, type] = {
    redis.Connection: redis.asyncio.Connection,
    redis.SSLConnection: redis.asyncio.SSLConnection,
    redis.UnixDomainSocketConnection: redis.asyncio.UnixDomainSocketConnection,
}
# Settings a sync pool holds as objects of its own kind, which an asyncio connection cannot use.
_SYNC_ONLY_SETTINGS = frozenset({"retry", "redis_connect_func", "event_dispatcher", "command_packer"})


def _single_server_pool(client: object) -> redis.ConnectionPool | None:
    pool = getattr(client, "connection_pool", None)  # a sentinel's pool has a connection class of its own
    if isinstance(pool, redis.ConnectionPool) and pool.connection_class in _ASYNC_CONNECTION_CLASSES:
        return pool
    return None


def async_like(client: object, socket_timeout: float) -> redis.asyncio.Redis | None:
    """An asyncio client to the one server the sync ``client`` talks to, with the settings that mean
    the same to both (address, database, credentials, TLS, keepalive); None when ``client`` is not a
    single-server client."""
    pool = _single_server_pool(client)
    if pool is None:
        return None
    connection_class = _ASYNC_CONNECTION_CLASSES[pool.connection_class]
    accepted = {name for cls in connection_class.__mro__ if "__init__" in vars(cls)
                for name in inspect.signature(vars(cls)["__init__"]).parameters} - _SYNC_ONLY_SETTINGS
    kwargs = {name: value for name, value in pool.connection_kwargs.items() if name in accepted}
    kwargs.update(socket_timeout=socket_timeout, decode_responses=True, retry_on_error=list(ASYNC_RETRY_ON))
    # from_pool: the client owns its pool, so its aclose() closes the pool's connections too (a client
    # given connection_pool= leaves them open until the garbage collector finds them)
    return redis.asyncio.Redis.from_pool(redis.asyncio.ConnectionPool(
        connection_class=connection_class, max_connections=MAX_CONNECTIONS, **kwargs))


def is_cluster_client(client: object) -> bool:
    """True for a Redis Cluster client (sync or asyncio): commands without keys go to one node only."""
    return isinstance(client, (redis.cluster.RedisCluster, redis.asyncio.cluster.RedisCluster))


def info_of_every_master(client: redis.Redis, section: str | None = None) -> list[dict[str, Any]]:
    """``INFO`` (or one ``section`` of it) of the one server, or of every master of a cluster (in node order)."""
    if is_cluster_client(client):
        cluster = cast("redis.cluster.RedisCluster", client)
        replies = cluster.info(section, target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        if isinstance(replies, dict) and replies and all(isinstance(v, dict) for v in replies.values()):
            return [replies[name] for name in sorted(replies)]
        return [replies]
    return [client.info(section)]


def follows_sentinels(client: object) -> bool:
    """True for a sentinel client: its connections learn that the master moved when they send a
    command (``_AskTheSentinels``), so a connection that only reads (a subscription) must send one
    now and then."""
    return isinstance(getattr(client, "connection_pool", None), redis.sentinel.SentinelConnectionPool)


def sharded_pubsub(client: redis.Redis) -> bool | None:
    """True for a cluster whose masters all run Redis 7 or later: wake-ups and cancels then use
    sharded pub/sub (``SPUBLISH``/``SSUBSCRIBE``), which keeps each message on its channel's shard.
    Elsewhere (one server, a sentinel's master, a 6.2 cluster) classic pub/sub, which a cluster forwards
    to every node. None when a cluster cannot be asked now (ask again later). Where INFO is denied (an
    ACL user with ``-@dangerous``), ``PUBSUB SHARDNUMSUB`` answers instead: clients and workers must
    agree, and one that guessed classic pub/sub on a Redis 7 cluster lost every wake-up it sent."""
    if not is_cluster_client(client):
        return False
    try:
        infos = info_of_every_master(client, "server")
    except redis.ResponseError:
        return _every_master_has_shard_channels(client)
    except redis.RedisError:
        return None
    versions = [str(i.get("redis_version", "0")) for i in infos]
    return bool(versions) and all(int(v.split(".")[0] or 0) >= 7 for v in versions)


def _every_master_has_shard_channels(client: redis.Redis) -> bool | None:
    """Whether every master of a cluster knows sharded pub/sub: ``PUBSUB SHARDNUMSUB`` (Redis 7, in the
    ``@pubsub`` category a user who publishes has) answers; an unknown subcommand (6.2), or a refusal,
    means classic pub/sub; None when they cannot be asked now."""
    cluster = cast("redis.cluster.RedisCluster", client)
    try:
        cluster.execute_command(  # type: ignore[no-untyped-call]
            "PUBSUB SHARDNUMSUB", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
    except redis.ResponseError:
        return False
    except redis.RedisError:
        return None
    return True


def unknown_sentinel_master(client: Any) -> str | None:
    """The master name of a sentinel client's URL when the sentinels that answer all say they monitor
    no master by that name (a typo: no failover will ever make it appear); else None, also when none
    answers or the client is not a sentinel's."""
    pool = client.connection_pool
    manager = getattr(pool, "sentinel_manager", None)
    if manager is None:
        return None
    refused = 0
    for sentinel in manager.sentinels:
        try:
            sentinel.sentinel_master(pool.service_name)
            return None  # this one monitors it
        except redis.ResponseError as exc:
            if "no such master" not in str(exc).lower():
                return None
            refused += 1
        except redis.RedisError:
            continue
    return str(pool.service_name) if refused else None


def eviction_policy(client: redis.Redis) -> str | None:
    """``maxmemory-policy`` of the server, or on a cluster the first master's that is not
    ``noeviction`` (any master that may evict can lose tasks); None when no server says."""
    if is_cluster_client(client):
        cluster = cast("redis.cluster.RedisCluster", client)
        replies = cluster.config_get("maxmemory-policy", target_nodes=redis.cluster.RedisCluster.PRIMARIES)
        nodes = replies.values() if "maxmemory-policy" not in replies else [replies]
        policies = [str(r.get("maxmemory-policy")) for r in nodes if isinstance(r, dict) and r.get("maxmemory-policy")]
        return next((p for p in policies if p != "noeviction"), policies[0] if policies else None)
    policy = cast("dict[str, Any]", client.config_get("maxmemory-policy")).get("maxmemory-policy")
    return str(policy) if policy else None
