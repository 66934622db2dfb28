"""The application object every command receives: options, terminal, and a lazily built Inspector.

Nothing here touches Redis until a command asks for ``app.inspector`` or ``app.client``, so
``--help`` and usage errors never need a server.
"""

from __future__ import annotations

import getpass
import importlib
import os
import socket
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

from queuecore.core.client import Client
from queuecore.core.config import CLIENT_DEFAULT_SETTINGS, DEFAULT_REDIS_URL, ConnectionConfig, redact_url
from queuecore.core.errors import ConfigurationError
from queuecore.core.inspector import Inspector
from queuecore.core.keys import DEFAULT_PREFIX
from queuecore.core.registry import TaskRegistry

from .terminal import Terminal


@dataclass
class GlobalOptions:
    """The root group's options, as given on the command line (``None`` = not given)."""

    redis_url: str | None = None
    prefix: str | None = None
    settings: str | None = None
    json: bool = False
    color: bool | None = None
    debug: bool = False


@dataclass(frozen=True)
class ConnectionDefaults:
    """Connection values filled in by a host program (``manage.py adminctl`` reads ``QUEUECORE``).

    They replace the environment and Django-settings lookup; command-line flags still win. The values
    are the host's settings as written, checked when the connection is resolved (a bad one is then one
    line and exit 2); ``problem`` is what the host found wrong with its settings, refused the same way.
    """

    redis_url: Any = None
    prefix: Any = None
    problem: str | None = None
    client: Mapping[str, Any] = field(default_factory=dict)  # QUEUECORE key -> value: the client's defaults


def read_django_settings(module: str) -> dict[str, Any]:
    """``QUEUECORE`` of a Django settings module, read by importing the module (Django itself is not set up).

    The current directory is put on ``sys.path`` first, as ``manage.py`` would have it.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    try:
        mod = importlib.import_module(module)
    except Exception as exc:  # ImportError, or the settings module itself failing
        raise ConfigurationError(f"cannot load Django settings {module!r}: {type(exc).__name__}: {exc}") from None
    value = getattr(mod, "QUEUECORE", {})
    if not isinstance(value, dict):  # as the Django app's check refuses it (queuecore.E001)
        raise ConfigurationError(f"QUEUECORE in Django settings {module!r} must be a dict, not "
                                 f"{type(value).__name__}")
    return value


def resolve_connection(options: GlobalOptions, environ: Mapping[str, str],
                       injected: ConnectionDefaults | None = None) -> ConnectionConfig:
    """Where Redis is: flag, else host defaults, else env, else Django settings, else the default.
    A flag or a setting given empty is refused, not taken as absent (``--prefix "$P"`` with ``P``
    unset must not act on the default prefix's data); an empty environment variable is unset, as the
    site reads it."""
    for flag, value in (("--redis-url", options.redis_url), ("--prefix", options.prefix)):
        if value is not None and not value.strip():
            raise ConfigurationError(f"{flag} is empty: give a value, or leave the option out")
    url = options.redis_url
    prefix = options.prefix
    client: Mapping[str, Any] = {}
    where = ""
    if injected is not None:
        if injected.problem:
            raise ConfigurationError(injected.problem)
        where = "the Django settings"
        url = url or _given_setting(injected.redis_url, "REDIS_URL", where)
        prefix = prefix or _given_setting(injected.prefix, "KEY_PREFIX", where)
        client = injected.client
    else:
        url = url or environ.get("QUEUECORE_REDIS_URL") or None
        prefix = prefix or environ.get("QUEUECORE_KEY_PREFIX") or None
        module = options.settings or environ.get("DJANGO_SETTINGS_MODULE")
        if module and (url is None or prefix is None):
            queuecore_settings = read_django_settings(module)
            where = f"Django settings {module!r}"
            if url is None and "REDIS_URL" in queuecore_settings:
                url = _given_setting(queuecore_settings["REDIS_URL"], "REDIS_URL", where)
            if prefix is None and "KEY_PREFIX" in queuecore_settings:
                prefix = _given_setting(queuecore_settings["KEY_PREFIX"], "KEY_PREFIX", where)
            client = queuecore_settings
    defaults = {name: client[key] for key, name in CLIENT_DEFAULT_SETTINGS.items() if key in client}
    try:
        return ConnectionConfig(redis_url=url or DEFAULT_REDIS_URL, key_prefix=prefix or DEFAULT_PREFIX, **defaults)
    except ConfigurationError as exc:  # one of the client's defaults: name the setting it came from
        key = next((k for k, name in CLIENT_DEFAULT_SETTINGS.items() if name == exc.field), None)
        if key is None:
            raise
        raise ConfigurationError(f"QUEUECORE[{key!r}] in {where}: {exc}", field=exc.field) from None


def _given_setting(value: Any, name: str, where: str) -> str:
    """A connection setting (``QUEUECORE[name]``) as given: an empty or non-text value is refused, as the
    site's own checks refuse it (queuecore.E002), not taken for the default."""
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"QUEUECORE[{name!r}] in {where} must be a non-empty string, got {value!r}")
    return value


def default_actor() -> str:
    """``cli:<user>@<host>``, the name under which actions are written to the audit log."""
    try:
        user = getpass.getuser()
    except Exception:  # no login name (some containers)
        user = f"uid{os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"cli:{user}@{socket.gethostname()}"


class App:
    """What a command needs: the options, the terminal, the Inspector (and a Client for enqueue)."""

    def __init__(self, options: GlobalOptions, terminal: Terminal, *, injected: ConnectionDefaults | None = None,
                 environ: Mapping[str, str] | None = None) -> None:
        self.options = options
        self.terminal = terminal
        self.injected = injected
        self.environ = os.environ if environ is None else environ
        self._base: Inspector | None = None
        self._client: Client | None = None

    @property
    def json(self) -> bool:
        return self.options.json

    @json.setter
    def json(self, value: bool) -> None:
        self.options.json = value

    @cached_property
    def connection(self) -> ConnectionConfig:
        return resolve_connection(self.options, self.environ, self.injected)

    @property
    def redacted_url(self) -> str | None:
        """The Redis URL in use, password replaced by ``***``; ``None`` before it is resolved."""
        if "connection" not in self.__dict__:
            return None
        return redact_url(self.connection.redis_url)

    def secrets(self) -> list[str]:
        """Strings that must never be printed (the Redis password of every URL we may have seen)."""
        urls = [self.options.redis_url, self.injected.redis_url if self.injected else None,
                self.environ.get("QUEUECORE_REDIS_URL")]
        if "connection" in self.__dict__:
            urls.append(self.connection.redis_url)
        found = []
        for url in urls:
            if not url or not isinstance(url, str):
                continue
            try:
                ConnectionConfig(redis_url=url)
                parts = urlsplit(url)
            except (ConfigurationError, ValueError):
                continue  # refused, and its refusal shows the URL redacted (its parts may not split right)
            if parts.password:
                found += [parts.password, unquote(parts.password)]
            found += [value for name, value in parse_qsl(parts.query)
                      if name.lower().endswith("password") and value]
        return found

    def scrub(self, text: str) -> str:
        for secret in self.secrets():
            text = text.replace(secret, "***")
        return text

    @cached_property
    def inspector(self) -> Inspector:
        """The Inspector, recording actions in the audit log as ``cli:<user>@<host>``."""
        self._base = Inspector(connection=self.connection)
        return self._base.as_actor(default_actor())

    def now(self) -> float:
        """Redis's time (the Inspector's clock), so the ages a command prints agree with what workers wrote."""
        return self.inspector.clock.now()

    @property
    def client(self) -> Client:
        """A Client sharing the Inspector's connection; it knows no handlers, so payloads are not checked
        against a handler's signature."""
        if self._client is None:
            self._client = Client(connection=self.connection, redis_client=self.inspector.redis,
                                  registry=TaskRegistry())
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
        if self._base is not None:
            self._base.close()
