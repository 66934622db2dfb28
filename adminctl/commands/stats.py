"""``adminctl stats [--watch]``: the state of every queue, the workers and Redis on one screen."""

from __future__ import annotations

import time

import click
from rich.console import RenderableType

from ..app import App
from ..models import StatsSnapshot
from ..options import Duration, json_option
from ..render import render_stats
from ..watch import watch


def take_snapshot(app: App) -> StatsSnapshot:
    """Read everything ``stats`` shows (five Inspector calls, a few round-trips)."""
    ins = app.inspector
    queues = ins.all_queue_info()
    servers = ins.servers()
    info = ins.redis_info(count_keys=False)
    alerts, pending = ins.alerts_and_pending()
    return StatsSnapshot(taken_at=app.now(), redis_url=app.redacted_url or "", prefix=app.connection.key_prefix,
                         queues=queues, servers=servers, redis=info, alerts=alerts, pending_alerts=pending)


WATCH_MAX_INTERVAL = 86_400.0  # seconds: a day between refreshes at most


@click.command()
@click.option("--watch", "-w", "watching", is_flag=True, help="Redraw in place every interval until Ctrl-C.")
@click.option("--interval", "-n", type=Duration(minimum=0.1, maximum=WATCH_MAX_INTERVAL), default=1.0,
              show_default=True, metavar="S",
              help="Seconds between refreshes with --watch (e.g. 0.5, 2, 1m).")
@click.option("--count", type=click.IntRange(min=1), metavar="N",
              help="With --watch: stop after N refreshes instead of running until Ctrl-C.")
@json_option
@click.pass_obj
def stats(app: App, watching: bool, interval: float, count: int | None) -> None:
    """Show queues, workers and Redis at a glance.

    A bar of every task by state, a table of queues (paused, size, latency,
    memory, processed and failed today, error rate), today's totals, the
    active and pending alerts, servers up and busy workers, and Redis
    version, memory and clients.

    With --watch the screen is redrawn in place every --interval seconds until
    Ctrl-C (exit 0). When stdout is not a terminal, or with --json, --watch
    prints one JSON object per line per interval instead.

    \b
    Examples:
      adminctl stats
      adminctl stats --watch
      adminctl stats --watch --interval 5
      adminctl stats --json | jq '.totals'
      adminctl stats --watch --interval 10 > stats.jsonl
    """
    term = app.terminal
    if not watching:
        snapshot = take_snapshot(app)
        if app.json:
            term.json(snapshot.to_dict())
        else:
            term.print(render_stats(snapshot, color=term.color))
        return

    def draw(snapshot: StatsSnapshot, problem: str | None) -> RenderableType:
        footer = (f"updated {time.strftime('%H:%M:%S', time.localtime(snapshot.taken_at))} · every {interval:g}s"
                  " · Ctrl-C to quit")
        return render_stats(snapshot, color=term.color, problem=problem, footer=footer)

    watch(lambda: take_snapshot(app), draw, StatsSnapshot.to_dict, terminal=term, interval=interval,
          json_lines=app.json or not term.stdout_is_terminal, count=count)
