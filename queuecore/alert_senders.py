"""Django's alert senders: the ``alert_fired``/``alert_resolved`` signals and email through Django's
mail. The core brings the webhook (``queuecore.core.alerts.WebhookSender``).

In ``QUEUECORE["ALERTS"]["SENDERS"]``::

    "SENDERS": [
        "signal",                                                   # alert_fired / alert_resolved
        {"kind": "email", "to": ["ops@example.com"], "from_email": None, "subject_prefix": "[queuecore] "},
        {"kind": "webhook", "url": "https://hooks.example.com/qc", "timeout": 5, "retries": 3, "backoff": 1},
        "myproject.alerts.page_someone",                            # any callable f(event), dotted path
    ]

Each sender runs on a thread of its own in the worker that evaluates (never in a request).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

from django.dispatch import Signal
from django.utils.module_loading import import_string

from queuecore.core.alerts import AlertEvent, AlertSettings, SenderFn, parse_alerts
from queuecore.receivers import send_robustly

logger = logging.getLogger("queuecore.alerts")

alert_fired = Signal()  # sender=AlertEvent class, event=AlertEvent, alert=Alert
alert_resolved = Signal()


def send_signal(event: AlertEvent) -> None:
    """Send ``alert_fired`` or ``alert_resolved`` with ``event=`` and ``alert=`` to every receiver: one
    that raises does not keep the event from the others (``send_robust``); its exception is logged at
    ERROR naming it."""
    signal = alert_fired if event.action == "fired" else alert_resolved
    send_robustly(signal, logger, f"alert {event.alert.id} {event.action}", AlertEvent, event=event,
                  alert=event.alert)


class SignalSender:
    """The ``"signal"`` sender."""

    def __call__(self, event: AlertEvent) -> None:
        send_signal(event)

    def __repr__(self) -> str:
        return "SignalSender()"


class EmailSender:
    """``{"kind": "email", "to": [...]}``: one plain-text mail per event through Django's mail
    (``EMAIL_BACKEND``); ``from_email`` defaults to ``DEFAULT_FROM_EMAIL``."""

    def __init__(self, to: Sequence[str], from_email: str | None = None,
                 subject_prefix: str = "[queuecore] ") -> None:
        if isinstance(to, str) or not to or not all(isinstance(a, str) and "@" in a for a in to):
            raise ValueError(f"to must be a list of email addresses, got {to!r}")
        self.to = list(to)
        self.from_email = from_email
        self.subject_prefix = str(subject_prefix)

    def __call__(self, event: AlertEvent) -> None:
        from django.core.mail import send_mail

        a = event.alert
        subject = f"{self.subject_prefix}{event.action.upper()} {a.severity}: {a.id}"
        # a resolved alert carries what it said when it fired: say so, not as if it still held
        said = a.message if event.action == "fired" else f"No longer holds. When it fired: {a.message}"
        body = (f"{said}\n\nalert: {a.id}\nrule: {a.rule} ({a.kind})\nseverity: {a.severity}\n"
                f"since: {a.since_dt.isoformat()}\n{event.action}: {event.to_dict()['at']}\n")
        send_mail(subject.replace("\n", " "), body, self.from_email, self.to, fail_silently=False)

    def __repr__(self) -> str:
        return f"EmailSender(to={self.to!r})"


SENDER_KINDS: dict[str, Callable[..., SenderFn]] = {"signal": SignalSender, "email": EmailSender}


def parse_settings(spec: Any) -> AlertSettings:
    """``QUEUECORE["ALERTS"]`` with Django's sender kinds; a string that is not a kind is a dotted path
    to a callable ``f(event)``. Raises ``ConfigurationError`` naming the rule or sender."""
    if isinstance(spec, dict) and isinstance(spec.get("SENDERS"), (list, tuple)):
        kinds = dict(SENDER_KINDS)
        senders = []
        for sender in spec["SENDERS"]:
            if isinstance(sender, str) and sender not in kinds and sender != "webhook":
                try:
                    sender = import_string(sender)
                except ImportError as exc:
                    from queuecore.core.errors import ConfigurationError

                    raise ConfigurationError(f"alert sender {sender!r}: cannot import ({exc})",
                                             field="alerts") from None
            senders.append(sender)
        spec = {**spec, "SENDERS": senders}
    return parse_alerts(spec, SENDER_KINDS)
