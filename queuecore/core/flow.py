"""Flow control for task types: global concurrency limits and rate limits (``@task(concurrency_limit=N,
rate_limit="100/m", limit_key=...)``), enforced across every worker through Redis.

Where the state lives: the keys of one type's limits carry the hash tag ``{lim:<type>}`` (``LimitKeys``),
since a limit is shared by every queue the type runs in; every limit script touches only them.

How a limited task runs: the worker dequeues it like any task; just before its handler starts, one
``limit_acquire`` call takes a concurrency slot (scored by the task's lease expiry and renewed with
it, so a killed worker's slot comes back when its lease expires) and a place in the rate window,
both or neither. When it cannot, the attempt ends without counting: the task is parked in its
queue's ``scheduled`` set (``park``, no retry used) with a ``waiting`` reason, until

- rate limit: the time the window has room for it; each held-back task is handed its own place,
  ``window / limit`` apart, so they come back one by one, never all at once;
- concurrency limit: a slot is freed. The task is listed in the limit's ``waiting`` set
  (``limit_wait``); ``limit_release`` hands each freed slot to the longest waiting task, whose
  worker moves it to the head of its queue (``limit_wake``). As a backstop (a releasing worker died
  between the two calls) it comes back by itself when the earliest held slot would expire.

Nothing polls: a held-back task costs one acquire and one park, then one more try per wake-up.
Task types without limits never reach this module (no extra round-trip).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from typing import Any

from queuecore.core.clock import Clock, to_ms
from queuecore.core.errors import ConfigurationError, InvalidOption, shown
from queuecore.core.errors import Snooze as Snooze  # re-exported: flow control in one import
from queuecore.core.keys import Keys, LimitKeys, QueueKeys
from queuecore.core.limits import MAX_DURATION, Range
from queuecore.core.scripts import Scripts

logger = logging.getLogger("queuecore.worker")

MAX_CONCURRENCY_LIMIT = 1_000_000
MAX_RATE_LIMIT = 100_000  # starts per window: the window's starts are kept (one ZSET member each)
_UNITS = {"s": 1.0, "sec": 1.0, "second": 1.0, "m": 60.0, "min": 60.0, "minute": 60.0, "h": 3600.0,
          "hour": 3600.0, "d": 86400.0, "day": 86400.0}
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d+\.?\d*|\.\d+)?\s*([a-z]+)\s*$")  # count / [multiplier] unit
# A task held back by a concurrency limit behind n others comes back by itself (should no freed slot be
# handed to it) after (1 + n // limit) times the earliest slot's remaining lease, at most this many times.
BACKSTOP_SPREAD = 4
WAKE_ROUNDS = 10  # calls a release makes to hand slots on past waiters that no longer wait
_SAFE_KEY = re.compile(r"^[A-Za-z0-9_.:@+=-]{1,100}$")


def parse_rate(text: str) -> tuple[int, float]:
    """``"100/m"`` -> (100, 60.0): starts per window of seconds. Units s, m, h, d (or second, minute,
    hour, day); a number before the unit multiplies it (``"5/10s"``)."""
    match = _RATE.match(text.lower()) if isinstance(text, str) else None
    if not match or match.group(3) not in _UNITS:
        raise ConfigurationError(f"invalid rate_limit {shown(text)}: expected '<count>/<unit>' such as '100/m' or "
                                 "'5/10s' (units s, m, h, d)")
    count = int(match.group(1))
    window = (float(match.group(2)) if match.group(2) else 1.0) * _UNITS[match.group(3)]
    if not 1 <= count <= MAX_RATE_LIMIT or not 0.001 <= window <= 86400 * 7:
        raise ConfigurationError(
            f"invalid rate_limit {shown(text)}: 1 to {MAX_RATE_LIMIT} starts per 0.001 s to 7 days")
    return count, window


@dataclass(frozen=True)
class TaskLimits:
    """The limits of one task type: at most ``concurrency`` running at once, at most ``rate`` starts
    per ``window`` seconds; per value of ``key`` (a payload field name, or a callable of the payload)
    when given, else one limit for the type."""

    concurrency: int = 0  # 0 = none
    rate: int = 0  # 0 = none
    window: float = 0.0
    key: str | Callable[[dict[str, Any]], Any] | None = None

    @classmethod
    def build(cls, concurrency_limit: Any = None, rate_limit: Any = None, limit_key: Any = None) -> TaskLimits | None:
        """The limits ``@task`` was given, checked; None when there are none."""
        if concurrency_limit is None and rate_limit is None:
            if limit_key is not None:
                raise ConfigurationError("limit_key needs concurrency_limit or rate_limit")
            return None
        concurrency = 0
        if concurrency_limit is not None:
            if isinstance(concurrency_limit, bool) or not isinstance(concurrency_limit, int) \
                    or not 1 <= concurrency_limit <= MAX_CONCURRENCY_LIMIT:
                raise ConfigurationError(f"invalid concurrency_limit {shown(concurrency_limit)}: a whole number from 1 "
                                         f"to {MAX_CONCURRENCY_LIMIT}")
            concurrency = concurrency_limit
        rate, window = parse_rate(rate_limit) if rate_limit is not None else (0, 0.0)
        if limit_key is not None and not (callable(limit_key) or (isinstance(limit_key, str) and limit_key)):
            raise ConfigurationError(f"invalid limit_key {shown(limit_key)}: a payload field name or a callable")
        return cls(concurrency, rate, window, limit_key)

    def key_for(self, payload: dict[str, Any]) -> str:
        """The limit key of a payload: "" without ``key``; else its value as text (a value that is not
        a short safe token is hashed: ``~<sha256 prefix>``; a missing field is ``none``)."""
        if self.key is None:
            return ""
        try:
            value = self.key(payload) if callable(self.key) else payload.get(self.key)
        except Exception:
            logger.exception("limit_key raised; using the key 'none'")
            value = None
        text = "none" if value is None else str(value)
        if _SAFE_KEY.match(text):
            return text
        return "~" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:24]

    def describe(self) -> dict[str, Any]:
        """What a worker publishes of these limits with its heartbeat (``Handler.describe``)."""
        out: dict[str, Any] = {}
        if self.concurrency:
            out["concurrency_limit"] = self.concurrency
        if self.rate:
            out["rate_limit"] = [self.rate, self.window]
        if self.key is not None:
            out["limit_key"] = self.key if isinstance(self.key, str) else "(callable)"
        return out


@dataclass
class LimitHold:
    """A concurrency slot a running attempt holds: released when it ends, renewed while it runs."""

    keys: LimitKeys
    key: str
    member: str
    concurrency: int


class LimitGate:
    """A worker's side of the limits: acquire before a limited handler starts; release (in the
    background, batched per limit) when it ends; renew held slots every ``renew_interval``."""

    def __init__(self, scripts: Scripts, keys: Keys, queue_keys: Mapping[str, QueueKeys], clock: Clock,
                 lease_duration: float, renew_interval: float) -> None:
        self._scripts = scripts
        self._keys = keys
        self._queue_keys = queue_keys
        self._clock = clock
        self._lease_duration = lease_duration
        self._renew_interval = renew_interval
        self._held: dict[int, LimitHold] = {}
        self._released: list[LimitHold] = []
        self._cond = threading.Condition()
        self._stop = False
        self._thread: threading.Thread | None = None

    # -- in a handler's thread ---------------------------------------------------------------------

    def acquire(self, limits: TaskLimits, type_name: str, queue: str, task_id: str,
                payload: dict[str, Any], lease: int = 0) -> tuple[LimitHold | None, float, str]:
        """Try to start: ``(hold, 0, "")`` when it may run now (``hold`` None without a concurrency
        limit), else ``(None, seconds to wait at most, why)``. The slot is the attempt's (``lease``,
        its fencing token): a stale attempt that ends after its task was taken back and started again
        frees only its own slot, never the new attempt's."""
        lim = self._keys.limit(type_name)
        key = limits.key_for(payload)
        member = f"{queue} {task_id}"
        slot = f"{member} {lease}"
        now = self._clock.now()
        ok, kind, when_ms, ahead = self._scripts.limit_acquire(
            lim, member, slot=slot, key=key, now_ms=to_ms(now), expires_ms=to_ms(now + self._lease_duration),
            concurrency=limits.concurrency, rate=limits.rate, window_ms=max(1, to_ms(limits.window)))
        label = type_name + (f" [{key}]" if key else "")
        if ok:
            if not limits.concurrency:
                return None, 0.0, ""
            hold = LimitHold(lim, key, slot, limits.concurrency)
            with self._cond:
                self._held[id(hold)] = hold
            self._ensure_thread()
            return hold, 0.0, ""
        if kind == "concurrency":
            # The backstop, should no freed slot be handed to it: when the earliest slot would expire
            # (a killed worker's comes back then). Further back in the line than the limit, later:
            # releases wake it anyway, and the first in line takes the first slot that comes free.
            backstop = max(0.05, min(when_ms / 1000.0 - now, self._lease_duration))
            wait = backstop * min(BACKSTOP_SPREAD, 1 + ahead // max(1, limits.concurrency))
            return None, wait, f"concurrency limit of {label}: {limits.concurrency} running"
        return None, max(0.0, when_ms / 1000.0 - now), f"rate limit of {label}: {limits.rate} per {limits.window:g}s"

    def wait_for_slot(self, limits: TaskLimits, type_name: str, queue: str, task_id: str,
                      payload: dict[str, Any]) -> None:
        """After a parked concurrency wait: list the task as waiting; wake it at once when a slot came
        free between the refusal and now."""
        lim = self._keys.limit(type_name)
        key = limits.key_for(payload)
        now_ms = to_ms(self._clock.now())
        if self._scripts.limit_wait(lim, f"{queue} {task_id}", key=key, now_ms=now_ms,
                                    concurrency=limits.concurrency):
            self._scripts.limit_wake(self._queue_keys[queue], [task_id], now_ms=now_ms)

    def release(self, hold: LimitHold) -> None:
        """The attempt ended: its slot is freed in the background (batched)."""
        with self._cond:
            if self._held.pop(id(hold), None) is None:
                return
            self._released.append(hold)
            self._cond.notify()

    # -- the gate's own thread ---------------------------------------------------------------------

    def _ensure_thread(self) -> None:
        with self._cond:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(target=self._loop, name="queuecore-limits", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        next_renew = self._clock.now() + self._renew_interval
        while True:
            with self._cond:
                while not self._released and not self._stop and self._clock.now() < next_renew:
                    self._cond.wait(min(0.5, max(0.01, next_renew - self._clock.now())))
                released, self._released = self._released, []
                stop = self._stop
            try:
                if released:
                    self._release(released)
                if self._clock.now() >= next_renew:
                    next_renew = self._clock.now() + self._renew_interval
                    self._renew()
            except Exception as exc:  # Redis away: slots expire with their leases; waiters come back by themselves
                logger.warning("could not update concurrency limits: %s", exc)
            if stop:
                return

    def _release(self, released: list[LimitHold]) -> None:
        groups: dict[tuple[LimitKeys, str, int], list[str]] = defaultdict(list)
        for hold in released:
            groups[(hold.keys, hold.key, hold.concurrency)].append(hold.member)
        now_ms = to_ms(self._clock.now())
        for (lim, key, concurrency), members in groups.items():
            most = 0  # the first call hands every free slot on
            for _ in range(WAKE_ROUNDS):
                handed = self._scripts.limit_release(lim, members, key=key, now_ms=now_ms, concurrency=concurrency,
                                                     most=most)
                members = []  # freed by the first call
                woken = self._wake(handed, now_ms)
                if woken >= len(handed):
                    break
                # Slots handed to tasks no longer waiting (an operator deleted them, their backstop ran
                # them): to the next in line now, not when those come back by themselves.
                most = len(handed) - woken

    def _wake(self, members: list[str], now_ms: int) -> int:
        """Wake the waiting ``members`` (``"<queue> <id>"``) in their queues; how many were still waiting."""
        by_queue: dict[str, list[str]] = defaultdict(list)
        for member in members:
            queue, _, task_id = member.partition(" ")
            by_queue[queue].append(task_id)
        woken = 0
        for queue, ids in by_queue.items():
            # A queue this worker does not serve: its keys are built all the same.
            keys = self._queue_keys.get(queue) or self._keys.queue(queue)
            woken += self._scripts.limit_wake(keys, ids, now_ms=now_ms)
        return woken

    def _renew(self) -> None:
        with self._cond:
            holds = list(self._held.values())
        groups: dict[tuple[LimitKeys, str], list[str]] = defaultdict(list)
        for hold in holds:
            groups[(hold.keys, hold.key)].append(hold.member)
        expires = to_ms(self._clock.now() + self._lease_duration)
        failed: Exception | None = None  # one limit (a key of another type, a cluster master away) holds up no other
        for (lim, key), members in groups.items():
            try:
                self._scripts.limit_extend(lim, members, key=key, expires_ms=expires)
            except Exception as exc:
                failed = failed or exc
        if failed is not None:
            raise failed

    def stop(self) -> None:
        """Write the releases still queued, then stop (held slots expire with their leases)."""
        with self._cond:
            self._stop = True
            self._cond.notify()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=5)


# -- timed pause ----------------------------------------------------------------------------------

PAUSE_FOR = Range(0, MAX_DURATION, low_open=True, note="(10 years)")


def pause_seconds(for_: Any) -> float:
    """A timed pause's length (seconds or a ``timedelta``) in seconds; ``InvalidOption`` outside
    (0, 10 years]."""
    if isinstance(for_, timedelta):
        for_ = for_.total_seconds()
    return PAUSE_FOR.check(for_, "for", InvalidOption)


# -- what operators see ---------------------------------------------------------------------------


@dataclass(frozen=True)
class LimitUsage:
    """One limit key's use now: tasks holding a slot, tasks waiting for one, starts in the window."""

    key: str  # "" for a type's one limit
    running: int
    waiting: int
    rate_used: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class LimitInfo:
    """A task type's limits as live workers publish them, and their use per key (``Inspector.limits``)."""

    type: str
    concurrency_limit: int  # 0: none
    rate_limit: int  # starts per ``rate_window`` seconds; 0: none
    rate_window: float
    limit_key: str | None  # the payload field (or "(callable)") the limits are kept per; None: one limit
    usage: list[LimitUsage] = field(default_factory=list)

    @property
    def rate_text(self) -> str:
        return f"{self.rate_limit}/{self.rate_window:g}s" if self.rate_limit else ""

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["rate_text"] = self.rate_text
        return out


def published_limits(raw: Any) -> dict[str, dict[str, Any]]:
    """The limits in one worker's published task types (``TaskRegistry.describe_json``), by type."""
    if not raw:
        return {}
    try:
        types = json.loads(raw)["types"]
        return {str(name): dict(d["limits"]) for name, d in types.items() if isinstance(d, dict) and d.get("limits")}
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


def read_limits(client: Any, keys: Keys, published: dict[str, dict[str, Any]], now_ms: int,
                max_keys: int = 50) -> list[LimitInfo]:
    """Each published limit with its use: two pipelined round-trips in all."""
    infos: list[LimitInfo] = []
    for type_name in sorted(published):
        d = published[type_name]
        try:
            rate, window = d.get("rate_limit") or (0, 0.0)
            infos.append(LimitInfo(type_name, int(d.get("concurrency_limit") or 0), int(rate), float(window),
                                   d.get("limit_key")))
        except (ValueError, TypeError):
            continue
    if not infos:
        return infos
    pipe = client.pipeline(transaction=False)
    for info in infos:
        pipe.zrevrange(keys.limit(info.type).keys, 0, max_keys - 1)
    key_lists = pipe.execute()
    pipe = client.pipeline(transaction=False)
    plan: list[tuple[LimitInfo, list[str]]] = []
    for info, raw_keys in zip(infos, key_lists, strict=True):
        lim = keys.limit(info.type)
        names = [k.decode() if isinstance(k, bytes) else str(k) for k in raw_keys]
        if info.limit_key is None or not names:
            names = [""] if info.limit_key is None else names
        for key in names:
            pipe.zcount(lim.running(key), now_ms, "+inf")
            pipe.zcard(lim.waiting(key))
            pipe.zcount(lim.rate(key), now_ms - int(info.rate_window * 1000), "+inf")
        plan.append((info, names))
    replies = pipe.execute()
    out, index = [], 0
    for info, names in plan:
        usage = []
        for key in names:
            running, waiting, used = replies[index:index + 3]
            index += 3
            usage.append(LimitUsage(key, int(running), int(waiting), int(used) if info.rate_limit else 0))
        out.append(LimitInfo(info.type, info.concurrency_limit, info.rate_limit, info.rate_window, info.limit_key,
                             usage))
    return out
