"""Django's alert senders (signal, email), the ALERTS setting and its check, and a worker built by
the settings delivering through them."""

from __future__ import annotations

import logging

import pytest
from django.core import mail

from queuecore.alert_senders import EmailSender, SignalSender, alert_fired, alert_resolved, parse_settings
from queuecore.checks import check_settings
from queuecore.conf import get_config
from queuecore.core.alerts import Alert, AlertEvent, WebhookSender
from queuecore.core.errors import ConfigurationError
from queuecore.core.worker import Worker
from tests.conftest import wait_until

ALERT = Alert(id="big/emails", rule="big", kind="backlog", subject="emails", severity="critical",
              message="queue emails: 12 pending tasks (above 10)", value=12.0, threshold=10.0, since=1_800_000_000.0)

received: list[tuple[str, object]] = []


def on_event(event: AlertEvent) -> None:  # a dotted-path sender
    received.append((event.action, event.alert.id))


def test_the_signal_sender_sends_fired_and_resolved() -> None:
    got: list[tuple[str, str]] = []

    def fired(sender, event, alert, **kw):
        got.append(("fired", alert.id))

    def resolved(sender, event, alert, **kw):
        got.append(("resolved", alert.id))

    alert_fired.connect(fired)
    alert_resolved.connect(resolved)
    try:
        SignalSender()(AlertEvent("fired", ALERT, 1.0))
        SignalSender()(AlertEvent("resolved", ALERT, 2.0))
    finally:
        alert_fired.disconnect(fired)
        alert_resolved.disconnect(resolved)
    assert got == [("fired", "big/emails"), ("resolved", "big/emails")]


def test_the_email_sender_uses_djangos_mail(settings) -> None:
    settings.DEFAULT_FROM_EMAIL = "qc@example.com"
    EmailSender(to=["ops@example.com"])(AlertEvent("fired", ALERT, 1_800_000_060.0))
    assert len(mail.outbox) == 1
    m = mail.outbox[0]
    assert m.subject == "[queuecore] FIRED critical: big/emails"
    assert m.to == ["ops@example.com"] and m.from_email == "qc@example.com"
    assert "queue emails: 12 pending tasks (above 10)" in m.body
    assert "since: 2027-01-15T08:00:00+00:00" in m.body
    EmailSender(to=["ops@example.com"])(AlertEvent("resolved", ALERT, 1_800_000_660.0))
    m = mail.outbox[1]
    assert m.subject == "[queuecore] RESOLVED critical: big/emails"
    assert m.body.startswith("No longer holds. When it fired: queue emails: 12 pending tasks (above 10)\n")
    assert "resolved: 2027-01-15T08:11:00+00:00" in m.body
    with pytest.raises(ValueError):
        EmailSender(to="ops@example.com")


def test_settings_build_every_sender_kind() -> None:
    parsed = parse_settings({
        "RULES": {"big": {"kind": "backlog", "queue": "emails", "above": 10}},
        "SENDERS": ["signal", {"kind": "email", "to": ["ops@example.com"]},
                    {"kind": "webhook", "url": "http://127.0.0.1:9/hook", "retries": 1},
                    "tests.django.test_alert_senders.on_event"],
        "INTERVAL": 5,
    })
    kinds = [type(s) for s in parsed.senders[:3]]
    assert kinds == [SignalSender, EmailSender, WebhookSender] and parsed.senders[3] is on_event
    assert parsed.interval == 5.0 and parsed.rules[0].name == "big"


def test_a_bad_rule_or_sender_is_refused_naming_it(settings, redis_url, no_task_types) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "ALERTS": {"RULES": {"slow": {"kind": "latency"}}}}
    messages = check_settings()
    assert [(m.id, m.msg) for m in messages] == [
        ("queuecore.E011", "QUEUECORE['ALERTS']: alert rule 'slow': latency needs 'above'")]
    with pytest.raises(ConfigurationError, match=r"QUEUECORE\['ALERTS'\]: alert rule 'slow'"):
        get_config().alert_settings()
    settings.QUEUECORE = {"REDIS_URL": redis_url, "ALERTS": {"SENDERS": ["no.such.module.send"]}}
    assert [m.id for m in check_settings()] == ["queuecore.E011"]
    settings.QUEUECORE = {"REDIS_URL": redis_url, "ALERTS": {"SENDERS": [{"kind": "email", "to": "x"}]}}
    assert "alert sender 'email'" in check_settings()[0].msg
    settings.QUEUECORE = {"REDIS_URL": redis_url, "ALERTS": {
        "RULES": {"big": {"kind": "backlog", "above": 1}}, "SENDERS": ["signal"]}}
    assert check_settings() == []


def test_a_worker_from_the_settings_delivers_through_the_signal_and_a_dotted_path(
        settings, redis_url, key_prefix, client) -> None:
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "ALERTS": {
        "RULES": {"big": {"kind": "backlog", "queue": "unserved", "above": 0}}, "INTERVAL": 0.02,
        "SENDERS": ["signal", "tests.django.test_alert_senders.on_event"]}}
    got: list[str] = []

    def fired(sender, event, alert, **kw):
        got.append(alert.id)

    alert_fired.connect(fired)
    received.clear()
    config = get_config()
    worker = Worker(config.worker_config(queues={"default": 1}, heartbeat_interval=0.2), connection=config.connection,
                    alerts=config.alert_settings())
    worker.start()
    try:
        client.enqueue("t.x", {}, queue="unserved")
        wait_until(lambda: got == ["big/unserved"] and received == [("fired", "big/unserved")])
    finally:
        worker.shutdown(timeout=2)
        alert_fired.disconnect(fired)


def broken_receiver(sender, event, alert, **kw):
    raise RuntimeError("this receiver is broken")


def test_a_receiver_that_raises_does_not_keep_the_event_from_the_others(
        settings, redis_url, key_prefix, client, caplog) -> None:
    """``Signal.send`` stopped at the first receiver that raised: the ones after it never got the
    event. ``send_robust`` gives it to every receiver and the failure is logged naming the receiver."""
    settings.QUEUECORE = {"REDIS_URL": redis_url, "KEY_PREFIX": key_prefix, "ALERTS": {
        "RULES": {"big": {"kind": "backlog", "queue": "unserved", "above": 0}}, "INTERVAL": 0.02,
        "SENDERS": ["signal"]}}
    got: list[str] = []

    def fired(sender, event, alert, **kw):
        got.append(alert.id)

    alert_fired.connect(broken_receiver)  # connected first: called first
    alert_fired.connect(fired)
    config = get_config()
    worker = Worker(config.worker_config(queues={"default": 1}, heartbeat_interval=0.2), connection=config.connection,
                    alerts=config.alert_settings())
    try:
        with caplog.at_level(logging.ERROR, logger="queuecore.alerts"):
            worker.start()
            client.enqueue("t.x", {}, queue="unserved")
            wait_until(lambda: got == ["big/unserved"])
            wait_until(lambda: [r for r in caplog.records if r.name == "queuecore.alerts"])
    finally:
        worker.shutdown(timeout=2)
        alert_fired.disconnect(broken_receiver)
        alert_fired.disconnect(fired)
    [record] = [r for r in caplog.records if r.name == "queuecore.alerts"]
    assert record.levelno == logging.ERROR
    assert record.getMessage() == ("signal receiver tests.django.test_alert_senders.broken_receiver failed "
                                   "for alert big/unserved fired: this receiver is broken")
