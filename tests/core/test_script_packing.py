"""Script calls are packed by hiredis directly when the client encodes text as strict UTF-8: the bytes
on the wire must be redis-py's own, and any other client keeps redis-py's packer."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from redis.connection import Connection

from queuecore import Client
from queuecore.core.config import ConnectionConfig
from queuecore.core.keys import Keys
from queuecore.core.scripts import Scripts

hiredis = pytest.importorskip("hiredis")  # the "fast" extra; the dev extra installs it

COMMANDS: list[tuple[Any, ...]] = [
    ("EVALSHA", "a" * 40, 2, "qc:{q}:pending", "qc:{q}:t:ü", 1_764_216_000_123, "PUBLISH qc:{q}:wake", 1, "ü-€-😀",
     '{"type":"t","payload":{"x":"é"},"enqueued_at":1764216000.123}', 0, -5, 10**20, 1.5, 0.1, 1e-07, b"\x00\xff"),
    ("EVALSHA", "b" * 40, 0, ""),
]


class Recording(Connection):
    """A connection that keeps what it would send instead of sending it."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.sent: list[bytes] = []

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        assert isinstance(command, list) and all(isinstance(chunk, bytes) for chunk in command), command
        self.sent.append(b"".join(command))


@pytest.mark.parametrize("command", COMMANDS)
def test_hiredis_packs_a_script_call_byte_for_byte_as_redis_py(command: tuple[Any, ...]) -> None:
    scripts = Scripts(redis.Redis(), Keys("qcx"))  # no connection is made
    assert scripts._pack is not None
    fast, plain = Recording(), Recording()
    scripts._send(fast, command)
    plain.send_command(*command)
    assert fast.sent == plain.sent and fast.sent[0].startswith(b"*")


@pytest.mark.parametrize(("options", "packs"), [({}, True), ({"encoding": "utf8"}, True), ({"encoding": "UTF-8"}, True),
                                                ({"encoding": "latin-1"}, False),
                                                ({"encoding_errors": "replace"}, False)])
def test_only_a_strict_utf8_client_is_packed_by_hiredis(options: dict[str, str], packs: bool) -> None:
    scripts = Scripts(redis.Redis(**options), Keys("qcx"))  # type: ignore[arg-type]
    assert (scripts._pack is not None) is packs
    fast, plain = Recording(**options), Recording(**options)
    scripts._send(fast, ("EVALSHA", "a" * 40, 0, "é"))
    plain.send_command("EVALSHA", "a" * 40, 0, "é")
    assert fast.sent == plain.sent  # whichever packs it, the bytes are redis-py's for that client


def test_an_argument_redis_cannot_take_is_redis_pys_data_error_and_nothing_is_sent() -> None:
    scripts = Scripts(redis.Redis(), Keys("qcx"))
    recording = Recording()
    with pytest.raises(redis.DataError):
        scripts._send(recording, ("EVALSHA", "a" * 40, 0, None))
    assert recording.sent == []


def test_an_enqueue_through_hiredis_stores_the_text_as_given(connection: ConnectionConfig,
                                                            redis_client: redis.Redis) -> None:
    with Client(connection=connection) as client:
        assert client.scripts._pack is not None
        handle = client.enqueue("test.text", {"text": "ü-€-😀", "n": 10**18, "f": 0.1}, queue="packed")
        assert client.result(handle.result_id).payload == {"text": "ü-€-😀", "n": 10**18, "f": 0.1}
    assert '"text":"ü-€-😀"' in str(redis_client.hget(connection.keys.queue("packed").task(handle.id), "msg"))
