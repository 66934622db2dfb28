"""The Django view serving Prometheus metrics (the ``metrics`` extra).

``path("metrics", include("queuecore.metrics_urls"))`` in the site's urls.py. A request is admitted
with ``Authorization: Bearer <QUEUECORE['METRICS']['TOKEN']>`` (compared in constant time), or from
a logged-in user holding ``QUEUECORE['METRICS']['PERMISSION']`` (default ``queuecore.view_metrics``,
which superusers hold); anything else gets 401 (no credentials) or 403. ``?name[]=<sample name>``
(repeatable) limits the answer to those samples, as prometheus_client's own server does.
"""

from __future__ import annotations

import hmac
import threading
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry

from queuecore.conf import get_config
from queuecore.core.errors import RedisUnavailable
from queuecore.core.inspector import Inspector
from queuecore.metrics import DEFAULT_NAMESPACE, make_registry, render

_lock = threading.Lock()
_registries: dict[tuple[Any, ...], tuple[Inspector, CollectorRegistry]] = {}


def allowed(request: HttpRequest) -> bool | None:
    """True: admitted; False: credentials given but refused; None: no credentials at all."""
    settings = get_config().metrics
    token = settings.get("TOKEN")
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, given = header.partition(" ")
        if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), str(token).encode()):
            return True
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        permission = settings.get("PERMISSION")
        return bool(permission) and user.has_perm(permission)
    return False if header else None


def registry() -> CollectorRegistry:
    """The registry of the current settings (one Inspector per connection and namespace)."""
    config = get_config()
    namespace = config.metrics.get("NAMESPACE") or DEFAULT_NAMESPACE
    key = (config.connection.redis_url, config.connection.key_prefix, namespace)
    with _lock:
        found = _registries.get(key)
        if found is None:
            inspector = Inspector(connection=config.connection)
            found = _registries[key] = (inspector, make_registry(inspector, namespace))
        return found[1]


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    verdict = allowed(request)
    if verdict is None:
        response = HttpResponse("authentication required\n", status=401, content_type="text/plain")
        response["WWW-Authenticate"] = 'Bearer realm="queuecore metrics"'
        return response
    if not verdict:
        return HttpResponse("forbidden\n", status=403, content_type="text/plain")
    names = request.GET.getlist("name[]")
    try:
        found = registry()
    except RedisUnavailable as exc:  # a cluster client reads the slot map when made: no node answered
        return HttpResponse(f"Redis is unreachable: {exc}\n", status=503, content_type="text/plain")
    return HttpResponse(render(found.restricted_registry(names) if names else found), content_type=CONTENT_TYPE_LATEST)
