"""Prometheus metrics (the ``metrics`` extra: ``pip install 'queuecore[metrics]'``).

A custom ``prometheus_client`` collector: each scrape asks the ``Inspector`` for one
``MetricsSnapshot`` (one pipeline of one script call per queue, plus the live workers) and turns it
into metric families; the exposition format is prometheus_client's own. Names follow asynq's
exporter (``<ns>_queue_size``, ``<ns>_queue_latency_seconds``, ``<ns>_tasks_processed_total``, ...);
the README's "Metrics" section has the table. No Django here: the Django view is
``queuecore.metrics_views`` and ``runworker --metrics-port`` serves the same registry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector, RestrictedRegistry

from queuecore.core import typestats
from queuecore.core.errors import BrokerError, WrongKeyType
from queuecore.core.flow import LimitInfo
from queuecore.core.inspector import Inspector
from queuecore.core.periodic_admin import PeriodicEntryInfo
from queuecore.core.queue_metrics import MetricsSnapshot, WorkerMetrics

logger = logging.getLogger("queuecore.metrics")

DEFAULT_NAMESPACE = "queuecore"
# (vector index, metric name after "<ns>_", help): the per-queue-and-type counters of typestats.py
_TYPE_COUNTERS = (
    (typestats.PROCESSED, "tasks_processed", "Attempts that ended (succeeded or failed), per queue and task type."),
    (typestats.FAILED, "tasks_failed", "Attempts that failed (then retried or archived), per queue and task type."),
    (typestats.RETRIED, "tasks_retried", "Failed attempts scheduled for another attempt, per queue and task type."),
    (typestats.ARCHIVED, "tasks_archived", "Tasks archived (failed for good, cancelled or lost), per queue and type."),
    (typestats.RECOVERED, "leases_recovered", "Expired leases taken back by a recoverer, per queue and task type."),
)
# Hooks for data other components keep, each f(snapshot, namespace) -> metric families. Limit waits
# are read (limit_families) from the limits' own keys, periodic fires (periodic_families) from the
# entries' counters. A hook must not read Redis: describe() calls it with an empty snapshot.
ExtraMetrics = Callable[[MetricsSnapshot, str], Iterator[Metric]]
_EMPTY = MetricsSnapshot(queues=[], workers=WorkerMetrics(up=0, busy=0, concurrency=0))


class QueuecoreCollector(Collector):
    """Reads Redis once per scrape through ``inspector`` (which it does not close)."""

    def __init__(self, inspector: Inspector, namespace: str = DEFAULT_NAMESPACE,
                 extra: tuple[ExtraMetrics, ...] = ()) -> None:
        self.inspector = inspector
        self.namespace = namespace
        self.extra = extra

    def describe(self) -> Iterator[Metric]:
        """Every family ``collect`` yields, without samples and without reading Redis: the registry
        learns the names from it, so a scrape filtered by name (``?name[]=...``) gets its samples."""
        ns = self.namespace
        yield GaugeMetricFamily(f"{ns}_up", "1 when the last scrape read Redis, else 0.")
        yield from families(_EMPTY, ns)
        yield from limit_families([], ns)
        yield from periodic_families([], ns)
        yield _left_out_family(ns, [])
        for hook in self.extra:
            yield from hook(_EMPTY, ns)

    def collect(self) -> Iterator[Metric]:
        ns = self.namespace
        up = GaugeMetricFamily(f"{ns}_up", "1 when the last scrape read Redis, else 0.")
        left_out: list[str] = []
        try:
            snapshot = _part("queues", self.inspector.metrics, _EMPTY, left_out)
            no_limits: list[LimitInfo] = []
            no_entries: list[PeriodicEntryInfo] = []
            limits = _part("limits", self.inspector.limits, no_limits, left_out)
            entries = _part("periodic", self.inspector.periodic_entries, no_entries, left_out)
        except BrokerError as exc:
            logger.warning("metrics scrape: Redis did not answer: %s", exc)
            up.add_metric([], 0)
            yield up
            return
        up.add_metric([], 1)
        yield up
        if "queues" not in left_out:  # left out means no samples, not zeros (workers_up 0 would alert)
            yield from families(snapshot, ns)
        yield from limit_families(limits, ns)
        yield from periodic_families(entries, ns)
        yield _left_out_family(ns, left_out)
        if "queues" not in left_out:
            for hook in self.extra:
                yield from hook(snapshot, ns)


T = TypeVar("T")
PARTS = ("queues", "limits", "periodic")


def _part(name: str, read: Callable[[], T], empty: T, left_out: list[str]) -> T:
    """``read()``; ``empty`` when a key it needs has the wrong Redis type (the other parts are still
    scraped, and ``<ns>_scrape_part_unreadable`` says which was left out). Redis not answering raises."""
    try:
        return read()
    except WrongKeyType as exc:
        logger.warning("metrics scrape: %s left out: %s", name, exc)
        left_out.append(name)
        return empty


def _left_out_family(ns: str, left_out: list[str]) -> Metric:
    family = GaugeMetricFamily(f"{ns}_scrape_part_unreadable",
                               "1 when a part of the scrape was left out for a key of the wrong Redis type "
                               "(queues: the queue and worker families; limits; periodic), else 0.",
                               labels=["part"])
    for part in PARTS:
        family.add_metric([part], 1 if part in left_out else 0)
    return family


def periodic_families(entries: list[PeriodicEntryInfo], ns: str = DEFAULT_NAMESPACE) -> Iterator[Metric]:
    """Fire times of each periodic entry a live worker declares, by outcome: ``schedule`` (on time),
    ``late`` (missed fire times, run once late), ``manual`` (run now), ``skip`` (missed fire times
    skipped) and ``paused``."""
    fires = CounterMetricFamily(f"{ns}_periodic_fires", "Fire times of a periodic entry, by outcome (late and "
                                "skip: missed fire times).", labels=["entry", "queue", "outcome"])
    for entry in entries:
        for outcome, count in sorted(entry.fires.items()):
            fires.add_metric([entry.name, entry.queue, outcome], count)
    yield fires


def families(snapshot: MetricsSnapshot, ns: str = DEFAULT_NAMESPACE) -> Iterator[Metric]:
    """The metric families of one snapshot."""
    size = GaugeMetricFamily(f"{ns}_queue_size", "Tasks in a queue, per state.", labels=["queue", "state"])
    latency = GaugeMetricFamily(f"{ns}_queue_latency_seconds",
                                "How long the pending task at the head of a queue (the next to run: the oldest, unless "
                                "priority tasks went ahead of it) has waited (0 when none waits).",
                                labels=["queue"])
    paused = GaugeMetricFamily(f"{ns}_queue_paused_total", "1 when a queue is paused, else 0.", labels=["queue"])
    memory = GaugeMetricFamily(f"{ns}_queue_memory_usage_approx_bytes",
                               "Estimated Redis memory of a queue: its keys, plus task hashes sampled from "
                               "every state in proportion to its size, each state's average times its "
                               "tasks.", labels=["queue"])
    processed = CounterMetricFamily(f"{ns}_queue_processed", "Attempts that ended in a queue (all types).",
                                    labels=["queue"])
    failed = CounterMetricFamily(f"{ns}_queue_failed", "Attempts that failed in a queue (all types).",
                                 labels=["queue"])
    counters = [(index, CounterMetricFamily(f"{ns}_{name}", text, labels=["queue", "type"]))
                for index, name, text in _TYPE_COUNTERS]
    duration = HistogramMetricFamily(f"{ns}_task_duration_seconds", "How long handlers ran, per queue and type.",
                                     labels=["queue", "type"])
    unreadable_queues = set(snapshot.unreadable)
    for q in snapshot.queues:
        for state, n in q.sizes.items():
            size.add_metric([q.queue, state], n)
        latency.add_metric([q.queue], q.latency)
        paused.add_metric([q.queue], 1 if q.paused else 0)
        if q.memory_bytes is not None:
            memory.add_metric([q.queue], q.memory_bytes)
        for family, total in ((processed, q.processed_total), (failed, q.failed_total)):
            if total is None:  # not a number in Redis: that sample left out, the queue counted
                unreadable_queues.add(q.queue)
            else:
                family.add_metric([q.queue], total)
        for type_name, vector in sorted(q.types.items()):
            if typestats.malformed(vector):  # not a packed vector: that type left out, the queue counted
                unreadable_queues.add(q.queue)
                continue
            for index, family in counters:
                family.add_metric([q.queue, type_name], vector[index])
            duration.add_metric([q.queue, type_name], _buckets(vector),
                                sum_value=vector[typestats.DURATION_SUM] / 1000.0)
    yield from (size, latency, paused, memory, processed, failed)
    yield from (family for _, family in counters)
    yield duration
    workers = snapshot.workers
    for name, value, text in (
            ("workers_up", workers.up, "Live worker processes (their heartbeat is current)."),
            ("workers_busy", workers.busy, "Handlers running now, over every live worker process."),
            ("workers_concurrency", workers.concurrency, "Handlers that may run at once, over every live worker.")):
        gauge = GaugeMetricFamily(f"{ns}_{name}", text)
        gauge.add_metric([], value)
        yield gauge
    unreadable = GaugeMetricFamily(f"{ns}_queues_unreadable",
                                   "Queues left out of this scrape (a key of the wrong Redis type) or read in part "
                                   "(a task type's statistics value that is not a packed vector, left out).")
    unreadable.add_metric([], len(unreadable_queues))
    yield unreadable


def limit_families(limits: list[LimitInfo], ns: str = DEFAULT_NAMESPACE) -> Iterator[Metric]:
    """Concurrency and rate limits that live workers publish: their settings, and per limit key in use
    (``key`` "" for a type's one limit) the tasks holding a slot, waiting for one, and the starts in the
    current rate window."""
    concurrency = GaugeMetricFamily(f"{ns}_limit_concurrency", "A task type's concurrency limit (0: none).",
                                    labels=["type"])
    running = GaugeMetricFamily(f"{ns}_limit_running_tasks", "Tasks holding a slot of a concurrency limit.",
                                labels=["type", "key"])
    waiting = GaugeMetricFamily(f"{ns}_limit_waiting_tasks",
                                "Tasks held back for a concurrency slot (those a rate limit holds back wait in "
                                "their queue's scheduled set).",
                                labels=["type", "key"])
    rate_used = GaugeMetricFamily(f"{ns}_limit_rate_window_starts", "Starts in a rate limit's current window.",
                                  labels=["type", "key"])
    for info in limits:
        concurrency.add_metric([info.type], info.concurrency_limit)
        for usage in info.usage:
            running.add_metric([info.type, usage.key], usage.running)
            waiting.add_metric([info.type, usage.key], usage.waiting)
            rate_used.add_metric([info.type, usage.key], usage.rate_used)
    yield from (concurrency, running, waiting, rate_used)


def _buckets(vector: list[int]) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets from a typestats vector's per-bucket counts."""
    out, running = [], 0
    counts = vector[typestats.FIRST_BUCKET:]
    for bound, count in zip(typestats.BUCKETS_MS, counts, strict=False):
        running += count
        out.append((_le(bound), float(running)))
    out.append(("+Inf", float(running + counts[-1])))
    return out


def _le(bound_ms: int) -> str:
    return repr(bound_ms / 1000.0)


def make_registry(inspector: Inspector, namespace: str = DEFAULT_NAMESPACE,
                  extra: tuple[ExtraMetrics, ...] = ()) -> CollectorRegistry:
    """A registry holding only queuecore's collector (never the process-wide default registry)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueuecoreCollector(inspector, namespace, extra))
    return registry


def render(registry: CollectorRegistry | RestrictedRegistry) -> bytes:
    """The text exposition of ``registry`` (or of its ``restricted_registry(names)``), by prometheus_client."""
    return generate_latest(registry)


def serve(port: int, inspector: Inspector, *, addr: str = "127.0.0.1", namespace: str = DEFAULT_NAMESPACE) -> Any:
    """Serve ``/metrics`` over HTTP on ``addr:port`` in a daemon thread (prometheus_client's own
    server); returns the server (call ``shutdown()`` on it to stop)."""
    from prometheus_client import start_http_server

    server, _thread = start_http_server(port, addr=addr, registry=make_registry(inspector, namespace))
    return server
