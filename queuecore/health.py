"""The readiness view: is this site's Redis reachable, and how fast? JSON, 200 or 503.

``path("queuecore/", include("queuecore.urls"))`` serves it at ``queuecore/ready/`` (or route
``queuecore.health.readiness`` yourself). It needs no login: it says only whether Redis answers and
its latency, never where Redis is.
"""

from __future__ import annotations

from dataclasses import replace

from django.http import HttpRequest, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from queuecore.conf import get_config
from queuecore.core.errors import RedisUnavailable
from queuecore.core.liveness import ping

READINESS_TIMEOUT = 2.0  # seconds: a probe must answer before the orchestrator's own timeout


@never_cache
@require_safe
def readiness(request: HttpRequest) -> JsonResponse:
    connection = replace(get_config().connection, socket_timeout=READINESS_TIMEOUT,
                         connect_timeout=READINESS_TIMEOUT)
    error: str | None
    try:
        client = connection.connect()  # a cluster client reads the slot map here: no node answering raises
    except RedisUnavailable as exc:
        ok, latency, error = False, 0.0, f"{type(exc).__name__}: {exc}"
    else:
        try:
            ok, latency, error = ping(client)
        finally:
            client.close()
    redis_status: dict[str, object] = {"ok": ok, "latency_ms": round(latency * 1000, 3)}
    if error is not None:  # the error's type only: its text may name the host
        redis_status["error"] = error.split(":", 1)[0]
    body = {"status": "ok" if ok else "unavailable", "redis": redis_status}
    return JsonResponse(body, status=200 if ok else 503)
