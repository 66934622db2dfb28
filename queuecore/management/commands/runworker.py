"""``manage.py runworker``: run a queuecore worker process with the project's settings."""

from __future__ import annotations

import logging
import os
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, TypeVar

from django.core.management.base import BaseCommand, CommandError

from queuecore.checks import check_settings
from queuecore.conf import get_config, import_task_modules, setting_message
from queuecore.core.client import Client, set_default_client_factory
from queuecore.core.config import ConnectionConfig, parse_queues
from queuecore.core.errors import ConfigurationError, RedisUnavailable, WrongServer
from queuecore.core.liveness import check_health_file, remove_left_files, write_given_up
from queuecore.core.redis_errors import broker_errors
from queuecore.core.registry import default_registry
from queuecore.core.supervisor import EX_CONFIG, Supervisor, SupervisorLink, run_worker
from queuecore.core.topology import unknown_sentinel_master
from queuecore.core.worker import Worker

T = TypeVar("T")


class Command(BaseCommand):
    help = ("Run a worker. SIGTERM/SIGINT/SIGHUP stop it gracefully (a second one hands running tasks back at once); "
            "SIGTSTP makes it quiet (no new tasks). With --processes N, a supervisor runs N worker processes, "
            "restarts one that dies and passes these signals on to each.")

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--queues", "-q", help="queues with weights, e.g. critical=6,default=3,low=1")
        parser.add_argument("--concurrency", "-c", type=int, help="tasks run at once (per process)")
        parser.add_argument("--processes", "-p", type=int,
                            help="worker processes, 1 to 64 (default: QUEUECORE['PROCESSES'], 1); more than 1 "
                                 "starts a supervisor that runs this command once per process")
        parser.add_argument("--strict", action="store_true", default=None,
                            help="strict priority: never take a lower queue's task while a higher one has work")
        parser.add_argument("--shutdown-timeout", type=float, help="seconds to wait for running tasks on stop")
        parser.add_argument("--redis-url", help="Redis URL (default: QUEUECORE['REDIS_URL'])")
        parser.add_argument("--prefix", help="key prefix (default: QUEUECORE['KEY_PREFIX'])")
        parser.add_argument("--heartbeat-interval", type=float,
                            help="seconds between heartbeats (default: QUEUECORE['HEARTBEAT_INTERVAL'])")
        parser.add_argument("--health-file",
                            help="file rewritten after each heartbeat, for queuecore_healthcheck "
                                 "(default: QUEUECORE['HEALTH_FILE'])")
        parser.add_argument("--log-format", choices=("text", "json"),
                            help="text lines, or one JSON object per record (default: QUEUECORE['LOG_FORMAT'])")

        parser.add_argument("--metrics-port", type=int,
                            help="serve Prometheus metrics over HTTP on this port, 0 to 65535 (0: any free one; "
                                 "the metrics extra; default: QUEUECORE['METRICS']['PORT'])")

    def handle(self, *args: Any, **options: Any) -> None:
        link = SupervisorLink.from_environ()  # set when a supervisor (runworker --processes) started this one
        # Under a supervisor a configuration error exits with EX_CONFIG, so that it is not started again.
        error_code = EX_CONFIG if link is not None else 1
        # The settings checks again, here: with --skip-checks Django runs none, and a worker must not start
        # on settings they refuse (QUEUECORE = None ran on the defaults; a METRICS port 'abc' raised).
        refused = [m for m in check_settings() if m.is_serious()]
        if refused:
            raise CommandError(f"{refused[0].msg} ({refused[0].id})", returncode=error_code)
        try:
            config = get_config()
        except ConfigurationError as exc:
            raise CommandError(setting_message(exc), returncode=error_code) from None
        problems = import_task_modules(config.raw["TASK_MODULES"])  # ready() imported those it could
        if problems:
            raise CommandError(str(problems[0]), returncode=error_code)
        metrics_port = options.get("metrics_port")
        if metrics_port is not None and not 0 <= metrics_port <= 65535:
            raise CommandError(f"--metrics-port must be a port number (0-65535), got {metrics_port}",
                               returncode=error_code)
        verbosity = options.get("verbosity", 1)
        log_format = options.get("log_format") or config.raw.get("LOG_FORMAT") or "text"
        if log_format == "json":
            from queuecore.core.jsonlog import install

            install(logging.INFO)
        elif log_format == "text":
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        else:
            raise CommandError(f"QUEUECORE['LOG_FORMAT'] must be 'text' or 'json', not {log_format!r}")
        if verbosity > 1:  # -v 2: one line per task outcome
            logging.getLogger("queuecore").setLevel(logging.DEBUG)
        try:
            worker_config = config.worker_config(
                queues=None if options.get("queues") is None else parse_queues(options["queues"]),
                concurrency=options.get("concurrency"), strict_priority=options.get("strict"),
                shutdown_timeout=options.get("shutdown_timeout"), heartbeat_interval=options.get("heartbeat_interval"),
                health_file=options.get("health_file"))
            for flag in ("redis_url", "prefix"):  # "--prefix $P" with P unset must not mean the settings' prefix
                if options.get(flag) is not None and not options[flag].strip():
                    raise ConfigurationError(f"--{flag.replace('_', '-')} was given empty")
            connection = replace(config.connection,
                                 redis_url=options.get("redis_url") or config.connection.redis_url,
                                 key_prefix=options.get("prefix") or config.connection.key_prefix)
            # A child is one process whatever PROCESSES says (it is also given --processes 1).
            processes = 1 if link is not None else config.processes(options.get("processes"))
            if processes > 1:  # refuse now what each child would refuse at its start
                config.periodic_entries()
                config.alert_settings()
                if worker_config.health_file:
                    check_health_file(worker_config.health_file)
            refuse_a_wrong_server(connection)
        except (ConfigurationError, WrongServer) as exc:
            raise CommandError(str(exc), returncode=error_code) from None
        if processes > 1:  # each child gets its own health file (the setting's too), suffixed with its slot
            self._supervise(config, connection, processes, {**options, "health_file": worker_config.health_file})
            return
        if connection != config.connection:  # --redis-url/--prefix: the tasks run here enqueue and read there too
            set_default_client_factory(lambda: Client(connection=connection))
        names = default_registry.names()
        registered = f"registered task types: {', '.join(names) if names else '(none)'}"
        if log_format == "json":  # every line a JSON object: this one too
            logging.getLogger("queuecore.worker").info("%s", registered, extra={"qc_task_types": names})
        else:
            self.stdout.write(registered)
        try:
            worker = once_redis_answers(lambda: Worker(worker_config, connection=connection, registry=default_registry,
                                                       periodic=config.periodic_entries(),
                                                       alerts=config.alert_settings()), "the worker",
                                        orphaned=link.orphaned if link is not None else None)
        except (ConfigurationError, WrongServer) as exc:
            raise CommandError(str(exc), returncode=error_code) from None
        # A supervised child never serves metrics: its supervisor does, once (the setting's port too).
        metrics_server = None if link is not None else self._serve_metrics(config, connection,
                                                                           options.get("metrics_port"))
        try:
            run_worker(worker)
        except KeyboardInterrupt:  # a Ctrl-C after run() put the handlers back: the worker had stopped
            pass
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()

    def _supervise(self, config: Any, connection: Any, processes: int, options: dict[str, Any]) -> None:
        """Run ``processes`` copies of this command (without ``--processes``) under a ``Supervisor``;
        the metrics server, if any, runs here once (its figures come from Redis, not from a process)."""
        from django.conf import settings

        env = dict(os.environ)
        if getattr(settings, "SETTINGS_MODULE", None) and not options.get("settings"):
            env["DJANGO_SETTINGS_MODULE"] = settings.SETTINGS_MODULE
        if options.get("health_file"):  # what earlier runs left would keep the check unhealthy
            for path in remove_left_files(options["health_file"], processes, socket.gethostname()):
                logging.getLogger("queuecore.supervisor").info("removed the health file %s an earlier run left",
                                                               path)
        health_file = options.get("health_file")
        supervisor = Supervisor(lambda slot: self.child_argv(options, slot), processes, env=env,
                                on_given_up=(lambda slot, reason: write_given_up(f"{health_file}.{slot}", slot, reason))
                                if health_file else None)
        metrics_server = self._serve_metrics(config, connection, options.get("metrics_port"))
        try:
            code = supervisor.run()
        finally:
            if metrics_server is not None:
                metrics_server.shutdown()
                metrics_server.server_close()
        if code:
            raise SystemExit(code)

    @staticmethod
    def child_argv(options: dict[str, Any], slot: int) -> list[str]:
        """The command line of worker process ``slot`` (1..N): this command with the same options, but
        ``--processes 1`` (whatever ``PROCESSES`` says), ``--skip-checks`` and no ``--metrics-port``; a
        health file gets the slot as a suffix (``qc.json.2``)."""
        script = sys.argv[0] if sys.argv else ""
        if "runworker" in sys.argv[1:] and os.path.isfile(script) and os.path.basename(script) != "__main__.py":
            argv = [sys.executable, script, "runworker"]  # manage.py or django-admin, as it was started
        else:
            argv = [sys.executable, "-m", "django", "runworker"]
        # The supervisor ran the system checks: a child that failed them would exit 1 (restarted, up to
        # a crash loop), where its own start-up checks exit EX_CONFIG (given up at once).
        argv += ["--processes", "1", "--skip-checks"]
        flags = {"queues": "--queues", "concurrency": "--concurrency", "shutdown_timeout": "--shutdown-timeout",
                 "redis_url": "--redis-url", "prefix": "--prefix", "heartbeat_interval": "--heartbeat-interval",
                 "log_format": "--log-format", "settings": "--settings", "pythonpath": "--pythonpath"}
        for key, flag in flags.items():
            if options.get(key) is not None:
                argv += [flag, str(options[key])]
        if options.get("strict"):
            argv.append("--strict")
        if options.get("health_file"):
            argv += ["--health-file", f"{options['health_file']}.{slot}"]
        if options.get("verbosity") is not None:
            argv += ["--verbosity", str(options["verbosity"])]
        for key in ("no_color", "force_color", "traceback"):
            if options.get(key):
                argv.append("--" + key.replace("_", "-"))
        return argv

    def _serve_metrics(self, config: Any, connection: Any, port: int | None) -> Any:
        """Start the metrics HTTP server when a port is set (option or setting); None otherwise."""
        settings = config.metrics
        port = port if port is not None else settings.get("PORT")
        if port is None:
            return None
        try:
            from queuecore.metrics import serve
        except ImportError:
            raise CommandError("--metrics-port needs prometheus_client: pip install 'queuecore[metrics]'") from None
        from queuecore.core.inspector import Inspector

        addr = settings.get("ADDR") or "127.0.0.1"
        try:
            inspector = once_redis_answers(lambda: Inspector(connection=connection), "the metrics server")
            server = serve(int(port), inspector, addr=addr, namespace=settings.get("NAMESPACE") or "queuecore")
        except (OSError, OverflowError) as exc:
            raise CommandError(f"cannot serve metrics on {addr}:{port}: {exc}") from None
        # through the log, as the worker's lines: one JSON object with --log-format json
        logging.getLogger("queuecore.worker").info("metrics on http://%s:%s/metrics", addr, server.server_port)
        return server


def refuse_a_wrong_server(connection: ConnectionConfig) -> None:
    """``WrongServer`` now for a Redis URL that names the wrong kind of server (a plain Redis as a
    cluster or as a sentinel), a database the server lacks, or a master the sentinels do not monitor:
    a worker started on it would log errors for ever. A Redis that does not answer is no reason to
    refuse: the worker waits for it."""
    try:
        with broker_errors():
            client = connection.connect()
    except RedisUnavailable:
        return
    try:
        with broker_errors():
            client.ping()
    except RedisUnavailable:
        name = unknown_sentinel_master(client)
        if name is not None:
            raise WrongServer(f"the sentinels monitor no master named {name!r} (they answer 'No such master with "
                              "that name'): name a master they monitor in the redis+sentinel:// URL") from None
    finally:
        client.close()


def once_redis_answers(build: Callable[[], T], what: str, orphaned: Callable[[], bool] | None = None) -> T:
    """``build()``, made again every few seconds while Redis does not answer: a cluster client reads
    the slot map when it is made, so a worker started while no node answers waits for Redis (as a
    running worker, or one on a single Redis, rides an outage out) instead of exiting with a traceback.
    Logged once at ERROR, and once when Redis answers; Ctrl-C meanwhile ends the command quietly, and
    so does ``orphaned()`` turning true (a supervised child whose supervisor died), within a second."""
    log = logging.getLogger("queuecore.worker")
    delay, told = 0.5, False
    while True:
        try:
            built = build()
        except RedisUnavailable as exc:
            if not told:
                log.error("Redis is unreachable (%s): %s starts once it answers", exc, what)
                told = True
            waited = 0.0
            while waited < delay:
                if orphaned is not None and orphaned():
                    log.warning("the supervisor is gone: %s does not start", what)
                    raise SystemExit(0)  # it held nothing
                step = min(1.0, delay - waited)
                try:
                    time.sleep(step)
                except KeyboardInterrupt:
                    raise SystemExit(0) from None  # it held nothing
                waited += step
            delay = min(delay * 2, 5.0)
            continue
        if told:
            log.info("Redis answers: %s starts", what)
        return built
