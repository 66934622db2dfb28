"""Redis Cluster discipline: every script call's KEYS hash to one slot, and the Lua files, their
headers and the Python wrappers stay in step."""

from __future__ import annotations

import inspect
import re
from importlib import resources
from typing import Any

import pytest
import redis

from queuecore.core import scripts as scripts_module
from queuecore.core.keys import Keys, QueueKeys, stats_day, stats_minute
from queuecore.core.scripts import LIMIT_SCRIPTS, PRELUDE, SCRIPT_NAMES, SERVER_SCRIPTS, BulkBound, EnqueueItem, Scripts
from tests.conftest import free_port
from tests.helpers.state import EVERY, seed_task

SLOTS = 16384


def crc16_xmodem(data: bytes) -> int:
    """CRC16-CCITT (XMODEM): polynomial 0x1021, initial value 0, no reflection (Redis Cluster's hash)."""
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def hash_tag(key: str | bytes) -> bytes:
    """The part of the key Redis Cluster hashes: the text inside the first ``{...}`` if non-empty."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            return data[start + 1:end]
    return data


def key_slot(key: str | bytes) -> int:
    return crc16_xmodem(hash_tag(key)) % SLOTS


# -- the slot function itself -------------------------------------------------------------------


def test_crc16_reference_value() -> None:
    assert crc16_xmodem(b"123456789") == 0x31C3  # the XMODEM check value


@pytest.mark.parametrize(("key", "slot"), [
    ("somekey", 11058),  # values from the Redis CLUSTER KEYSLOT documentation
    ("foo{hash_tag}", 2515),
    ("bar{hash_tag}", 2515),
    ("foo", 12182),
])
def test_key_slot_documented_values(key: str, slot: int) -> None:
    assert key_slot(key) == slot


def test_hash_tag_rules() -> None:
    assert hash_tag("{user1000}.following") == hash_tag("{user1000}.followers") == b"user1000"
    assert hash_tag("foo{}{bar}") == b"foo{}{bar}"  # empty first tag: the whole key
    assert hash_tag("foo{{bar}}zap") == b"{bar"  # first { to the first } after it
    assert hash_tag("foo{bar}{zap}") == b"bar"
    assert hash_tag("no tag") == b"no tag"
    assert hash_tag("open{only") == b"open{only"


@pytest.fixture(scope="module")
def cluster_node(private_redis_factory) -> redis.Redis:
    """A private single redis-server in cluster mode: only there does CLUSTER KEYSLOT answer."""
    # the cluster bus port defaults to port + 10000, which overflows for high ephemeral ports: pick one
    server = private_redis_factory("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                   "--cluster-port", str(free_port()))
    client = redis.Redis(port=server.port, decode_responses=True)
    yield client
    client.close()
    server.stop()


def test_key_slot_matches_a_real_cluster_node(cluster_node: redis.Redis) -> None:
    q = Keys("qc").queue("emails")
    samples = ["", "a", "foo{}{bar}", "foo{{bar}}zap", "ünï{cøde}", "{", "}{", "x" * 300, q.pending,
               q.task("0f3a"), q.unique("mail.send", "ab" * 16), Keys("qc").queues, Keys("qc").server("h:1:x")]
    samples += [f"key:{i}" for i in range(200)]
    for key in samples:
        assert key_slot(key) == cluster_node.execute_command("CLUSTER", "KEYSLOT", key), key


# -- every wrapper call uses one slot -----------------------------------------------------------


class RecordingScripts(Scripts):
    """Records (name, keys) of every script call, then runs it for real."""

    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        super().__init__(client, keys)
        self.calls: list[tuple[str, list[str]]] = []

    def _call(self, name: str, keys: list[str], args: list[Any], client: Any = None) -> Any:
        self.calls.append((name, list(keys)))
        return super()._call(name, keys, args, client)


NOW = 1_800_000_000_000
DAY, MINUTE = stats_day(NOW / 1000), stats_minute(NOW / 1000)


def call_every_wrapper(s: RecordingScripts, r: redis.Redis, q: QueueKeys) -> None:
    """Call every wrapper once or more with realistic arguments, moving real tasks through the states."""
    unique = q.unique("test.task", "c" * 32)
    for i in range(6):
        s.enqueue(q, f"t{i}", '{"type":"test.task","payload":{}}', now_ms=NOW,
                  unique_key=unique if i == 0 else None, unique_ttl_ms=60_000 if i == 0 else 0)
    s.enqueue(q, "later", '{"type":"test.task"}', now_ms=NOW, process_at_ms=NOW + 10)
    pipe = r.pipeline(transaction=False)
    s.enqueue_many(q, [EnqueueItem("piped", '{"type":"test.task"}'), EnqueueItem("piped2", '{"type":"test.task"}')],
                   now_ms=NOW, client=pipe)
    pipe.execute()
    got = {d.id: d.lease for d in s.dequeue(q, now_ms=NOW, lease_until_ms=NOW + 30_000, count=5)}
    assert len(got) == 5
    assert s.extend_lease(q, list(got.items()), lease_until_ms=NOW + 60_000) == [1] * 5
    assert s.result(q, "t0", watch=True)["state"] == "active"  # a caller waits for it: done wakes it
    assert s.done(q, "t0", got["t0"], now_ms=NOW, retention_ms=1000, result="1", day=DAY, minute=MINUTE,
                  unique_key=unique)
    assert s.retry(q, "t1", got["t1"], now_ms=NOW, retry_at_ms=NOW + 5, error="e", day=DAY, minute=MINUTE)
    assert s.archive(q, "t2", got["t2"], now_ms=NOW, error="e", day=DAY, minute=MINUTE, max_archive_size=10,
                     archive_cutoff_ms=0)
    assert s.requeue(q, "t3", got["t3"], now_ms=NOW)
    s.admin_cancel_task(q, "t4")
    assert s.recover(q, now_ms=NOW + 120_000, limit=10, day=DAY, minute=MINUTE).counts == (0, 1, 0)
    assert s.forward(q, "scheduled", now_ms=NOW + 10, limit=10).moved == 1
    assert s.forward(q, "retry", now_ms=NOW + 10, limit=10).moved == 1
    s.admin_archive_task(q, "later", now_ms=NOW)
    s.admin_run_task(q, "later", now_ms=NOW)
    s.admin_delete_task(q, "later")
    assert s.admin_archive_all(q, "pending", now_ms=NOW, limit=100, bound=EVERY).acted > 0
    seed_task(r, q, "sch", "scheduled", score=NOW)
    assert s.admin_archive_all(q, "scheduled", now_ms=NOW, limit=100, bound=EVERY).acted == 1
    assert s.admin_run_all(q, "archived", now_ms=NOW, limit=100, bound=EVERY).acted > 0
    assert s.admin_delete_all(q, "pending", limit=100, bound=EVERY).acted > 0
    seed_task(r, q, "ret", "retry", score=NOW)
    assert s.admin_run_all(q, "retry", now_ms=NOW, limit=100, bound=EVERY).acted == 1
    # a whole-state bulk job's chunks (bound: tasks there at since_ms, from a cursor)
    since = BulkBound(NOW + 60_000, 100)
    seed_task(r, q, "ret2", "retry", score=NOW)
    assert s.admin_run_all(q, "retry", now_ms=NOW, limit=100, bound=since).acted == 1
    seed_task(r, q, "pend2", "pending")
    assert s.admin_archive_all(q, "pending", now_ms=NOW, limit=100, bound=since).acted >= 1
    assert s.admin_delete_all(q, "archived", limit=100, bound=since).acted >= 1
    # t0 completed, expired
    assert s.janitor(q, now_ms=NOW + 10_000, archive_cutoff_ms=NOW, max_archive_size=10_000, limit=100) == (1, 0, 0)
    assert len(s.queue_metrics(q)) >= 13  # read-only: the metrics scrape
    cursor = "0"
    while True:
        step = s.repair(q, now_ms=NOW, cursor=cursor, count=100)
        cursor = step.cursor
        if step.complete:
            break
    s.enqueue(q, "snz", '{"type":"test.task"}', now_ms=NOW)  # flow control: park, wake, timed pause
    leased = {d.id: d.lease for d in s.dequeue(q, now_ms=NOW, lease_until_ms=NOW + 30_000, count=100)}
    assert s.park(q, "snz", leased["snz"], now_ms=NOW, due_ms=NOW + 60_000, snooze=False, waiting="limit")
    assert s.limit_wake(q, ["snz"], now_ms=NOW) == 1
    s.admin_pause(q, until_ms=NOW + 60_000)
    for state in ("scheduled", "retry", "archived", "completed"):
        s.admin_delete_all(q, state, limit=100, bound=EVERY)
    s.admin_pending_many(q, "archive", [("gone-1", 0)], now_ms=NOW, slack=10)
    s.bulk_snapshot(q, "pending", "job-1", ttl_ms=60_000)
    s.periodic_sync(q, "nightly", now_ms=NOW, definition="{}", next_ms=NOW + 1000)
    fired = s.periodic_fire(q, "nightly", now_ms=NOW + 1000, fire_ms=NOW + 1000, mark_ms=NOW + 1000, kind="schedule",
                            task_id="periodic:nightly:1", msg='{"type":"test.task"}', next_ms=NOW + 2000)
    assert fired == (1, NOW + 1000)
    assert s.admin_periodic_pause(q, "nightly", pause=True, actor="ops", now_ms=NOW) == 1
    assert s.periodic_forget(q, "nightly", declared_before_ms=NOW + 1)


def test_every_wrapper_call_keeps_its_keys_in_one_slot(redis_client: redis.Redis, connection) -> None:
    s = RecordingScripts(redis_client, connection.keys)
    q = connection.keys.queue("emails")
    call_every_wrapper(s, redis_client, q)
    called = {name for name, _ in s.calls}
    from queuecore.core.scripts import ALERT_SCRIPTS, BULK_SCRIPTS, PERIODIC_INDEX_SCRIPTS

    called |= set(PERIODIC_INDEX_SCRIPTS)  # keys of no queue: test_periodic_index_script_keeps_one_slot
    called |= set(ALERT_SCRIPTS)  # the alerts' one key: test_alert_script_keeps_one_slot
    called |= set(BULK_SCRIPTS)  # the bulk jobs' keys: test_bulk_job_scripts_keep_one_slot
    expected = set(SCRIPT_NAMES) - set(SERVER_SCRIPTS) - set(LIMIT_SCRIPTS)
    assert called == expected, f"not exercised: {expected - called}"
    queue_slot = crc16_xmodem(b"emails") % SLOTS
    for name, keys in s.calls:
        assert keys, f"{name} was called without KEYS"
        assert {key_slot(k) for k in keys} == {queue_slot}, (name, keys)
        assert all(k.startswith(q.base) for k in keys), (name, keys)


def test_every_server_script_call_keeps_its_keys_in_one_slot(redis_client: redis.Redis, connection) -> None:
    """The heartbeat and audit scripts touch a worker process's own keys or the audit log, never a
    queue's: one slot per call."""
    s = RecordingScripts(redis_client, connection.keys)
    server_id = "host:123:abcd1234"
    s.heartbeat(server_id, '{"id": "host:123:abcd1234"}', ttl_ms=60_000)
    s.heartbeat_index(server_id, expires_ms=NOW + 60_000, now_ms=NOW, queues=["default", "low"])
    s.audit('{"action": "task.delete"}', keep=10)
    assert {name for name, _ in s.calls} == set(SERVER_SCRIPTS)
    for name, keys in s.calls:
        assert keys and len({key_slot(k) for k in keys}) == 1, (name, keys)
        assert all(k.startswith(connection.keys.prefix + ":servers:") or k in (connection.keys.audit,
                   connection.keys.servers, connection.keys.queues) for k in keys), (name, keys)


def test_bulk_job_scripts_keep_one_slot(redis_client: redis.Redis, connection) -> None:
    """A bulk job's record, the open set and its targets share the global hash tag: one slot per call."""
    from queuecore.core.scripts import BULK_SCRIPTS

    s = RecordingScripts(redis_client, connection.keys)
    assert s.bulk_job_create("abc123", now_ms=NOW, max_open=2, keep=10, fields={"action": "delete", "status": "queued"})
    assert s.bulk_job_step("abc123", "me", now_ms=NOW, lease_until_ms=NOW + 1000, finish_ttl_ms=0, reset_targets=True,
                           fields={"done": 1}, targets=["emails t1"]) == (True, False)
    assert {name for name, _ in s.calls} == set(BULK_SCRIPTS)
    for name, keys in s.calls:
        assert len({key_slot(k) for k in keys}) == 1 and all(k.startswith(connection.keys.global_base) for k in keys), (
            name, keys)


def test_periodic_index_script_keeps_one_slot(redis_client: redis.Redis, connection) -> None:
    """The periodic entries' index is one key of its own; each entry's keys are in its queue's slot."""
    s = RecordingScripts(redis_client, connection.keys)
    assert s.periodic_register(["nightly/emails"], lapsed_before_ms=NOW, until_ms=NOW + 1000) == []
    assert s.periodic_register([], lapsed_before_ms=NOW + 2000, until_ms=NOW + 3000) == ["nightly/emails"]
    assert s.calls == [("periodic_register", [connection.keys.periodic])] * 2


def test_alert_script_keeps_one_slot(redis_client: redis.Redis, connection) -> None:
    """The alert evaluator's lease and the active alerts are one key of their own."""
    s = RecordingScripts(redis_client, connection.keys)
    assert s.alerts_apply("w", now_ms=NOW, lease_until_ms=NOW + 1000, fire=[("r/q", "{}")], resolve=["x"]) == (
        True, ["r/q"], [])
    assert s.calls == [("alerts_apply", [connection.keys.alerts])]


def test_every_limit_script_call_keeps_its_keys_in_the_limit_slot(redis_client: redis.Redis, connection) -> None:
    """A limit is shared by the queues its type runs in, so its keys carry {lim:<type>}, never a
    queue's tag; per-key limits stay in their type's slot."""
    s = RecordingScripts(redis_client, connection.keys)
    lim = connection.keys.limit("emails.send")
    for key in ("", "tenant-7"):
        assert s.limit_acquire(lim, "q a", key=key, now_ms=NOW, expires_ms=NOW + 30_000, concurrency=1, rate=5,
                               window_ms=1000) == (True, "", 0, 0)
        assert s.limit_acquire(lim, "q b", key=key, now_ms=NOW, expires_ms=NOW + 30_000, concurrency=1, rate=5,
                               window_ms=1000) == (False, "concurrency", NOW + 30_000, 0)
        assert s.limit_wait(lim, "q b", key=key, now_ms=NOW, concurrency=1) is False
        assert s.limit_extend(lim, ["q a"], key=key, expires_ms=NOW + 60_000) == 1
        assert s.limit_release(lim, ["q a"], key=key, now_ms=NOW, concurrency=1) == ["q b"]
    assert {name for name, _ in s.calls} == set(LIMIT_SCRIPTS)
    slot = crc16_xmodem(b"lim:emails.send") % SLOTS
    for name, keys in s.calls:
        assert {key_slot(k) for k in keys} == {slot}, (name, keys)
        assert all(k.startswith(lim.base) for k in keys), (name, keys)


def test_two_queues_use_their_own_tags(redis_client: redis.Redis, connection) -> None:
    first, second = connection.keys.queue("alpha"), connection.keys.queue("beta")
    assert key_slot("{alpha}") != key_slot("{beta}")  # so the check below can tell them apart
    s = RecordingScripts(redis_client, connection.keys)
    call_every_wrapper(s, redis_client, first)
    split = len(s.calls)
    call_every_wrapper(s, redis_client, second)
    for queue, calls in ((first, s.calls[:split]), (second, s.calls[split:])):
        slot = key_slot(queue.pending)
        assert slot == crc16_xmodem(queue.queue.encode()) % SLOTS
        for name, keys in calls:
            assert {key_slot(k) for k in keys} == {slot}, (queue.queue, name, keys)
            assert all(f"{{{queue.queue}}}" in k for k in keys)


def test_keys_and_globals_land_where_expected() -> None:
    k = Keys("qc")
    q = k.queue("default")
    assert key_slot(q.task("x")) == key_slot(q.unique("t", "d")) == key_slot(q.wake_channel) == key_slot(
        q.cancel_channel)
    server_id = "host:123:abcd1234"
    assert key_slot(k.server(server_id)) == crc16_xmodem(server_id.encode()) % SLOTS
    # the keys of no queue share one slot: the hash tag "/"
    assert {key_slot(g) for g in (k.queues, k.servers, k.periodic, k.alerts, k.audit)} == {
        crc16_xmodem(b"/") % SLOTS}


# -- lua files, headers and wrappers stay in step -----------------------------------------------


def lua_files() -> dict[str, str]:
    """The scripts' own files, by name: every ``lua/*.lua`` but the prelude (``_lib.lua``, no script)."""
    folder = resources.files("queuecore.core").joinpath("lua")
    return {p.name[:-4]: p.read_text() for p in folder.iterdir()
            if p.name.endswith(".lua") and p.name != f"{PRELUDE}.lua"}


def header(text: str) -> str:
    lines = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        lines.append(line)
    return "\n".join(lines)


def body(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if not line.startswith("--"))


def test_every_lua_file_is_a_known_script_and_every_script_has_a_file() -> None:
    files = lua_files()
    assert set(files) == set(SCRIPT_NAMES)
    assert len(SCRIPT_NAMES) == len(set(SCRIPT_NAMES))
    assert PRELUDE not in SCRIPT_NAMES and not hasattr(Scripts, PRELUDE)  # the prelude is no script
    assert resources.files("queuecore.core").joinpath("lua", f"{PRELUDE}.lua").is_file()


# enqueue.lua and done.lua take batches: Scripts.enqueue_many/done_many run them, and Scripts.enqueue/
# done are the one-task forms.
BATCH_WRAPPERS = {"done": "done_many", "enqueue": "enqueue_many"}


def test_every_lua_file_and_only_those_have_a_wrapper_of_the_same_name() -> None:
    for name in lua_files():
        method = getattr(Scripts, name, None)
        assert callable(method), f"no Scripts.{name} wrapper for lua/{name}.lua"
        runner = getattr(Scripts, BATCH_WRAPPERS.get(name, name))
        assert f'"{name}"' in inspect.getsource(runner), f"Scripts.{name} does not run the {name!r} script"
        if name in BATCH_WRAPPERS:
            assert f"self.{BATCH_WRAPPERS[name]}(" in inspect.getsource(method)
    public = {n for n, v in vars(Scripts).items() if callable(v) and not n.startswith("_")} - {
        "check_enqueue", "dedicated", "per_thread", "close", "publish", "unlist", "admin_tasks"}
    assert public == set(lua_files()) | set(BATCH_WRAPPERS.values())


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_lua_header_documents_keys_argv_and_replies(name: str) -> None:
    text = lua_files()[name]
    head = header(text)
    assert text.startswith(f"-- {name}:"), f"{name}.lua must start with '-- {name}: <what it does>'"
    assert "KEYS[1]" in head
    assert "ARGV[1]" in head
    assert "Returns" in head
    for kind in ("KEYS", "ARGV"):
        for index in sorted(set(re.findall(kind + r"\[(\d+)\]", body(text)))):
            assert f"{kind}[{index}]" in head, f"{name}.lua uses {kind}[{index}] without documenting it"


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_keys_built_inside_a_script_are_declared_in_a_cluster_note(name: str) -> None:
    text = lua_files()[name]
    builds_keys = re.search(r"qc_task_key|qc_check_task_hashes|task_prefix", body(text))
    if builds_keys:
        assert "Cluster note" in header(text), f"{name}.lua builds key names without a Cluster note"
        assert re.search(r"ARGV\[\d+\] task-key prefix, <prefix>:\{<q>\}:t:", header(text)), (
            f"{name}.lua builds task keys without a task-key prefix in ARGV")


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_wake_lists_built_inside_a_script_are_declared_in_a_cluster_note(name: str) -> None:
    text = lua_files()[name]
    if "qc_done_key" in body(text):
        assert "Cluster note" in header(text) and "wake LIST" in header(text), name
        assert re.search(r"ARGV\[\d+\] wake-key prefix, <prefix>:\{<q>\}:done:", header(text)), name


@pytest.mark.parametrize("name", SCRIPT_NAMES)
def test_no_script_cuts_a_key_name_out_of_another(name: str) -> None:
    """Prefixes come in ARGV from keys.py: renaming a key's suffix there must not break a script."""
    code = body(lua_files()[name])
    assert not re.search(r"string\.(sub|match|gsub|find)\(KEYS", code), name
    assert '"t:"' not in code, name


def test_scripts_module_is_the_only_evalsha_user() -> None:
    core = resources.files("queuecore.core")
    offenders = [p.name for p in core.iterdir() if p.name.endswith(".py") and p.name != "scripts.py"
                 and re.search(r"evalsha|\.eval\(|register_script", p.read_text(), re.IGNORECASE)]
    assert offenders == []
    assert "register_script" in inspect.getsource(scripts_module)
