"""The libraries the benchmark knows: name -> (module, class, variant, virtualenv).

Adapter modules import their library at import time, so they are imported only in the driver
process of that library (``load``), never by ``bench.run``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from bench.adapters.base import Adapter


@dataclass(frozen=True)
class LibSpec:
    name: str
    module: str
    cls: str
    variant: str = ""
    venv: str = ".venv-bench"  # where its pinned version is installed (bench/run.sh makes it)


LIBS: dict[str, LibSpec] = {spec.name: spec for spec in (
    LibSpec("queuecore", "bench.adapters.queuecore", "QueuecoreAdapter"),
    LibSpec("rq", "bench.adapters.rq", "RQAdapter"),
    LibSpec("rq-simple", "bench.adapters.rq", "RQAdapter", "simple"),
    LibSpec("celery", "bench.adapters.celery", "CeleryAdapter"),
    LibSpec("dramatiq", "bench.adapters.dramatiq", "DramatiqAdapter"),
    LibSpec("arq", "bench.adapters.arq", "ArqAdapter", venv=".venv-bench-arq"),
    LibSpec("huey", "bench.adapters.huey", "HueyAdapter"),
    LibSpec("taskiq", "bench.adapters.taskiq", "TaskiqAdapter"),
    LibSpec("taskiq-stream", "bench.adapters.taskiq", "TaskiqAdapter", "stream"),
)}


def spec_of(name: str) -> LibSpec:
    """``name``'s spec; ``queuecore@LABEL`` (another tree of queuecore, ``--tree``) is queuecore's."""
    return LIBS[name.split("@", 1)[0] if name.startswith("queuecore@") else name]


def load(name: str, broker_url: str, counter_url: str, concurrency: int) -> Adapter:
    """Import the adapter of library ``name`` (and so the library) and build it."""
    spec = spec_of(name)
    module = importlib.import_module(spec.module)
    adapter: Adapter = getattr(module, spec.cls)(broker_url, counter_url, concurrency, spec.variant)
    adapter.name = name
    return adapter
