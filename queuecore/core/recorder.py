"""The recorder: writes the decided outcome of an attempt to Redis, retrying while Redis is away."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

from queuecore.core.attempts import attempt_line
from queuecore.core.clock import Clock, to_ms
from queuecore.core.config import WorkerConfig
from queuecore.core.errors import TaskDecodeError
from queuecore.core.health import RedisHealth
from queuecore.core.keys import QueueKeys, stats_day, stats_minute
from queuecore.core.limits import MAX_PAYLOAD_BYTES_LIMIT
from queuecore.core.message import dumps, json_text
from queuecore.core.outcome import OUTCOME_WORDS, Outcome, decide, outcome_log_line
from queuecore.core.redis_errors import is_connection_error
from queuecore.core.registry import TaskRegistry
from queuecore.core.running import Running
from queuecore.core.scripts import Scripts
from queuecore.core.text import storable_text

logger = logging.getLogger("queuecore.worker")
MAX_RESULT_BYTES = MAX_PAYLOAD_BYTES_LIMIT  # 256 MiB: a Redis string holds 512 MB, and the acknowledgement
                                            # sends several results in one call


class Recorder:
    """Turns an outcome into its Redis write (``outcome.decide`` says which) and logs what happened.

    Successes go through the ``Acker`` in batches; it uses ``with_retries`` and ``log`` from here.
    """

    def __init__(self, config: WorkerConfig, scripts: Scripts, queue_keys: Mapping[str, QueueKeys], clock: Clock,
                 registry: TaskRegistry, health: RedisHealth, worker_id: str = "",
                 on_due: Callable[[float], None] | None = None) -> None:
        self.config = config
        self.worker_id = worker_id  # this process's server id, recorded in each attempt's history line
        self.scripts = scripts
        self.queue_keys = queue_keys
        self.clock = clock
        self.registry = registry
        self.health = health
        self.on_due = on_due  # told when a retry or a snooze written here falls due (unix s)
        self.write_deadline: float | None = None  # monotonic; past it, unwritable outcomes are given up

    def with_retries(self, what: str, write: Callable[[], Any]) -> tuple[bool, Any]:
        """Run ``write`` until Redis takes it: ``(True, reply)``, or ``(False, None)`` when given up.

        Connection errors are retried with backoff (at least once per heartbeat, so outcomes are
        written soon after Redis is back); other errors, or the shutdown write deadline, give up.
        """
        backoff = 0.05
        max_backoff = min(5.0, self.config.heartbeat_interval)
        while True:
            began = time.monotonic()
            try:
                reply = write()
                break
            except Exception as exc:
                if not is_connection_error(exc) or (
                        self.write_deadline is not None and time.monotonic() > self.write_deadline):
                    logger.error("could not record %s: %s; the lease will expire and the task run again", what, exc)
                    return False, None
                self.health.report_error("ack", exc, began=began)
                time.sleep(backoff)
                backoff = min(backoff * 2, max_backoff)
        self.health.note_ok("ack")
        return True, reply

    def record(self, running: Running, outcome: Outcome) -> None:
        """Write what ``outcome`` calls for (not a success: the acker writes those)."""
        handler = self.registry.get(running.message.type)
        policy = handler.retry_delay if handler is not None and handler.retry_delay else self.config.retry_delay
        decision = decide(outcome, retried=running.retried, max_retry=running.message.max_retry,
                          retry_delay=policy, task_id=running.id)
        if decision.action == "nothing":
            return
        ended = self.clock.now()  # before the error handler: its time is not the attempt's
        ran = ended - running.started if running.begun else None
        if outcome.kind in ("failure", "skip_retry") and outcome.error is not None \
                and not isinstance(outcome.error, TaskDecodeError):
            self._call_error_handler(running, outcome.error)
        q = self.queue_keys[running.queue]
        due_at: list[float] = []  # a retry's or a park's due time, as written

        def write() -> bool:
            now = self.clock.now()
            now_ms = to_ms(now)
            if decision.action == "requeue":
                return self.scripts.requeue(q, running.id, running.lease, now_ms=now_ms)
            if decision.action == "park":  # snoozed, or held back by a limit: no attempt counted
                snooze = outcome.kind == "snooze"
                due_at[:] = [now + decision.retry_in]
                line = self.attempt_line(running, "snoozed", ended) if snooze else ""
                return self.scripts.park(q, running.id, running.lease, now_ms=now_ms,
                                         due_ms=to_ms(due_at[0]), snooze=snooze,
                                         waiting=decision.error, attempt=line)
            line = self.attempt_line(running, "retry" if decision.action == "retry" else "archived", ended,
                                     decision.error, decision.error_type)
            if decision.action == "retry":
                due_at[:] = [now + decision.retry_in]
                return self.scripts.retry(q, running.id, running.lease, now_ms=now_ms,
                                          retry_at_ms=to_ms(due_at[0]), error=decision.error,
                                          day=stats_day(now), minute=stats_minute(now), attempt=line,
                                          started_ms=running.handler_started_ms, type_name=running.message.type,
                                          duration_ms=None if ran is None else max(0, to_ms(ran)))
            return self.scripts.archive(q, running.id, running.lease, now_ms=now_ms, error=decision.error,
                                        day=stats_day(now), minute=stats_minute(now),
                                        max_archive_size=self.config.max_archive_size,
                                        archive_cutoff_ms=to_ms(now - self.config.archive_max_age),
                                        count_failure=decision.count_failure, attempt=line,
                                        started_ms=running.handler_started_ms, type_name=running.message.type,
                                        duration_ms=None if ran is None else max(0, to_ms(ran)))

        written, accepted = self.with_retries(f"the outcome of task {running.id} ({outcome.kind})", write)
        if written:
            self.log(running, outcome.kind, accepted)
            if accepted and due_at and self.on_due is not None:
                self.on_due(due_at[0])
            line = outcome_log_line(task_id=running.id, type_name=running.message.type, queue=running.queue,
                                    retried=running.retried, max_retry=running.message.max_retry, outcome=outcome,
                                    decision=decision, ran=ran,
                                    retry_at=due_at[0] if due_at and decision.action == "retry" else None)
            if accepted and line is not None:  # every failed attempt and every archive, at the default level
                logger.warning("%s", line, extra={"qc_task_id": running.id, "qc_queue": running.queue,
                                                  "qc_type": running.message.type, "qc_attempt": running.retried + 1,
                                                  "qc_action": decision.action, "qc_outcome": outcome.kind,
                                                  "qc_duration": ran})

    def attempt_line(self, running: Running, result: str, ended: float, error: str | None = None,
                     error_type: str | None = None) -> str:
        """The attempt's line for the task's attempt history (``attempts.py``)."""
        return attempt_line(number=running.retried + 1, worker=self.worker_id, result=result,
                            ended_ms=to_ms(ended), started_ms=running.handler_started_ms,
                            fetched_ms=None if running.begun else to_ms(running.fetched), error=error,
                            error_type=error_type)

    def log(self, running: Running, kind: str, accepted: bool) -> None:
        """Log a written outcome: a warning when the lease was lost meanwhile, else at debug level."""
        if not accepted:
            logger.warning("task %s finished (%s) after its lease was lost; another worker owns it, the result is "
                           "discarded", running.id, kind)
        elif logger.isEnabledFor(logging.DEBUG):
            ran = self.clock.now() - running.started
            logger.debug("task %s (%s) in %s: %s after %.3fs", running.id, running.message.type, running.queue,
                         OUTCOME_WORDS.get(kind, kind), ran,
                         extra={"qc_task_id": running.id, "qc_queue": running.queue, "qc_type": running.message.type,
                                "qc_attempt": running.retried + 1, "qc_outcome": kind, "qc_duration": ran})

    def _call_error_handler(self, running: Running, error: BaseException) -> None:
        hook = self.config.error_handler
        if hook is None:
            return
        try:
            hook(running.ctx, error)
        except BaseException:  # SystemExit too: the outcome is written all the same
            logger.exception("error_handler raised for task %s", running.id)

    @staticmethod
    def encode_result(running: Running, outcome: Outcome) -> str:
        """The handler's return value as JSON when the task keeps it (``retention``), else "". Never
        raises: a value JSON cannot encode (or nested past the recursion limit, or holding text that
        is not valid Unicode) is kept as its ``repr()``, one over ``MAX_RESULT_BYTES`` as a note of its
        size, each with a WARNING, so that the task is acknowledged whatever its handler returned."""
        if not running.message.retention:
            return ""
        try:
            text = json_text(outcome.result)
            size = len(text.encode())  # a lone surrogate ("\ud800") passes json.dumps but has no UTF-8
        except Exception:  # TypeError, ValueError (UnicodeEncodeError), RecursionError
            logger.warning("task %s returned a value that is not JSON (or holds text that is not valid Unicode, "
                           "or nests too deeply); keeping its repr()", running.id)
            try:
                text = dumps(storable_text(repr(outcome.result)))
            except Exception as exc:  # its own __repr__ raised, or recursed too deeply
                return dumps(f"<the result's repr() could not be made: {type(exc).__name__}>")
            size = len(text.encode())
        if size > MAX_RESULT_BYTES:
            logger.warning("task %s returned %d bytes of JSON, over the %d-byte limit for a result; keeping a note "
                           "of its size instead", running.id, size, MAX_RESULT_BYTES)
            return dumps(f"<a result of {size:,} bytes, not kept: over the {MAX_RESULT_BYTES:,}-byte limit>")
        return text
