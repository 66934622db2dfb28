"""queuecore's benchmark against its Python peers.

``python -m bench.run [--quick]`` (or ``bench/run.sh``, which also builds the benchmark's
virtualenvs) starts a private Redis, runs every library's scenarios in a driver process of its
own (``bench.driver``), one library after another, and writes a Markdown table, a JSON file and a
PNG chart to ``bench/results/``. Only ``bench.run``, ``bench.common``, ``bench.driver``,
``bench.report`` and the queuecore adapter are needed to benchmark queuecore alone; the peers'
adapters import their libraries lazily.
"""
