"""The small interface every library's adapter implements.

An adapter lives in the driver process of its library. It enqueues through the library's normal
API (``enqueue_one``; ``enqueue_batch`` with the library's bulk API, or its documented idiom for
many tasks where it has none) and says how to start one worker process (``worker_argv``).
Asyncio libraries subclass ``AsyncAdapter`` and implement the ``a*`` coroutines; sequences of
enqueues then run inside one coroutine, so no event-loop round trip is added per task.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.common import ENV_BROKER, ENV_CONCURRENCY, ENV_COUNTER, ENV_VARIANT, REPO_ROOT, process_tree, work_dir

Payload = dict[str, Any]
MakePayload = Callable[[int], Payload]


class Adapter:
    """One library, as the driver sees it."""

    #: the name used on the command line and in the report
    name = ""
    #: the distribution whose version the report shows
    package = ""
    #: whether a task that was running when its worker was killed is run again without an operator
    survives_kill = False
    #: what happens to a task whose worker is killed mid-task (checked against the pinned version)
    on_kill = ""
    #: how the library is configured for the benchmark
    config = ""
    #: whether ``enqueue_in`` (a task due after a delay) is implemented
    supports_scheduled = False
    #: the bulk API ``enqueue_batch`` uses
    batch_api = ""
    #: how the library's own multi-process mode is run (``processes_argv``), "" when it has none
    processes_config = ""
    #: ``async def`` handlers (the ``drain_async`` scenario): "native" when every handler of the
    #: library is a coroutine, "yes" when it runs both kinds (``use_async`` picks the async task
    #: type), "" when it has none
    async_handlers = ""

    def __init__(self, broker_url: str, counter_url: str, concurrency: int, variant: str = "") -> None:
        self.broker_url = broker_url
        self.counter_url = counter_url
        self.concurrency = concurrency
        self.variant = variant
        self.use_async = False  # set by the driver while it measures ``drain_async``

    # -- the library's version, the worker's command line ------------------------------------------

    def version(self) -> str:
        try:
            return metadata.version(self.package)
        except metadata.PackageNotFoundError:
            return "?"

    def bin(self, script: str) -> str:
        """A console script installed beside this interpreter (``celery``, ``rq``, …)."""
        return str(Path(sys.executable).parent / script)

    def worker_argv(self) -> list[str]:
        """The command that starts one worker process."""
        raise NotImplementedError

    def processes_argv(self, processes: int) -> list[str] | None:
        """The library's own command that runs ``processes`` worker processes (a supervisor or a
        pre-forking parent and its children), or None when it has none."""
        return None

    def worker_env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({ENV_BROKER: self.broker_url, ENV_COUNTER: self.counter_url,
                    ENV_CONCURRENCY: str(self.concurrency), ENV_VARIANT: self.variant})
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p)
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def start_workers(self, n: int, log_path: str | None = None,
                      processes: int | None = None) -> list[subprocess.Popen[bytes]]:
        """Start ``n`` worker processes, each in a session of its own (so its children stop with it);
        with ``processes``, ``n`` runs of the library's multi-process command (``processes_argv``)."""
        procs = []
        argv = self.worker_argv() if processes is None else self.processes_argv(processes)
        if argv is None:
            raise RuntimeError(f"{self.name} has no multi-process mode")
        for i in range(n):
            out = open(f"{log_path}.{i}", "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115
            procs.append(subprocess.Popen(argv, env=self.worker_env(), cwd=work_dir(),
                                          stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            if log_path:
                out.close()  # type: ignore[union-attr]
        return procs

    @staticmethod
    def stop_workers(procs: list[subprocess.Popen[bytes]], grace: float = 0.0) -> None:
        """Stop worker processes and their children: SIGTERM, then SIGKILL after ``grace`` seconds.

        The benchmark flushes Redis after each phase, so ``grace=0`` (SIGKILL at once) is the default.
        """
        sig = signal.SIGTERM if grace > 0 else signal.SIGKILL
        # Children that run in sessions of their own (queuecore's supervised workers) are
        # killed one by one; they are found before their parent goes.
        tree = [pid for pid in process_tree(p.pid for p in procs) if pid not in {p.pid for p in procs}]
        for p in procs:
            try:
                os.killpg(p.pid, sig)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        for p in procs:
            try:
                p.wait(max(deadline - time.monotonic(), 0.01))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        for pid in tree:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    # -- enqueueing --------------------------------------------------------------------------------

    def setup(self) -> None:
        """Connect; called once in the driver before any scenario."""

    def close(self) -> None:
        """Release connections."""

    def reset(self) -> None:
        """Called after the broker Redis was flushed: re-create what the library declares up front."""

    def enqueue_one(self, payload: Payload) -> None:
        raise NotImplementedError

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        raise NotImplementedError

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        raise NotImplementedError

    def run_sequence(self, n: int, make_payload: MakePayload, at: Callable[[int], float] | None = None,
                     delay: float | None = None) -> float:
        """Enqueue ``n`` tasks one by one; task ``i`` not before monotonic time ``at(i)`` when given.

        ``make_payload(i)`` is called right before each enqueue (so its timestamps are fresh);
        ``delay`` makes each task due that many seconds later. Returns the elapsed seconds.
        """
        enqueue = self.enqueue_one if delay is None else (lambda p: self.enqueue_in(p, delay))
        start = time.perf_counter()
        for i in range(n):
            if at is not None:
                _sleep_until(at(i))
            enqueue(make_payload(i))
        return time.perf_counter() - start


def _sleep_until(when: float) -> None:
    remaining = when - time.monotonic()
    if remaining > 0.002:
        time.sleep(remaining - 0.001)
    while time.monotonic() < when:
        pass


class AsyncAdapter(Adapter):
    """An adapter for an asyncio library: ``a*`` coroutines run on a loop the adapter owns."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.loop = asyncio.new_event_loop()

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    async def asetup(self) -> None:
        pass

    async def aclose(self) -> None:
        pass

    async def aenqueue_one(self, payload: Payload) -> None:
        raise NotImplementedError

    async def aenqueue_batch(self, payloads: list[Payload]) -> None:
        raise NotImplementedError

    async def aenqueue_in(self, payload: Payload, delay: float) -> None:
        raise NotImplementedError

    def setup(self) -> None:
        self.run(self.asetup())

    def close(self) -> None:
        self.run(self.aclose())
        self.loop.close()

    def enqueue_one(self, payload: Payload) -> None:
        self.run(self.aenqueue_one(payload))

    def enqueue_batch(self, payloads: list[Payload]) -> None:
        self.run(self.aenqueue_batch(payloads))

    def enqueue_in(self, payload: Payload, delay: float) -> None:
        self.run(self.aenqueue_in(payload, delay))

    def run_sequence(self, n: int, make_payload: MakePayload, at: Callable[[int], float] | None = None,
                     delay: float | None = None) -> float:
        async def sequence() -> float:
            start = time.perf_counter()
            for i in range(n):
                if at is not None:
                    _sleep_until(at(i))  # nothing else runs on this loop: a blocking wait is exact
                if delay is None:
                    await self.aenqueue_one(make_payload(i))
                else:
                    await self.aenqueue_in(make_payload(i), delay)
            return time.perf_counter() - start

        return self.run(sequence())

    @staticmethod
    async def gather_bounded(coros: list[Any], limit: int = 100) -> None:
        """Await ``coros`` concurrently, at most ``limit`` at a time (one connection each)."""
        for i in range(0, len(coros), limit):
            await asyncio.gather(*coros[i:i + limit])
