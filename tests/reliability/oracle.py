"""The oracle shared by every fault test: what must hold after (and during) any fault.

It reads two sources that do not depend on each other: the queue's keys in Redis, and the handler
log written by ``tests/helpers/proc_tasks.py`` (one JSON line per handler ``start``/``end``/``abort``
with the task ``id``, ``attempt``, ``pid`` and time ``t``), which lives outside Redis.

- ``check_structure`` (cheap, for use after every step): no id is in two states at once; every
  id in a list/zset has a hash whose ``state`` says the same; every hash is indexed where its
  state says; the active ZSET holds exactly the hashes in state ``active``, each with a lease
  number; every uniqueness lock has a TTL.
- ``check_invariants`` (after draining): the structure, plus every enqueued id reached exactly one
  terminal state (completed, archived, or deleted — by an operator, or on acknowledgement without
  retention, which the log must then show as ended); nothing is left pending/active/scheduled/
  retry; an id ran more than once only where a fault was injected; runs of one id never overlap
  unless a lease expiry was injected.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable
from pathlib import Path
from typing import Any

import redis

from queuecore.core.keys import Keys, QueueKeys

LIST_STATES = ("pending",)
ZSET_STATES = ("active", "scheduled", "retry", "archived", "completed")
STATES = LIST_STATES + ZSET_STATES
TERMINAL = ("completed", "archived")


class InvariantError(AssertionError):
    """One or more invariants are broken; the message lists every problem found."""


def read_log(path: Path | str | None) -> list[dict[str, Any]]:
    """Every complete task event line of a handler log (boot lines and a half-written line skipped)."""
    if path is None:
        return []
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    events = [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]
    return [e for e in events if e.get("event") != "boot"]


def runs_by_id(events: Iterable[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """One record per handler run: ``{"pid", "attempt", "start", "end" (or None), "outcome"}``.

    A run is a ``start`` matched with the next ``end``/``abort`` of the same id, pid and attempt.
    """
    runs: dict[str, list[dict[str, Any]]] = defaultdict(list)
    open_runs: dict[tuple[str, int, int], dict[str, Any]] = {}
    for e in sorted(events, key=lambda e: e["t"]):
        key = (e["id"], e["pid"], e["attempt"])
        if e["event"] == "start":
            run = {"pid": e["pid"], "attempt": e["attempt"], "start": e["t"], "end": None, "outcome": None}
            runs[e["id"]].append(run)
            open_runs[key] = run
        elif e["event"] in ("end", "abort") and key in open_runs:
            run = open_runs.pop(key)
            run["end"], run["outcome"] = e["t"], e["event"]
    return dict(runs)


def _queue_keys(keys: Keys | QueueKeys, queue: str) -> QueueKeys:
    return keys if isinstance(keys, QueueKeys) else keys.queue(queue)


def snapshot(r: redis.Redis, q: QueueKeys) -> dict[str, Any]:
    """Indexes and task hashes of one queue, read in one MULTI so they are consistent."""
    task_keys = [k for k in r.scan_iter(match=q.all_pattern, count=1000) if k.startswith(q.task_prefix)]
    unique_keys = [k for k in r.scan_iter(match=q.all_pattern, count=1000) if k.startswith(q.base + "unique:")]
    pipe = r.pipeline(transaction=True)
    pipe.lrange(q.pending, 0, -1)
    for state in ZSET_STATES:
        pipe.zrange(q.state_key(state), 0, -1, withscores=True)
    for key in task_keys:
        pipe.hgetall(key)
    for key in unique_keys:
        pipe.pttl(key)
        pipe.get(key)
    out = pipe.execute()
    index: dict[str, Any] = {"pending": out[0]}
    for i, state in enumerate(ZSET_STATES):
        index[state] = dict(out[1 + i])
    hashes_raw = out[1 + len(ZSET_STATES): 1 + len(ZSET_STATES) + len(task_keys)]
    hashes = {k[len(q.task_prefix):]: h for k, h in zip(task_keys, hashes_raw, strict=True) if h}
    rest = out[1 + len(ZSET_STATES) + len(task_keys):]
    uniques = {k: (rest[2 * i], rest[2 * i + 1]) for i, k in enumerate(unique_keys)}
    return {"index": index, "tasks": hashes, "unique": uniques}


def structure_problems(snap: dict[str, Any]) -> list[str]:
    problems: list[str] = []
    where: dict[str, list[str]] = defaultdict(list)
    for task_id in snap["index"]["pending"]:
        where[task_id].append("pending")
    for state in ZSET_STATES:
        for task_id in snap["index"][state]:
            where[task_id].append(state)
    tasks = snap["tasks"]
    for task_id, states in where.items():
        if len(states) > 1:
            problems.append(f"{task_id}: in several states at once {states}")
        h = tasks.get(task_id)
        if h is None:
            problems.append(f"{task_id}: in {states} but has no task hash (orphan id)")
        elif h.get("state") not in states:
            problems.append(f"{task_id}: hash says {h.get('state')!r} but it is indexed in {states}")
    for task_id, h in tasks.items():
        state = h.get("state")
        if state not in STATES:
            problems.append(f"{task_id}: hash has an unknown state {state!r}")
        elif task_id not in where:
            problems.append(f"{task_id}: hash in state {state!r} but in no list or zset")
        if "msg" not in h:
            problems.append(f"{task_id}: hash without a message")
        if state == "active" and not h.get("lease"):
            problems.append(f"{task_id}: active without a lease number")
    active_hashes = {i for i, h in tasks.items() if h.get("state") == "active"}
    if set(snap["index"]["active"]) != active_hashes:
        problems.append(f"active zset {sorted(snap['index']['active'])} != active hashes {sorted(active_hashes)}")
    for key, (ttl, holder) in snap["unique"].items():
        if ttl is None or ttl < 0:
            problems.append(f"unique lock {key} (held by {holder}) has no TTL: leaked")
    return problems


def check_structure(r: redis.Redis, keys: Keys | QueueKeys, queue: str = "default") -> dict[str, Any]:
    """Assert the structural invariants of one queue now; returns the snapshot it checked."""
    snap = snapshot(r, _queue_keys(keys, queue))
    problems = structure_problems(snap)
    if problems:
        raise InvariantError("structure broken:\n  " + "\n  ".join(problems))
    return snap


def check_invariants(r: redis.Redis, keys: Keys | QueueKeys, enqueued_ids: Collection[str],
                     log_path: Path | str | None, *, queue: str = "default",
                     allow_reruns_for: Collection[str] | Callable[[str, list[dict[str, Any]]], bool] = (),
                     allow_concurrent: bool = False, deleted: Collection[str] = (),
                     expect_runs: bool = True) -> dict[str, Any]:
    """Assert every invariant of a drained queue; returns a summary (states, runs, reruns) to print.

    ``allow_reruns_for``: ids (or a predicate ``(id, runs) -> bool``) that may run more than once
    because a fault was injected on them. ``allow_concurrent``: a lease expiry was injected, so two
    runs of one id may overlap. ``deleted``: ids an operator deleted. ``expect_runs``: every id that
    was not archived or deleted must have a handler run that ended normally in the log.
    """
    q = _queue_keys(keys, queue)
    snap = snapshot(r, q)
    problems = structure_problems(snap)
    tasks = snap["tasks"]
    runs = runs_by_id(read_log(log_path))
    allowed = allow_reruns_for if callable(allow_reruns_for) else (lambda i, _r, s=set(allow_reruns_for): i in s)
    final: dict[str, str] = {}
    deleted = set(deleted)
    for task_id in enqueued_ids:
        h = tasks.get(task_id)
        task_runs = runs.get(task_id, [])
        if h is not None:
            state = h.get("state", "?")
            if state not in TERMINAL:
                problems.append(f"{task_id}: not drained, still {state}")
            final[task_id] = state
        elif task_id in deleted:
            final[task_id] = "deleted"
        elif any(run["outcome"] == "end" for run in task_runs):
            final[task_id] = "completed"  # acknowledged without retention: the hash is gone
        else:
            final[task_id] = "missing"
            problems.append(f"{task_id}: LOST - no task hash, not deleted, never ran to its end "
                            f"(runs: {task_runs})")
        if expect_runs and final[task_id] == "completed" and not any(r_["outcome"] == "end" for r_ in task_runs):
            problems.append(f"{task_id}: completed but the log has no finished run: {task_runs}")
        if len(task_runs) > 1 and not allowed(task_id, task_runs):
            problems.append(f"{task_id}: ran {len(task_runs)} times without a fault: {task_runs}")
        if not allow_concurrent:
            problems += _overlaps(task_id, task_runs)
    for task_id in set(runs) - set(enqueued_ids):
        problems.append(f"{task_id}: ran but was never enqueued")
    leftover = {s: len(snap["index"][s]) for s in ("pending", "active", "scheduled", "retry") if snap["index"][s]}
    if leftover:
        problems.append(f"not drained: {leftover}")
    if problems:
        raise InvariantError(f"{len(problems)} invariant(s) broken:\n  " + "\n  ".join(problems[:60]))
    counts: dict[str, int] = defaultdict(int)
    for state in final.values():
        counts[state] += 1
    return {"final": final, "counts": dict(counts), "runs": runs,
            "reruns": sorted(i for i in enqueued_ids if len(runs.get(i, [])) > 1)}


def _overlaps(task_id: str, task_runs: list[dict[str, Any]]) -> list[str]:
    """Runs of one id that overlap in time. A run with no end (its process was killed) is only known
    to have started, so its start must not fall inside another run."""
    out = []
    for i, a in enumerate(task_runs):
        for b in task_runs[i + 1:]:
            a_end = a["end"] if a["end"] is not None else a["start"]
            b_end = b["end"] if b["end"] is not None else b["start"]
            if a["start"] < b_end and b["start"] < a_end:
                out.append(f"{task_id}: two runs at once: {a} and {b}")
    return out
