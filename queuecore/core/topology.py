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

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, cast
from urllib.parse import parse_qsl, unquote, urlsplit

import redis
import redis.asyncio
import redis.asyncio.cluster
import redis.asyncio.sentinel
import redis.cluster
import redis.sentinel

from queuecore.core.errors import ConfigurationError

SINGLE_SCHEMES = ("redis", "rediss", "unix")
CLUSTER_SCHEMES = ("redis+cluster", "rediss+cluster")
SENTINEL_SCHEMES = ("redis+sentinel", "rediss+sentinel")
MAX_NODES = 64  # seed nodes or sentinels named in one URL
_TLS_OPTIONS = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile", "ssl_cert_reqs")
_CERT_REQS = ("none", "optional", "required")
_HOST_PORT = re.compile(r"^(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[A-Za-z0-9._-]+)):(?P<port>[0-9]{1,5})$")
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


def redact_url(url: str) -> str:
    """The Redis URL with any password replaced by ``***``, safe to print or log."""
    if not isinstance(url, str):
        return "<not a Redis URL>"
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, tail = rest.partition("/")
    userinfo, at, hosts = netloc.rpartition("@")
    if at and ":" in userinfo:
        netloc = userinfo.split(":", 1)[0] + ":***@" + hosts
    tail = re.sub(r"(?i)((?:sentinel_)?password=)[^&]*", r"\1***", tail)
    return f"{scheme}://{netloc}{slash}{tail}"


def _refuse(url: str, why: str) -> ConfigurationError:
    return ConfigurationError(f"invalid Redis URL {redact_url(url)!r}: {why}", field="redis_url")


def _parse_nodes(url: str, hosts: str) -> tuple[tuple[str, int], ...]:
    nodes: list[tuple[str, int]] = []
    for part in hosts.split(","):
        match = _HOST_PORT.fullmatch(part.strip())
        if not match or not 0 < int(match["port"]) < 65536:
            raise _refuse(url, f"{part.strip()!r} is not host:port (a port from 1 to 65535)")
        nodes.append((match["v6"] or match["host"], int(match["port"])))
    if len(nodes) > MAX_NODES:
        raise _refuse(url, f"at most {MAX_NODES} nodes")
    return tuple(dict.fromkeys(nodes))


def parse_redis_url(url: object) -> RedisTarget:
    """Parse and check a Redis URL (see the module); ``ConfigurationError`` names what is wrong."""
    if not isinstance(url, str) or not url:
        raise ConfigurationError(f"the Redis URL must be a non-empty string, got {url!r}", field="redis_url")
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme in SINGLE_SCHEMES:
        try:
            urlsplit(url).port  # noqa: B018  # redis-py parses the rest; a bad port is refused here, at once
        except ValueError as exc:
            raise _refuse(url, str(exc)) from None
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
    for name, value in parse_qsl(query, keep_blank_values=True):
        allowed = _TLS_OPTIONS + (("sentinel_username", "sentinel_password") if scheme in SENTINEL_SCHEMES else ())
        if name not in allowed:
            raise _refuse(url, f"unknown option {name!r} (allowed: {', '.join(allowed)})")
        if name in _TLS_OPTIONS and not tls:
            raise _refuse(url, f"{name} needs a TLS scheme (rediss+...)")
        if name == "ssl_cert_reqs" and value not in _CERT_REQS:
            raise _refuse(url, f"ssl_cert_reqs must be one of {', '.join(_CERT_REQS)}")
        options[name] = value
    parts = [p for p in path.split("/") if p]
    if scheme in CLUSTER_SCHEMES:
        if parts and parts != ["0"]:
            raise _refuse(url, "a Redis Cluster has database 0 only: end the URL with '/' or '/0'")
        return RedisTarget("cluster", url, nodes, username=username, password=password, tls=tls, options=options)
    if not parts or not _SERVICE.fullmatch(parts[0]) or len(parts) > 2:
        raise _refuse(url, "name the sentinel master after the hosts: "
                           "redis+sentinel://host:port,.../<master name>[/db]")
    db = 0
    if len(parts) == 2:
        if not parts[1].isdigit() or not 0 <= int(parts[1]) <= 15:
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


def _common_kwargs(target: RedisTarget, socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
    return {"decode_responses": True, "socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout,
            "username": target.username, "password": target.password, **_tls_kwargs(target)}


def _sentinel_kwargs(target: RedisTarget, socket_timeout: float, connect_timeout: float) -> dict[str, Any]:
    return {"socket_timeout": socket_timeout, "socket_connect_timeout": connect_timeout,
            "username": target.options.get("sentinel_username"),
            "password": target.options.get("sentinel_password"), **_tls_kwargs(target)}


def connect(target: RedisTarget, *, socket_timeout: float, connect_timeout: float) -> redis.Redis:
    """A new client for ``target`` (strings decoded as UTF-8).

    A cluster client is a ``redis.cluster.RedisCluster``: it answers the same commands, routing each
    to the node that holds its keys, so it is typed as ``redis.Redis`` here.
    """
    if target.kind == "single":
        return redis.Redis.from_url(target.url, decode_responses=True, socket_timeout=socket_timeout,
                                    socket_connect_timeout=connect_timeout, health_check_interval=30)
    kwargs = _common_kwargs(target, socket_timeout, connect_timeout)
    if target.kind == "cluster":
        nodes = [redis.cluster.ClusterNode(host, port) for host, port in target.nodes]  # type: ignore[no-untyped-call]
        return cast("redis.Redis", redis.cluster.RedisCluster(startup_nodes=nodes, health_check_interval=30,
                                                                **kwargs))
    sentinel = redis.sentinel.Sentinel(list(target.nodes),
                                       sentinel_kwargs=_sentinel_kwargs(target, socket_timeout, connect_timeout))
    return sentinel.master_for(target.service, db=target.db, health_check_interval=30, **kwargs)


def connect_async(target: RedisTarget, *, socket_timeout: float, connect_timeout: float) -> redis.asyncio.Redis:
    """``connect`` for asyncio: a ``redis.asyncio`` client of the same topology."""
    if target.kind == "single":
        return redis.asyncio.Redis.from_url(target.url, decode_responses=True, socket_timeout=socket_timeout,
                                            socket_connect_timeout=connect_timeout)
    kwargs = _common_kwargs(target, socket_timeout, connect_timeout)
    if target.kind == "cluster":
        nodes = [redis.asyncio.cluster.ClusterNode(host, port) for host, port in target.nodes]
        return cast("redis.asyncio.Redis", redis.asyncio.cluster.RedisCluster(startup_nodes=nodes, **kwargs))
    sentinel = redis.asyncio.sentinel.Sentinel(
        list(target.nodes), sentinel_kwargs=_sentinel_kwargs(target, socket_timeout, connect_timeout))
    return sentinel.master_for(target.service, db=target.db, **kwargs)


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


def sharded_pubsub(client: redis.Redis) -> bool | None:
    """True for a cluster whose masters all run Redis 7 or later: wake-ups and cancels then use
    sharded pub/sub (``SPUBLISH``/``SSUBSCRIBE``), which keeps each message on its channel's shard.
    Elsewhere (one server, a sentinel's master, a 6.2 cluster, INFO denied) classic pub/sub, which a
    cluster forwards to every node. None when a cluster cannot be asked now (ask again later)."""
    if not is_cluster_client(client):
        return False
    try:
        infos = info_of_every_master(client, "server")
    except redis.ResponseError:
        return False  # INFO denied: classic pub/sub works everywhere
    except redis.RedisError:
        return None
    versions = [str(i.get("redis_version", "0")) for i in infos]
    return bool(versions) and all(int(v.split(".")[0] or 0) >= 7 for v in versions)


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
