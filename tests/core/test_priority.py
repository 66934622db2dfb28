"""The ``priority`` enqueue option (-100..100): above 0 a task goes to the head of its queue, the end
workers take from, so it runs before the tasks already waiting; 0 or less it joins the tail."""

from __future__ import annotations

import pytest
import redis

from queuecore import Client, InvalidOption, TaskState
from queuecore.core.message import TaskMessage
from queuecore.core.scripts import EnqueueItem, Scripts
from tests.helpers.state import make_msg

NOW = 1_800_000_000_000


def next_up(r: redis.Redis, client: Client, queue: str = "default") -> list[str]:
    """Pending ids in the order workers take them (they pop the right end)."""
    return list(reversed(r.lrange(client.keys.queue(queue).pending, 0, -1)))


def test_a_priority_task_is_taken_before_the_waiting_ones(client: Client, redis_client) -> None:
    waiting = [client.enqueue("t", {"n": n}).id for n in range(3)]
    urgent = client.enqueue("t", {"n": "urgent"}, priority=1)
    low = client.enqueue("t", {"n": "low"}, priority=-100)
    assert urgent.priority == 1 and urgent.state is TaskState.PENDING
    assert next_up(redis_client, client) == [urgent.id, *waiting, low.id]
    again = client.enqueue("t", {"n": "urgent 2"}, priority=100)
    assert next_up(redis_client, client)[:2] == [again.id, urgent.id]  # the most recent first
    assert client.result(again.result_id).priority == 100


def test_a_batch_of_priority_tasks_keeps_its_order(client: Client, redis_client) -> None:
    waiting = client.enqueue("t", {"n": 0}).id
    batch = client.enqueue_many([("t", {"n": n}) for n in range(1, 4)], priority=50)
    assert next_up(redis_client, client) == [*(h.id for h in batch), waiting]


def test_a_deferred_priority_task_is_scheduled(client: Client, redis_client) -> None:
    handle = client.enqueue("t", priority=10, process_in=60)
    assert handle.state is TaskState.SCHEDULED and next_up(redis_client, client) == []


@pytest.mark.parametrize("value", [101, -101, 1.5, True, "1", float("nan")])
def test_priority_out_of_range_is_refused(client: Client, redis_client, key_prefix, value: object) -> None:
    with pytest.raises(InvalidOption, match="priority"):
        client.enqueue("t", priority=value)
    assert not list(redis_client.scan_iter(match=f"{key_prefix}:{{default}}:*"))


def test_the_message_keeps_its_priority() -> None:
    message = TaskMessage(id="x", type="t", payload={}, queue="q", priority=-7)
    assert '"priority":-7' in message.encode()
    assert TaskMessage.decode("x", "q", message.encode()).priority == -7
    assert "priority" not in TaskMessage(id="x", type="t", payload={}, queue="q").encode()  # 0: left out


def test_the_enqueue_script_takes_flags_0_to_3(scripts: Scripts, redis_client, connection) -> None:
    q = connection.keys.queue("default")
    items = [EnqueueItem("a", make_msg("a", q.queue), check_id=False),
             EnqueueItem("b", make_msg("b", q.queue), check_id=True, front=True)]
    assert [i.flags for i in items] == [0, 3]
    assert scripts.enqueue_many(q, items, now_ms=NOW) == [1, 1]
    assert redis_client.lrange(q.pending, 0, -1) == ["a", "b"]
    with pytest.raises(redis.ResponseError, match="QCINVALID item 1 flags 4"):
        scripts._call("enqueue", [q.pending, q.scheduled, q.active, q.paused, q.idle, q.task("c")],
                      [NOW, q.wake_channel, 1, "", "c", make_msg("c", q.queue), 0, 0, 0, 4])
