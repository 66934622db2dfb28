"""The core's shape: no import cycle, and no component that needs the whole Worker."""

from __future__ import annotations

import ast
import gc
import inspect
from pathlib import Path

import pytest

from queuecore.core.acker import Acker
from queuecore.core.alerts import AlertEvaluator, AlertMonitor
from queuecore.core.forwarder import Forwarder
from queuecore.core.heartbeat import Heartbeater
from queuecore.core.janitor import Janitor
from queuecore.core.leases import LeaseRenewer
from queuecore.core.processor import Processor
from queuecore.core.recorder import Recorder
from queuecore.core.recoverer import Recoverer
from queuecore.core.runner import Runner
from queuecore.core.scheduler import Scheduler
from queuecore.core.subscriber import Subscriber

CORE = Path(__file__).resolve().parents[2] / "queuecore" / "core"


def module_name(path: Path) -> str:
    return "queuecore.core." + path.stem if path.stem != "__init__" else "queuecore.core"


def core_imports(tree: ast.AST) -> set[str]:
    """Every queuecore.core module this module imports: at the top, under TYPE_CHECKING, or
    deferred inside a function."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "queuecore.core":
                found.update(f"queuecore.core.{alias.name}" for alias in node.names)
            elif node.module.startswith("queuecore.core."):
                found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names if alias.name.startswith("queuecore.core."))
    return found


def import_graph() -> dict[str, set[str]]:
    """Parsed with the garbage collector off: on CPython 3.11 a finalizer that the collector ran inside the
    AST's construction (an earlier test's asyncio task logging on deletion) failed the parse with
    "SystemError: AST constructor recursion depth mismatch" (CPython gh-106905)."""
    modules = {module_name(path): path for path in CORE.glob("*.py")}
    gc.collect()
    gc.disable()
    try:
        return {name: core_imports(ast.parse(path.read_text())) & set(modules) for name, path in modules.items()}
    finally:
        gc.enable()


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph[node]:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_core_has_no_import_cycle() -> None:
    graph = import_graph()
    assert "queuecore.core.processor" in graph and graph["queuecore.core.worker"], "the walk found the modules"
    assert cycles(graph) == []


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"a"}}) == [["a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from queuecore.core.worker import W\n"
                     "def f():\n    from queuecore.core import client\n")
    assert core_imports(tree) == {"queuecore.core.worker", "queuecore.core.client"}


@pytest.mark.parametrize("component", [Processor, Runner, Recorder, Acker, LeaseRenewer, Heartbeater, Subscriber,
                                       Forwarder, Recoverer, Janitor, Scheduler, AlertMonitor, AlertEvaluator])
def test_no_component_takes_the_whole_worker(component: type) -> None:
    params = inspect.signature(component.__init__).parameters
    assert "worker" not in params and "processor" not in params
    assert "queuecore.core.worker" not in import_graph()[component.__module__]


# The worker's and the client's modules: each Redis operation they make goes through a script
# wrapper (scripts.py) or the broker (broker.py), so "who writes key X" has one answer.
WORKER_AND_CLIENT_MODULES = ("acker", "bulkrunner", "client", "forwarder", "handlers", "heartbeat", "janitor",
                             "leases", "processor", "recorder", "recoverer", "results", "running", "scheduler",
                             "slots", "subscriber", "supervisor", "worker")


def redis_command_names() -> set[str]:
    """redis-py's command methods, less the names that plain Python objects also have (``get``,
    ``set``, ``wait``, ``close``, ...), which an AST cannot tell apart."""
    import queue
    import threading

    import redis

    python_names: set[str] = set()
    for kind in (dict, list, set, str, bytes, threading.Event, threading.Thread, threading.Condition, queue.Queue,
                 type(threading.Lock())):
        python_names.update(dir(kind))
    commands = {name for name in dir(redis.Redis) if not name.startswith("_")}
    return commands - python_names - {"close", "shutdown", "select", "command", "time", "type", "info", "client",
                                      "lock", "from_url", "load_external_module",
                                      "get_encoder", "get_connection_kwargs", "get_retry", "set_retry",
                                      "set_response_callback", "initialize", "execute_command", "parse_response"}


def raw_redis_calls(tree: ast.AST, commands: set[str]) -> list[str]:
    """``receiver.command(...)`` calls where the command is a Redis command's and the receiver is not
    the broker (``broker``, ``_broker``, ``self.broker``, ...)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in commands:
            receiver = ast.unparse(node.func.value)
            if not receiver.split(".")[-1].lstrip("_").endswith("broker"):
                found.append(f"line {node.lineno}: {receiver}.{node.func.attr}()")
    return found


def test_worker_and_client_modules_reach_redis_only_through_scripts_and_the_broker() -> None:
    commands = redis_command_names()
    assert {"sadd", "hdel", "pipeline", "pubsub", "blmove", "smembers"} <= commands
    offenders = {name: raw_redis_calls(ast.parse((CORE / f"{name}.py").read_text()), commands)
                 for name in WORKER_AND_CLIENT_MODULES}
    assert {name: calls for name, calls in offenders.items() if calls} == {}


def test_the_raw_call_finder_finds_raw_calls() -> None:
    tree = ast.parse("self._redis.sadd(k, 'a')\nself._broker.register_queues(['a'])\npipe.hdel(k, f)\nevent.wait(1)\n")
    assert raw_redis_calls(tree, redis_command_names()) == ["line 1: self._redis.sadd()", "line 3: pipe.hdel()"]
