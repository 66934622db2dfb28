"""The worker process (asynq calls it the server): wires the components together.

Start order: heartbeater (so the process is visible), subscriber, forwarder, recoverer,
janitor, then the processor. Shutdown order: the processor first (stop fetching, let running
tasks finish up to ``shutdown_timeout``, hand the rest back), then the other components, and the
heartbeat is removed last.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from typing import Any, cast

import redis

from queuecore.core.alerts import AlertMonitor, build_monitor, parse_alerts
from queuecore.core.broker import Broker
from queuecore.core.bulkrunner import BulkJobRunner
from queuecore.core.clock import Clock, RedisTimeClock
from queuecore.core.config import ConnectionConfig, WorkerConfig, redact_url
from queuecore.core.forwarder import Forwarder
from queuecore.core.health import RedisHealth
from queuecore.core.heartbeat import Heartbeater, ServerState
from queuecore.core.inspector import Inspector
from queuecore.core.janitor import Janitor
from queuecore.core.liveness import LivenessFile
from queuecore.core.periodic import PeriodicEntry, parse_entries
from queuecore.core.processor import Processor
from queuecore.core.recoverer import Recoverer, outage_threshold
from queuecore.core.registry import TaskRegistry, default_registry
from queuecore.core.running import HeldTasks
from queuecore.core.scheduler import Scheduler, message_builder
from queuecore.core.scripts import Scripts
from queuecore.core.subscriber import Subscriber

logger = logging.getLogger("queuecore.worker")

_WORKER_CONFIG_FIELDS = set(WorkerConfig.__dataclass_fields__)
_STOP, _FORCE, _QUIET = "stop", "force", "quiet"  # what run() is asked to do (Worker._requests)
# SIGHUP: the terminal closed
_SIGNAL_REQUESTS = {"SIGTERM": _STOP, "SIGINT": _STOP, "SIGHUP": _STOP, "SIGTSTP": _QUIET, "SIGUSR1": _FORCE}


class Worker:
    """Runs tasks from Redis: ``Worker(queues={"default": 1}, concurrency=10).run()``.

    Keyword arguments that name ``WorkerConfig`` fields build the config; ``redis_url`` and
    ``key_prefix`` (or ``connection``) say where Redis is. ``periodic`` declares periodic tasks (a
    dict of entry name -> ``{"task": ..., "cron": ... or "every": ..., ...}``, see ``periodic.py``);
    ``alerts`` alert rules and senders (``{"RULES": ..., "SENDERS": [...], "INTERVAL": 15}``, see ``alerts.py``).
    """

    def __init__(self, config: WorkerConfig | None = None, *, connection: ConnectionConfig | None = None,
                 redis_url: str | None = None, key_prefix: str | None = None,
                 registry: TaskRegistry | None = None, clock: Clock | None = None,
                 redis_client: redis.Redis | None = None, periodic: Any = None, alerts: Any = None,
                 **options: Any) -> None:
        unknown = set(options) - _WORKER_CONFIG_FIELDS
        if unknown:
            raise TypeError(f"unknown worker option(s): {', '.join(sorted(unknown))}")
        if config is None:
            config = WorkerConfig(**options)
        elif options:
            config = replace(config, **options)
        self.config = config
        self.connection = connection or ConnectionConfig.default(redis_url=redis_url, key_prefix=key_prefix)
        self.keys = self.connection.keys
        self._owns_redis = redis_client is None
        self.redis = redis_client if redis_client is not None else self.connection.connect()
        self.scripts = Scripts(self.redis, self.keys, type_stats=config.type_stats)
        self.broker = Broker(self.redis, self.keys)
        self.registry = registry or default_registry
        # Without a clock given, this host's clock corrected to Redis's (measured at start and each heartbeat):
        # workers on hosts whose clocks disagree still agree on leases and due times.
        self.clock = clock or RedisTimeClock()
        self._aligns = isinstance(self.clock, RedisTimeClock)
        host, pid = socket.gethostname(), os.getpid()
        self.state = ServerState(id=f"{host}:{pid}:{uuid.uuid4().hex[:8]}", host=host, pid=pid,
                                 concurrency=config.concurrency, queues=config.queues,
                                 strict_priority=config.strict_priority, max_archive_size=config.max_archive_size)
        self.health = RedisHealth()
        self.held = HeldTasks()
        # Each component gets what it uses; they share only the held tasks, the health and the state.
        queue_keys = {name: self.keys.queue(name) for name in config.queues}
        queues = list(queue_keys.values())
        # A retry or snooze this worker writes, and a client's scheduled task, is due sooner than the
        # forwarder's next round: it is told (note_due), so the task starts on time.
        self.forwarder = Forwarder(self.scripts, self.clock, queues, config.forward_interval, self.health)
        self.processor = Processor(config, self.scripts, queue_keys, self.clock, self.registry, self.held,
                                   self.health, worker_id=self.state.id, on_due=self.forwarder.note_due)
        renewer = self.processor.renewer
        self.liveness = None if config.health_file is None else LivenessFile(
            config.health_file, server_id=self.state.id, pid=pid, host=host, key_prefix=self.keys.prefix,
            interval=config.heartbeat_interval, redis_url=self.connection.redis_url)
        self.heartbeater = Heartbeater(self.scripts, self.broker, self.clock, config.heartbeat_interval, self.state,
                                       self.held, renewer, self.health, task_types=self.registry.describe_json,
                                       on_beat=self.liveness.touch if self.liveness is not None else None,
                                       align_clock=self._align_clock if self._aligns else None,
                                       on_control=self._on_control)
        self.subscriber = Subscriber(self.broker, [q.cancel_channel for q in queues], [q.wake_channel for q in queues],
                                     on_cancel=self.processor.cancel, on_wake=self.processor.on_wake,
                                     health=self.health, sharded=lambda: self.scripts.publish_command == "SPUBLISH",
                                     on_due=self.forwarder.note_due,
                                     push_channels={q.push_channel(self.state.id): q.queue for q in queues},
                                     on_push=self.processor.on_push)
        self.processor.reachable_by_push = self.subscriber.subscribed.is_set
        self.recoverer = Recoverer(
            self.scripts, self.clock, queues, config.recover_interval, config.repair_interval, renewer, self.health,
            outage_after=outage_threshold(config.lease_duration, config.heartbeat_interval, config.recover_interval),
            grace=config.lease_duration)
        self.janitor = Janitor(self.scripts, self.broker, self.clock, queues, config.janitor_interval,
                               config.archive_max_age, config.max_archive_size, self.health)
        self.scheduler = Scheduler(self.scripts, self.broker, self.keys, self.clock, self._periodic_entries(periodic),
                                   message_builder(self.connection), self.health,
                                   declare_interval=config.heartbeat_interval)
        self.alerts = self._alert_monitor(alerts)
        self.bulk_jobs = BulkJobRunner(Inspector(connection=self.connection, redis_client=self.redis, clock=self.clock,
                                                 actor="worker"), self.health)
        self.stopped = threading.Event()
        self._force = threading.Event()
        self._shutdown_requested = threading.Event()
        self._supervised = False  # run(supervised=True): a repeated stop signal is not a force (SIGUSR1 is)
        self._quiet_requested = threading.Event()
        self._requests: list[str] = []  # noted by signal handlers (an append takes no lock): _act_on_requests
        self._shutdown_lock = threading.Lock()
        self.handed_back = 0

    @property
    def status(self) -> str:
        """``idle`` (not started), ``active``, ``quiet`` (not fetching), ``stopping`` or ``stopped``."""
        return self.state.status

    @property
    def server_id(self) -> str:
        """This process's id in heartbeats: ``host:pid:random``."""
        return self.state.id

    @property
    def started_at(self) -> float:
        """When ``start()`` ran (unix seconds); 0 before."""
        return self.state.started_at

    # -- lifecycle --------------------------------------------------------------------------------

    def _refuse_a_second_start(self, done: str) -> None:
        """A Worker runs once: a second start would write a heartbeat nothing removes."""
        if self.state.status != "idle":
            raise RuntimeError(f"worker {self.server_id} has already {done} (it is {self.state.status}); "
                               "make a new Worker to run again")

    def start(self, quiet: bool = False) -> None:
        """Start every component on background threads and return; ``quiet``: without fetching a task
        (as after ``stop()``)."""
        self._refuse_a_second_start("started")
        if self._aligns:
            try:
                self._align_clock()
            except Exception as exc:  # the heartbeater measures again each beat (and so ends a spell)
                self.health.report_error(self.heartbeater.name, exc)
        self.state.started_at = self.clock.now()
        self.state.status = "quiet" if quiet else "active"
        if quiet:
            self.processor.stop()  # before it starts: its first fetch finds it quiet
        try:
            self.heartbeater.register_queues()
        except Exception as exc:  # the heartbeater tries again each beat until it is done (and so ends a spell)
            self.health.report_error(self.heartbeater.name, exc)
        try:
            self.heartbeater.beat()
        except Exception as exc:  # the heartbeater beats again within its interval
            self.health.report_error(self.heartbeater.name, exc)
        logger.info("worker %s starting: queues %s, concurrency %d, Redis %s, prefix %r", self.server_id,
                    dict(self.config.queues), self.config.concurrency, redact_url(self.connection.redis_url),
                    self.keys.prefix)
        self.warn_on_eviction_policy()
        for component in (self.heartbeater, self.subscriber, self.forwarder, self.recoverer, self.janitor,
                          self.bulk_jobs):
            component.start()
        self.scheduler.start()  # with no entries too: it deletes the state of entries long undeclared
        if self.alerts is not None:
            self.alerts.start()
        self.processor.start()
        if quiet:
            logger.info("worker %s is quiet: no new tasks will be fetched", self.server_id)

    def _on_control(self, command: str, actor: str) -> None:
        """A command an operator left for this process in Redis (``Inspector.quiet_server``,
        ``stop_server``), taken by the heartbeat: acted on by ``run()`` as SIGTSTP and SIGTERM are."""
        who = actor or "an operator"
        if command == "quiet":
            logger.warning("%s asked this worker to go quiet (through Redis): no new tasks will be fetched", who)
            self._quiet_requested.set()
        elif command == "stop":
            logger.warning("%s asked this worker to stop (through Redis): running tasks get the shutdown "
                           "timeout to finish", who)
            self._shutdown_requested.set()
        else:
            logger.warning("%s left the unknown command %r for this worker: ignored", who, command)

    def _align_clock(self) -> float:
        """Measure this host's clock against Redis's (``RedisTimeClock.align``)."""
        return cast(RedisTimeClock, self.clock).align(self.broker.time)

    def _periodic_entries(self, spec: Any) -> list[PeriodicEntry]:
        """The periodic entries of ``spec``, with their handlers' default options (queue, retries, ...)
        under their own; a payload that does not fit a handler registered here is refused now."""
        from queuecore.core.errors import ConfigurationError, InvalidPayload

        entries = []
        for entry in parse_entries(spec, self.connection.max_payload_bytes):
            handler = self.registry.get(entry.task)
            if handler is None and not entry.options.get("queue"):
                # Its queue would be "default" here and the handler's own queue in a worker that has it:
                # two entries, each fire enqueued twice.
                raise ConfigurationError(f"periodic entry {entry.name!r}: task type {entry.task!r} is not registered "
                                         "in this worker, so the queue its @task names is not known here: give the "
                                         "entry its 'queue', or import the task's module before building the worker",
                                         field="periodic")
            if handler is None:
                logger.warning("periodic entry %s: task type %r is not registered in this worker", entry.name,
                               entry.task)
            else:
                entry = entry.with_defaults(handler.options)
                try:
                    handler.check_payload(dict(entry.payload))
                except InvalidPayload as exc:
                    raise ConfigurationError(f"periodic entry {entry.name!r}: payload: {exc}",
                                             field="periodic") from None
            entries.append(entry)
        return entries

    def _alert_monitor(self, spec: Any) -> AlertMonitor | None:
        """The alert component when ``spec`` (``{"RULES": ..., "SENDERS": ..., "INTERVAL": ...}``) has rules."""
        settings = parse_alerts(spec)
        if not settings.rules:
            return None
        inspector = Inspector(connection=self.connection, redis_client=self.redis, clock=self.clock)
        return build_monitor(settings, self.scripts, inspector, self.clock, self.health, holder=self.state.id)

    def warn_on_eviction_policy(self) -> str | None:
        """Log a warning when Redis may evict keys (``maxmemory-policy`` other than ``noeviction``).

        Returns the policy, or None when it cannot be read (CONFIG denied by an ACL, a managed Redis
        that renames CONFIG, Redis away): then nothing is logged beyond a debug line.
        """
        try:
            policy = self.broker.eviction_policy()
        except Exception as exc:
            logger.debug("cannot read Redis maxmemory-policy (%s); eviction check skipped", exc)
            return None
        if policy and policy != "noeviction":
            logger.warning("Redis maxmemory-policy is %r: when Redis is full it may evict task data, and tasks "
                           "are lost. Set maxmemory-policy noeviction on the Redis that holds the queues.", policy)
        return policy

    def stop(self) -> None:
        """Quiet mode: stop fetching new tasks; keep running tasks and heartbeats (SIGTSTP)."""
        if self.state.status == "active":
            self.state.status = "quiet"
            self.processor.stop()
            logger.info("worker %s is quiet: no new tasks will be fetched", self.server_id)
            self._beat_now()

    def shutdown(self, timeout: float | None = None) -> None:
        """Stop gracefully: wait up to ``timeout`` (default ``shutdown_timeout``) for running tasks,
        hand the unfinished ones back to pending, remove the heartbeat. Idempotent."""
        with self._shutdown_lock:
            if self.stopped.is_set():
                return
            self.processor.stop()  # before "stopping" is announced: from then on nothing new is fetched
            self.state.status = "stopping"
            self._beat_now()
            limit = self.config.shutdown_timeout if timeout is None else timeout
            self.handed_back = self.processor.shutdown(limit, self._force)
            if self.handed_back:
                logger.warning("handed %d unfinished task(s) back to pending", self.handed_back)
            if self.alerts is not None:
                self.alerts.shutdown()
            for component in (self.bulk_jobs, self.scheduler, self.subscriber, self.forwarder, self.recoverer,
                              self.janitor, self.heartbeater):
                component.shutdown()
            try:
                self.heartbeater.clear()
            except Exception as exc:
                self.health.report_error("shutdown", exc)
            if self.liveness is not None:
                self.liveness.remove()
            self.state.status = "stopped"
            if self._owns_redis:
                self.redis.close()
            self.stopped.set()
            logger.info("worker %s stopped", self.server_id)

    def force_stop(self) -> None:
        """Stop waiting for running tasks: hand them back now (a second SIGTERM/SIGINT)."""
        self._force.set()

    def request_shutdown(self) -> None:
        """Ask ``run()`` to shut down; safe to call from a signal handler (it only notes the request,
        which a thread of ``run()``'s acts on). A second request forces it, except under a supervisor
        (``run(supervised=True)``), where every process of a service may get the same stop signal twice
        (systemd's, and the supervisor's copy): the supervisor forces with SIGUSR1 (``force_now``)."""
        self._requests.append(_STOP)

    def force_now(self) -> None:
        """Ask ``run()`` to shut down handing running tasks back now (SIGUSR1); safe to call from a
        signal handler, as ``request_shutdown`` is."""
        self._requests.append(_FORCE)

    def run(self, install_signals: bool = True, on_ready: Callable[[], None] | None = None,
            quiet: bool = False, supervised: bool = False) -> int:
        """Start (``quiet``: without fetching), then block until SIGTERM/SIGINT/SIGHUP (or
        ``request_shutdown``, or ``shutdown`` from another thread); returns exit code 0.

        SIGTSTP puts the worker in quiet mode; SIGUSR1 stops it handing running tasks back at once (a
        second stop signal does too, unless ``supervised``). Signal handlers are installed only in the
        main thread, and the ones they replaced are put back when ``run()`` returns (unless another was
        installed meanwhile, which stays). ``on_ready`` is called once the handlers are installed and the
        worker has started (a ``Supervisor``'s child says so: ``queuecore.core.supervisor.run_worker``).
        When starting fails, what had started is shut down before the error is raised.
        """
        self._refuse_a_second_start("run")  # before anything is installed or written
        self._supervised = supervised
        replaced: dict[int, Any] = {}
        returned = threading.Event()
        acting = threading.Thread(target=self._act_on_requests, args=(returned,), name="queuecore-signals",
                                  daemon=True)

        # A handler only notes the request (a list append takes no lock); a thread of run()'s acts on it.
        # A handler that set an Event could deadlock: the main thread may hold that Event's lock (inside
        # its wait) when the signal comes, and a second signal (systemd's and the supervisor's copy,
        # microseconds apart) is handled inside the first one's set().
        requests = {getattr(signal, name): r for name, r in _SIGNAL_REQUESTS.items() if hasattr(signal, name)}

        def note(signum: int, _frame: object) -> None:
            self._requests.append(requests[signum])

        try:  # handlers installed inside it, so that whatever interrupts run() puts back those it replaced
            if install_signals and threading.current_thread() is threading.main_thread():
                for signum in requests:
                    replaced[signum] = signal.getsignal(signum)
                    signal.signal(signum, note)
            acting.start()
            try:
                self.start(quiet=quiet)
                if on_ready is not None:
                    on_ready()
            except BaseException:
                try:
                    self.shutdown()
                except Exception:
                    logger.exception("worker %s: shutting down after a failed start failed too", self.server_id)
                raise
            while not self._shutdown_requested.wait(0.1) and not self.stopped.is_set():
                if self._quiet_requested.is_set():
                    self._quiet_requested.clear()
                    self.stop()  # here, not in the signal handler: stop() waits for a dequeue and does I/O
            self.shutdown()
            return 0
        finally:
            # The handlers go back first, then the acting thread acts on everything noted before that: no
            # signal is noted and dropped; one that comes later is the caller's (its handler, or its
            # default action).
            try:  # SIGINT last: a Ctrl-C once its handler is back raises here, with every other one back
                for signum in sorted(replaced, key=lambda signum: signum == signal.SIGINT):
                    if signal.getsignal(signum) is note:  # not one that code run meanwhile installed
                        handler = replaced[signum]
                        signal.signal(signum, handler if handler is not None else signal.SIG_DFL)
            finally:
                returned.set()
                if acting.ident is not None:
                    acting.join(5)

    def _act_on_requests(self, returned: threading.Event) -> None:
        """Act on the requests that signal handlers, ``request_shutdown`` and ``force_now`` noted, in
        order, until ``run()`` returns: stop (a second one forces, unless supervised), force, quiet."""
        while True:
            over = returned.wait(0.02)  # read before the last look: what was noted before it is acted on
            while self._requests:
                request = self._requests.pop(0)
                if request == _QUIET:
                    self._quiet_requested.set()
                elif request == _FORCE:
                    logger.warning("stop signal to hand running tasks back now (SIGUSR1)")
                    self.force_stop()
                    self._shutdown_requested.set()
                else:
                    if self._shutdown_requested.is_set() and not self._supervised:
                        logger.warning("second stop signal: handing running tasks back now")
                        self.force_stop()
                    self._shutdown_requested.set()
            if over:
                return

    def _beat_now(self) -> None:
        began = time.monotonic()
        try:
            self.heartbeater.beat()
        except Exception as exc:
            self.health.report_error("heartbeat", exc, began=began)
