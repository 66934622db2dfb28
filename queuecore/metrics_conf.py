"""Validation of ``QUEUECORE['METRICS']`` (used by the system checks; needs no prometheus_client)."""

from __future__ import annotations

import re
from typing import Any

METRICS_KEYS = frozenset({"TOKEN", "PERMISSION", "PORT", "ADDR", "NAMESPACE"})
_NAMESPACE = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")


def metrics_setting_errors(value: Any) -> list[str]:
    """What is wrong with the user's ``QUEUECORE['METRICS']`` (empty: nothing)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return ["must be a dict (TOKEN, PERMISSION, PORT, ADDR, NAMESPACE)"]
    errors = []
    unknown = sorted(str(k) for k in set(value) - METRICS_KEYS)
    if unknown:
        errors.append(f"unknown key(s): {', '.join(unknown)}")
    token = value.get("TOKEN")
    if token is not None and not (isinstance(token, str) and token.strip()):
        errors.append("TOKEN must be a non-empty string or None")
    elif isinstance(token, str) and token != token.strip():  # an HTTP header cannot carry it: never matched
        errors.append("TOKEN has white space around it (a secret file's newline?): strip it, e.g. "
                      "open(path).read().strip()")
    permission = value.get("PERMISSION")
    if permission is not None and not (isinstance(permission, str) and permission.count(".") == 1):
        errors.append("PERMISSION must be '<app_label>.<codename>' or None")
    port = value.get("PORT")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535):
        errors.append("PORT must be a port number (0-65535) or None")
    addr = value.get("ADDR", "127.0.0.1")
    if not (isinstance(addr, str) and addr):
        errors.append("ADDR must be an address to listen on, e.g. '127.0.0.1' or '0.0.0.0'")
    namespace = value.get("NAMESPACE", "queuecore")
    if not (isinstance(namespace, str) and _NAMESPACE.match(namespace)):
        errors.append("NAMESPACE must be a Prometheus name: letters, digits and _, not starting with a digit")
    return errors
