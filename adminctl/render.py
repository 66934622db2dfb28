"""Pure functions from Inspector dataclasses to rich renderables.

Nothing here talks to Redis or reads the clock: the caller passes ``now`` (unix seconds). User
data (payloads, errors, type and queue names) is escaped with ``fmt.escape`` and put into
``Text`` objects, never into markup. Tables are laid out to read well at 80 columns: ids are never
cut (operators copy them), free text is truncated with an ellipsis.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, Group, JustifyMethod, RenderableType, RenderResult
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from queuecore.core.context import Progress
from queuecore.core.flow import LimitInfo
from queuecore.core.inspector import NEWEST_FIRST_STATES, TaskPage
from queuecore.core.message import (
    AttemptInfo,
    DailyStats,
    QueueInfo,
    ServerInfo,
    TaskInfo,
    WaitingTaskInfo,
    WorkerInfo,
    seconds_to_datetime,
)
from queuecore.core.states import DUE_STATES, STATES

from .fmt import (
    ago,
    compact_json,
    escape,
    first_line,
    human_bytes,
    human_count,
    human_duration,
    one_line,
    percent,
    pretty_json,
    timestamp,
)
from .models import StatsSnapshot

STATE_STYLES = {
    "pending": "cyan",
    "active": "green",
    "scheduled": "blue",
    "retry": "yellow",
    "archived": "red",
    "completed": "magenta",
}
# Without colours the bar still tells the states apart by their glyph.
STATE_GLYPHS_PLAIN = {"pending": "#", "active": "@", "scheduled": "=", "retry": "~", "archived": "x",
                      "completed": "."}
CELL_LIMIT = 80  # characters of free text kept in a table cell before rich fits it to the width
LABEL_STYLE = "bold"
DIM = "dim"


@dataclass(frozen=True)
class Column:
    """A column of a ``FitTable``. ``shrink``: 2 = free text, cut first; 0 = ids, never cut: folded
    onto more lines when even so the table is too wide; 1 = numbers and words, cut last."""

    header: str
    justify: JustifyMethod = "left"
    shrink: int = 1
    min_width: int = 3
    header_style: str = "bold"


class FitTable:
    """A table that fits its width by cutting free-text columns first (with an ellipsis).

    rich's own layout, given ``no_wrap`` columns wider than the screen, drops whole columns; here
    ids and numbers keep their width and payloads, errors and names give way, so the table reads
    well at 80 columns and uses the room of a wider terminal. An id too long even then (a custom
    task id of 200 characters) folds onto more lines, whole, before a number is cut.
    """

    ID_FOLD_WIDTH = 16  # an id column folds down to this width at most

    def __init__(self, columns: Sequence[Column], rows: Sequence[Sequence[Text | str]], *,
                 title: str | None = None) -> None:
        self.columns = list(columns)
        self.rows = [[cell if isinstance(cell, Text) else Text(cell) for cell in row] for row in rows]
        self.title = title

    def _table(self, widths: Sequence[int] | None = None) -> Table:
        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 1), collapse_padding=True,
                      title=self.title, title_justify="left", title_style="bold")
        for i, col in enumerate(self.columns):
            table.add_column(col.header, justify=col.justify, no_wrap=col.shrink != 0,
                             overflow="fold" if col.shrink == 0 else "ellipsis",
                             header_style=col.header_style, width=widths[i] if widths else None)
        return table

    def widths(self, console: Console, max_width: int) -> list[int]:
        natural = [max([cell_len(col.header), *(cell_len(row[i].plain) for row in self.rows)])
                   for i, col in enumerate(self.columns)]
        probe = self._table([1] * len(self.columns))
        extra = console.measure(probe).maximum - len(self.columns)
        widths = list(natural)
        for level in (2, 0, 1):
            while sum(widths) + extra > max_width:
                candidates = [i for i, col in enumerate(self.columns) if col.shrink == level
                              and widths[i] > min(self.ID_FOLD_WIDTH if level == 0 else col.min_width, natural[i])]
                if not candidates:
                    break
                widest = max(candidates, key=lambda i: widths[i])
                widths[widest] -= 1
        return widths

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        table = self._table(self.widths(console, options.max_width))
        for row in self.rows:
            table.add_row(*row)
        yield table

    def __rich_measure__(self, console: Console, options: ConsoleOptions) -> Measurement:
        widths = self.widths(console, options.max_width)
        extra = console.measure(self._table([1] * len(self.columns))).maximum - len(self.columns)
        total = sum(widths) + extra
        return Measurement(total, total)


def _user(text: object, limit: int = CELL_LIMIT, style: str = "") -> Text:
    """A table cell of user data: escaped, on one line, truncated."""
    return Text(one_line(str(text), limit), style=style)


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLES.get(state, ""))


def _server_label(server_id: str) -> str:
    """``host:pid`` from a server id ``host:pid:nonce``."""
    head, sep, _ = server_id.rpartition(":")
    return head if sep else server_id


# -- stats ------------------------------------------------------------------------------------------


class StateBar:
    """A horizontal bar of task counts by state, as wide as the space it is given."""

    def __init__(self, counts: dict[str, int], *, color: bool = True, label: str = "Tasks") -> None:
        self.counts = counts
        self.color = color
        self.label = label

    def segments(self, width: int) -> list[tuple[str, int]]:
        """(state, cells) pairs filling ``width``; every non-empty state gets at least one cell."""
        total = sum(self.counts.values())
        if total <= 0 or width <= 0:
            return []
        present = [s for s in STATES if self.counts.get(s, 0) > 0]
        cells = {s: max(1, round(width * self.counts[s] / total)) for s in present}
        # Fix rounding so the bar is exactly ``width`` wide: adjust the largest states.
        while sum(cells.values()) > width and any(v > 1 for v in cells.values()):
            biggest = max((s for s in present if cells[s] > 1), key=lambda s: cells[s])
            cells[biggest] -= 1
        while sum(cells.values()) < width:
            biggest = max(present, key=lambda s: self.counts[s])
            cells[biggest] += 1
        return [(s, cells[s]) for s in present]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        total = sum(self.counts.values())
        total_text = human_count(total)
        label = f"{self.label} " if self.label else ""
        width = max(10, options.max_width - len(label) - len(total_text) - 1)
        bar = Text(label, style=LABEL_STYLE)
        if total == 0:
            bar.append("·" * width, style=DIM)
        for state, cells in self.segments(width):
            glyph = "█" if self.color else STATE_GLYPHS_PLAIN[state]
            bar.append(glyph * cells, style=STATE_STYLES[state])
        bar.append(f" {total_text}")
        yield bar
        legend = Table.grid(padding=(0, 1))
        for _ in range(3):
            legend.add_column()
            legend.add_column(justify="right")
        cells_row: list[Text] = []
        for state in STATES:
            glyph = "■" if self.color else STATE_GLYPHS_PLAIN[state]
            name = Text.assemble((glyph, STATE_STYLES[state]), " ", state)
            cells_row += [name, Text(human_count(self.counts.get(state, 0)) + "  ")]
        legend.add_row(*cells_row[:6])
        legend.add_row(*cells_row[6:])
        yield legend


def queue_stats_table(queues: Sequence[QueueInfo]) -> FitTable:
    """The ``stats`` queue table: size, latency, memory and today's counters per queue."""
    columns = [Column("queue", shrink=2, min_width=5), Column("state"), Column("size", "right"),
               Column("latency", "right"), Column("memory est.", "right"), Column("processed", "right"),
               Column("failed", "right"), Column("err%", "right")]
    rows = []
    for q in queues:
        if q.problem:  # a key of the wrong Redis type: no figures (the problem is printed below the table)
            rows.append([_user(q.name, 60), Text("corrupt", style="bold red"), *(Text("-") for _ in range(6))])
            continue
        rows.append([
            _user(q.name, 60),
            Text("paused", style="bold yellow") if q.paused else Text("run", style="green"),
            Text(human_count(q.size)),
            Text(human_duration(q.latency) if q.pending else "-"),
            Text(human_bytes(q.memory_bytes)),
            Text(human_count(q.processed_today)),
            Text(human_count(q.failed_today), style="red" if q.failed_today else ""),
            Text(percent(q.error_rate), style="red" if q.error_rate >= 0.05 else ""),
        ])
    return FitTable(columns, rows)


SEVERITY_STYLES = {"critical": "bold red", "warning": "yellow", "info": "cyan"}
ALERTS_NAMED = 5  # active alerts named on the stats screen; the rest are counted


def alerts_line(snap: StatsSnapshot) -> Text:
    """``2 active: big/emails (critical), mem/redis (warning) · 1 pending``, or ``none``."""
    if not snap.alerts and not snap.pending_alerts:
        return Text("none", style=DIM)
    line = Text()
    if snap.alerts:
        line.append(f"{len(snap.alerts)} active", style="bold")
        line.append(": ")
        for n, a in enumerate(snap.alerts[:ALERTS_NAMED]):
            line.append(", " if n else "")
            line.append(escape(a.id))
            line.append(f" ({a.severity})", style=SEVERITY_STYLES.get(a.severity, ""))
        if len(snap.alerts) > ALERTS_NAMED:
            line.append(f", {len(snap.alerts) - ALERTS_NAMED} more")
    else:
        line.append("none active", style=DIM)
    if snap.pending_alerts:
        line.append(f" · {len(snap.pending_alerts)} pending")
    return line


def render_stats(snap: StatsSnapshot, *, color: bool = True, problem: str | None = None,
                 footer: str | None = None) -> RenderableType:
    """The whole ``stats`` screen: the totals, the problem (an error of the latest fetch) and the
    footer above the queue table, so that a watch on a terminal shorter than the table, which crops
    the bottom, still shows them."""
    parts: list[RenderableType] = []
    header = Text.assemble(("queuecore", "bold"), "  ", (escape(snap.redis_url), DIM), "  prefix ",
                           (escape(snap.prefix), DIM))
    parts.append(header)
    parts.append(StateBar(snap.state_counts, color=color))
    if problem:
        parts.append(Text(escape(problem), style="bold red"))
    if footer:
        parts.append(Text(footer, style=DIM))
    parts.append(Text())

    def plural(n: int | None, word: str) -> str:
        return f"{human_count(n)} {word}" + ("" if n == 1 else "s")

    r = snap.redis
    redis_bits = [f"v{r.version}" if r.version else "version unknown",
                  f"{human_bytes(r.used_memory)} used" + (f" of {human_bytes(r.maxmemory)}" if r.maxmemory else ""),
                  plural(r.connected_clients, "client")]
    if r.key_count is not None:
        redis_bits.append(plural(r.key_count, "key"))
    lines = [
        ("Today (UTC)", Text.assemble(
            "processed ", (human_count(snap.processed_today), "bold"), " · failed ",
            (human_count(snap.failed_today), "bold red" if snap.failed_today else "bold"),
            " · error rate ", percent(snap.error_rate))),
        ("Alerts", alerts_line(snap)),
        ("Workers", Text.assemble((plural(len(snap.servers), "server"), "bold"), " up · ",
                                  (f"{snap.busy_workers}/{snap.concurrency}", "bold"), " busy",
                                  f" · {human_count(snap.waiting)} fetched ahead" if snap.waiting else "")),
        ("Redis", Text(" · ".join(redis_bits))),
    ]
    for label, value in lines:
        parts.append(Text.assemble((label.ljust(13), LABEL_STYLE), value))
    parts.append(Text())
    if snap.queues:
        parts.append(queue_stats_table(snap.queues))
        parts += [Text(line, style="bold red") for line in queue_problems(snap.queues)]
    else:
        parts.append(Text("no queues yet: enqueue a task to create one", style=DIM))
    return Group(*parts)


# -- queues -------------------------------------------------------------------------------------


def queue_list_table(queues: Sequence[QueueInfo]) -> FitTable:
    """``queue ls``: every queue with its size per state."""
    columns = [Column("queue", shrink=2, min_width=5), Column("paused"),
               *(Column(state, "right", header_style=f"bold {STATE_STYLES[state]}") for state in STATES)]
    rows = [[_user(q.name, 60), Text("corrupt", style="bold red"), *(Text("-") for _ in STATES)] if q.problem else
            [_user(q.name, 60), Text("paused", style="bold yellow") if q.paused else Text("no", style=DIM),
             *(Text(human_count(getattr(q, state))) for state in STATES)] for q in queues]
    return FitTable(columns, rows)


def queue_problems(queues: Sequence[QueueInfo]) -> list[str]:
    """One line per queue whose keys could not be read (``QueueInfo.problem``), for below its table."""
    return [f"queue {q.name}: {q.problem}" for q in queues if q.problem]


def limits_table(limits: Sequence[LimitInfo]) -> FitTable:
    """``queue limits``: each limited task type (per limit key in use) with its running/limit, the
    tasks waiting for a slot and the starts in the current rate window."""
    columns = [Column("type", shrink=2, min_width=8), Column("key", shrink=2, min_width=4),
               Column("running", "right"), Column("waiting", "right"), Column("rate window", "right")]
    rows = []
    for limit in limits:
        for use in limit.usage:
            running = f"{use.running}/{limit.concurrency_limit}" if limit.concurrency_limit else "-"
            rate = f"{use.rate_used}/{limit.rate_limit} per {limit.rate_window:g}s" if limit.rate_limit else "-"
            rows.append([_user(limit.type, 60), _user(use.key or "-", 40), Text(running), Text(str(use.waiting)),
                         Text(rate)])
    return FitTable(columns, rows)


SPARK = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[int]) -> str:
    top = max(values, default=0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, round(v / top * (len(SPARK) - 1)))] for v in values)


def queue_detail(q: QueueInfo, minutes: Sequence[DailyStats] | None = None, *, color: bool = True) -> RenderableType:
    """``queue inspect``: sizes, health and counters of one queue."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style=LABEL_STYLE, no_wrap=True)
    grid.add_column()
    grid.add_row("Queue", Text.assemble((escape(q.name), "bold"), "  ",
                                        ("paused", "bold yellow") if q.paused else ("running", "green")))
    if q.paused and (q.paused_until or q.paused_by):
        until = f"until {q.paused_until.isoformat(timespec='seconds')}" if q.paused_until else "until unpaused"
        grid.add_row("Paused", f"{until}" + (f", by {escape(q.paused_by)}" if q.paused_by else ""))
    grid.add_row("Size", Text(f"{human_count(q.size)} (every state but completed)"))
    grid.add_row("States", StateBar({s: getattr(q, s) for s in STATES}, label="", color=color))
    grid.add_row("Latency", human_duration(q.latency) + " (age of the next task to run)" if q.pending else "-")
    grid.add_row("Memory", human_bytes(q.memory_bytes) + (" (sampled estimate)" if q.memory_bytes is not None else ""))
    grid.add_row("Today (UTC)", f"processed {human_count(q.processed_today)} · failed {human_count(q.failed_today)}"
                                f" · error rate {percent(q.error_rate)}")
    grid.add_row("All time", f"processed {human_count(q.processed_total)} · failed {human_count(q.failed_total)}")
    if minutes:
        processed = [m.processed for m in minutes]
        grid.add_row(f"Last {len(minutes)} min", Text(sparkline(processed), style="green"))
        grid.add_row("", Text(f"{human_count(sum(processed))} processed, "
                              f"{human_count(sum(m.failed for m in minutes))} failed (one bar per minute)", style=DIM))
    return grid


class HistoryChart:
    """Processed and failed per day as horizontal bars: ``█`` succeeded, ``░`` failed."""

    def __init__(self, days: Sequence[DailyStats]) -> None:
        self.days = list(days)

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        numbers = [f"{human_count(d.processed)} processed, {human_count(d.failed)} failed" for d in self.days]
        number_width = max((len(n) for n in numbers), default=0)
        date_width = max((len(d.date) for d in self.days), default=10)
        bar_width = max(10, options.max_width - date_width - number_width - 4)
        top = max((d.processed for d in self.days), default=0)
        for day, number in zip(self.days, numbers, strict=True):
            line = Text(day.date.ljust(date_width) + "  ")
            cells = 0 if top == 0 else max(1 if day.processed else 0, round(bar_width * day.processed / top))
            failed_cells = 0
            if day.processed and day.failed:
                failed_cells = max(1, round(cells * min(day.failed, day.processed) / day.processed))
            line.append("█" * (cells - failed_cells), style="green")
            line.append("░" * failed_cells, style="red")
            line.append(" " * (bar_width - cells) + "  ")
            line.append(number.rjust(number_width), style=DIM if not day.processed else "")
            yield line
        total_p = sum(d.processed for d in self.days)
        total_f = sum(d.failed for d in self.days)
        yield Text.assemble((f"{len(self.days)} days: {human_count(total_p)} processed, {human_count(total_f)} failed "
                             f"({percent(total_f / total_p if total_p else 0.0)}); ", DIM),
                            ("█", "green"), (" succeeded ", DIM), ("░", "red"), (" failed", DIM))


# -- tasks --------------------------------------------------------------------------------------


def _tries(t: TaskInfo) -> str:
    return f"{t.retried}/{t.max_retry}" if t.max_retry >= 0 else f"{t.retried}/∞"


def task_table(tasks: Sequence[TaskInfo], state: str, now: float) -> FitTable:
    """``task ls``: columns chosen for the state (errors for retry/archived, results for completed)."""
    columns = [Column("id", shrink=0), Column("type", shrink=2, min_width=8)]
    if state in ("retry", "archived"):
        columns += [Column("retried", "right"), Column("due" if state == "retry" else "archived", "right"),
                    Column("last error", shrink=2, min_width=10)]
    elif state == "completed":
        columns += [Column("completed", "right"), Column("result", shrink=2, min_width=10)]
    else:
        columns += [Column("payload", shrink=2, min_width=10),
                    Column({"pending": "waiting", "active": "running"}.get(state, "due"), "right")]
    rows = []
    for t in tasks:
        type_cell = _user(t.type, 40) if not t.decode_error else Text("(undecodable)", style="red")
        if state in ("retry", "archived"):
            when = ago(t.next_process_at, now) if state == "retry" else ago(t.archived_at, now)
            rows.append([Text(t.id), type_cell, Text(_tries(t)), Text(when),
                         _user(first_line(t.last_error), style="red")])
        elif state == "completed":
            rows.append([Text(t.id), type_cell, Text(ago(t.completed_at, now)),
                         _user(compact_json(t.result)) if t.result is not None else Text("-", style=DIM)])
        else:
            if state == "active":  # running since its handler started; "waiting": fetched ahead, not started
                when = human_duration(now - t.started_at.timestamp()) if t.started_at else (
                    "waiting" if t.worker else "-")
            elif state == "pending":
                when = human_duration(now - t.next_process_at.timestamp()) if t.next_process_at else "-"
            else:
                when = ago(t.next_process_at, now)
            rows.append([Text(t.id), type_cell, _user(compact_json(t.payload)), Text(when)])
    return FitTable(columns, rows)


def page_footer(page: TaskPage, queue: str, state: str) -> Text:
    """``page 2 of 5 · 81-100 of 100 pending tasks`` (and what a filter matched)."""
    first = (page.page - 1) * page.size + 1
    last = first + len(page.tasks) - 1
    text = Text(style=DIM)
    text.append(f"page {page.page} of {page.pages} · ")
    shown = f"{first:,}-{last:,}" if page.tasks else "none"
    if page.matched is None:
        text.append(f"{shown} of {human_count(page.total)} {state} tasks in queue {escape(queue)}")
    elif page.scanned_all:
        text.append(f"{shown} of {human_count(page.matched)} matching, among {human_count(page.total)} "
                    f"{state} tasks in queue {escape(queue)}")
    else:
        text.append(f"{shown} of {human_count(page.matched)} matching, among the {page.order} "
                    f"{human_count(page.scanned or 0)} of {human_count(page.total)} {state} tasks in queue "
                    f"{escape(queue)} (the others were not searched; narrow with --type, or --sort "
                    f"{'oldest' if page.order == 'newest' else 'newest'})")
    if page.order != "oldest" or state in NEWEST_FIRST_STATES:
        text.append(f" · {page.order} first")
    return text


def task_detail(t: TaskInfo, now: float) -> RenderableType:
    """``task inspect``: every field, the whole payload, error and result."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style=LABEL_STYLE, no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("ID", t.id)
    grid.add_row("Queue", escape(t.queue))
    grid.add_row("Type", escape(t.type))
    grid.add_row("State", _state(t.state.value))
    grid.add_row("Retried", _tries(t))
    if t.snoozed:
        grid.add_row("Snoozed", f"{t.snoozed} time(s) (not retries)")
    if t.waiting:
        grid.add_row("Held back", Text(f"by the {t.waiting}", style="yellow"))
    grid.add_row("Enqueued", timestamp(t.enqueued_at, now))
    if t.next_process_at and t.state in DUE_STATES:
        grid.add_row("Due", timestamp(t.next_process_at, now))
    if t.state == "active":
        grid.add_row("Fetched", timestamp(t.fetched_at, now) if t.fetched_at else "-")
        grid.add_row("Worker", escape(t.worker) if t.worker else Text("not in any live heartbeat", style=DIM))
        grid.add_row("Started", timestamp(t.started_at, now) if t.started_at else Text(
            "not yet (fetched ahead, waiting for a free slot)" if t.worker else "not reported yet", style=DIM))
        if t.progress is not None:
            grid.add_row("Progress", escape(progress_text(t.progress)))
    elif t.started_at:
        grid.add_row("Last attempt started" if t.retried or t.last_failed_at else "Started",
                     timestamp(t.started_at, now))
    if t.completed_at:
        grid.add_row("Completed", timestamp(t.completed_at, now))
    if t.archived_at:
        grid.add_row("Archived", timestamp(t.archived_at, now))
    if t.last_failed_at:
        grid.add_row("Last failed", timestamp(t.last_failed_at, now))
    grid.add_row("Timeout", human_duration(t.timeout) if t.timeout else "-")
    if t.deadline:
        grid.add_row("Deadline", timestamp(t.deadline, now))
    if t.retention:
        grid.add_row("Retention", human_duration(t.retention))
    if t.unique_key:
        grid.add_row("Unique key", escape(t.unique_key))
    if t.cancel_requested:
        grid.add_row("Cancel", Text("requested", style="yellow"))
    parts: list[RenderableType] = [grid, Text(), Text("Payload", style=LABEL_STYLE),
                                   Text(escape(pretty_json(t.payload), keep_newlines=True))]
    if t.decode_error:
        parts += [Text(), Text("Decode error", style="bold red"), Text(escape(t.decode_error, keep_newlines=True))]
    if t.attempts:
        parts += [Text(), attempts_table(t.attempts, now)]
    for e in t.edits:
        when = seconds_to_datetime(e["at"]) if isinstance(e.get("at"), (int, float)) else None
        parts += [Text(), Text(f"Payload edited by {e.get('actor', '?')} {timestamp(when, now)}; it was:", style=DIM),
                  Text(escape(str(e.get("before", "")) + (" …" if e.get("cut") else "")))]
    if t.last_error:
        parts += [Text(), Text("Last error", style="bold red"), Text(escape(t.last_error, keep_newlines=True))]
    if t.result is not None:
        parts += [Text(), Text("Result", style=LABEL_STYLE), Text(escape(pretty_json(t.result), keep_newlines=True))]
    return Group(*parts)


def attempts_table(attempts: Sequence[AttemptInfo], now: float) -> FitTable:
    """A task's attempt history (the last 10 attempts): when each started, how long it ran, on which
    worker, and how it ended."""
    columns = [Column("#", "right"), Column("worker", shrink=2, min_width=8), Column("started", "right"),
               Column("ran", "right"), Column("result"), Column("error", shrink=2, min_width=10)]
    words = {"retry": "failed, retried", "archived": "failed, archived"}
    rows = []
    for a in attempts:
        if a.started_at:
            started = Text(ago(a.started_at, now))
        elif a.fetched_at:
            started = Text(f"fetched {ago(a.fetched_at, now)}", style=DIM)
        else:
            started = Text("never", style=DIM)
        rows.append([Text(str(a.number)),
                     _user(_server_label(a.worker), 60) if a.worker else Text("lost", style="red"), started,
                     Text(human_duration(a.duration)) if a.duration is not None else Text("?", style=DIM),
                     Text(words.get(a.result, a.result), style="green" if a.result == "completed" else "red"),
                     _user(a.error, style="red") if a.error else Text("-", style=DIM)])
    return FitTable(columns, rows, title=f"Attempts (the last {len(attempts)}, at most 10)")


# -- servers and workers ------------------------------------------------------------------------


def server_table(servers: Sequence[ServerInfo], now: float) -> FitTable:
    """``server ls``: one row per live worker process. ``busy``: handlers running of ``concurrency``;
    ``ahead``: tasks fetched ahead, waiting for a free slot."""
    columns = [Column("host", shrink=2, min_width=8), Column("pid", "right"), Column("status"),
               Column("busy", "right"), Column("ahead", "right"), Column("queues", shrink=2, min_width=8),
               Column("started", "right")]
    status_styles = {"active": "green", "quiet": "yellow", "stopping": "red"}
    rows = []
    for srv in servers:
        queues = " ".join(f"{escape(name)}={weight}" for name, weight in srv.queues.items())
        if srv.strict_priority:
            queues += " (strict)"
        busy_style = "bold" if srv.active_count >= srv.concurrency else ""
        rows.append([_user(srv.host, 60), Text(str(srv.pid)),
                     Text(escape(srv.status), style=status_styles.get(srv.status, "")),
                     Text(f"{srv.active_count}/{srv.concurrency}", style=busy_style),
                     Text(str(srv.waiting_count), style=DIM if not srv.waiting_count else ""), Text(queues),
                     Text(ago(srv.started_at, now))])
    return FitTable(columns, rows)


def progress_text(p: Progress, *, short: bool = False) -> str:
    """``30% (3 of 10) rows of customers.csv``; with ``short``, the percentage or the count only."""
    count = f"{p.done:g}" if p.total is None else f"{p.done:g} of {p.total:g}"
    if short:
        return f"{p.fraction:.0%}" if p.fraction is not None else count
    head = f"{p.fraction:.0%} ({count})" if p.fraction is not None else count
    return f"{head} {p.note}" if p.note else head


def worker_table(workers: Iterable[WorkerInfo], now: float, *, title: str | None = None) -> FitTable:
    """Tasks being processed right now: which process, which task, and for how long."""
    workers = sorted(workers, key=lambda w: w.started_at)
    reported = any(w.progress for w in workers)  # the progress column only when a handler reports it
    columns = [Column("server", shrink=2, min_width=8), Column("queue", shrink=2, min_width=5),
               Column("type", shrink=2, min_width=6), Column("task id", shrink=0), Column("running", "right")]
    if reported:
        columns.append(Column("progress", shrink=2, min_width=4))
    rows = []
    for w in workers:
        overdue = w.deadline is not None and w.deadline.timestamp() < now
        row = [_user(_server_label(w.server_id), 60), _user(w.queue, 40), _user(w.type, 60), Text(w.task_id),
               Text(human_duration(now - w.started_at.timestamp()), style="red" if overdue else "")]
        if reported:
            row.append(_user(progress_text(w.progress, short=True) if w.progress else "-", 60))
        rows.append(row)
    return FitTable(columns, rows, title=title)


def waiting_table(waiting: Iterable[WaitingTaskInfo], now: float, *, title: str | None = None) -> FitTable:
    """Tasks fetched ahead that wait for a free slot: which process, which task, and since when."""
    columns = [Column("server", shrink=2, min_width=8), Column("queue", shrink=2, min_width=5),
               Column("type", shrink=2, min_width=6), Column("task id", shrink=0), Column("waiting", "right")]
    rows = [[_user(_server_label(w.server_id), 60), _user(w.queue, 40), _user(w.type, 60), Text(w.task_id),
             Text(human_duration(now - w.fetched_at.timestamp()))]
            for w in sorted(waiting, key=lambda w: w.fetched_at)]
    return FitTable(columns, rows, title=title)
