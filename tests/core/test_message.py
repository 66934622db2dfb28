"""Payload encoding and TaskMessage encode/decode (queuecore/core/message.py)."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queuecore.core.errors import InvalidPayload, TaskDecodeError
from queuecore.core.message import (
    DEFAULT_MAX_RETRY,
    TaskInfo,
    TaskMessage,
    TaskState,
    encode_payload,
    ms_to_datetime,
)

# -- payloads -----------------------------------------------------------------------------------


def test_payload_none_encodes_as_empty_object() -> None:
    assert encode_payload(None) == "{}"


def test_payload_is_compact_json_that_round_trips() -> None:
    payload = {"to": "ünï@example.com", "n": [1, 2.5, None, True], "nested": {"a": {"b": "c"}}}
    text = encode_payload(payload)
    assert json.loads(text) == payload
    assert ", " not in text and ": " not in text
    assert "ü" in text  # not \u-escaped: sizes are UTF-8 bytes of what is stored


@pytest.mark.parametrize("payload", [[1, 2], "text", 3, 1.5, True, (1,), {1, 2}])
def test_non_dict_payload_is_refused(payload: Any) -> None:
    with pytest.raises(InvalidPayload, match="JSON object"):
        encode_payload(payload)


@pytest.mark.parametrize("payload", [
    {1: "int key"},
    {("t",): "tuple key"},
    {"when": datetime(2026, 1, 1, tzinfo=UTC)},
    {"obj": object()},
    {"set": {1, 2}},
    {"bytes": b"raw"},
    {"nested": {"deep": [object()]}},
])
def test_non_json_payload_values_are_refused(payload: dict[Any, Any]) -> None:
    with pytest.raises(InvalidPayload):
        encode_payload(payload)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_numbers_are_refused(value: float) -> None:
    with pytest.raises(InvalidPayload):
        encode_payload({"x": value})
    with pytest.raises(InvalidPayload):
        encode_payload({"x": [1, {"y": value}]})


def test_payload_size_limit_is_inclusive() -> None:
    payload = {"a": "x" * 100}
    size = len(json.dumps(payload, separators=(",", ":")).encode())
    assert size == 108
    assert encode_payload(payload, max_bytes=size) == '{"a":"' + "x" * 100 + '"}'
    with pytest.raises(InvalidPayload, match="108 bytes"):
        encode_payload(payload, max_bytes=size - 1)


def test_payload_size_counts_utf8_bytes_not_characters() -> None:
    payload = {"a": "é" * 10}  # 10 characters, 20 bytes
    assert encode_payload(payload, max_bytes=28) == '{"a":"' + "é" * 10 + '"}'
    with pytest.raises(InvalidPayload):
        encode_payload(payload, max_bytes=27)


def test_invalid_payload_is_a_value_error() -> None:
    with pytest.raises(ValueError):
        encode_payload(["x"])


# -- TaskMessage --------------------------------------------------------------------------------


def test_minimal_message_round_trip_uses_defaults() -> None:
    m = TaskMessage(id="a1", type="emails.send", payload={"to": "x@y"}, queue="mail")
    decoded = TaskMessage.decode("a1", "mail", m.encode())
    assert decoded == m
    assert decoded.max_retry == DEFAULT_MAX_RETRY
    assert decoded.timeout is None and decoded.deadline is None and decoded.unique_key is None
    assert decoded.retention == 0.0


def test_full_message_round_trip() -> None:
    m = TaskMessage(id="id-9", type="reports.build", payload={"year": 2026, "tags": ["a", "b"], "opt": None},
                    queue="low", max_retry=-1, timeout=12.5, deadline=1_800_000_123.25, retention=3600.0,
                    unique_key="qc:{low}:unique:reports.build:ab12", enqueued_at=1_800_000_000.125)
    text = m.encode()
    assert json.loads(text)["type"] == "reports.build"
    assert TaskMessage.decode("id-9", "low", text) == m
    assert TaskMessage.decode("id-9", "low", text.encode()) == m  # bytes as from a raw Redis client


def test_encode_reuses_the_given_payload_encoding() -> None:
    m = TaskMessage(id="a", type="t", payload={"k": "v"}, queue="q")
    assert json.loads(m.encode(payload_json='{"k":"v"}'))["payload"] == {"k": "v"}


def test_id_and_queue_come_from_the_caller_not_the_message() -> None:
    text = TaskMessage(id="one", type="t", payload={}, queue="q1").encode()
    decoded = TaskMessage.decode("two", "q2", text)
    assert (decoded.id, decoded.queue) == ("two", "q2")


def test_decode_accepts_a_message_without_optional_fields() -> None:
    decoded = TaskMessage.decode("x", "q", '{"type":"only.type"}')
    assert decoded == TaskMessage(id="x", type="only.type", payload={}, queue="q")


@pytest.mark.parametrize("data", [
    None,
    "",
    "not json",
    "{",
    b"\xff\xfe\x00garbage",
    b"\x80\x81",
    "[1, 2]",
    '"a string"',
    "42",
    "null",
    "{}",
    '{"payload":{}}',
    '{"type":""}',
    '{"type":5}',
    '{"type":null}',
    '{"type":["a"]}',
    '{"type":"t","payload":[1]}',
    '{"type":"t","payload":"x"}',
    '{"type":"t","max_retry":"3"}',
    '{"type":"t","max_retry":1.5}',
    '{"type":"t","max_retry":true}',
    '{"type":"t","timeout":"10"}',
    '{"type":"t","timeout":true}',
    '{"type":"t","deadline":{}}',
    '{"type":"t","retention":[1]}',
    '{"type":"t","unique_key":7}',
    '{"type":"t","enqueued_at":"yesterday"}',
])
def test_malformed_messages_raise_task_decode_error(data: Any) -> None:
    with pytest.raises(TaskDecodeError, match="task tid"):
        TaskMessage.decode("tid", "q", data)


def test_number_too_large_for_a_float_raises_task_decode_error() -> None:
    huge = "9" * 400  # valid JSON integer, but float() overflows
    for field in ("timeout", "deadline", "retention", "enqueued_at"):
        with pytest.raises(TaskDecodeError):
            TaskMessage.decode("tid", "q", f'{{"type":"t","{field}":{huge}}}')


def test_deeply_nested_json_raises_task_decode_error() -> None:
    with pytest.raises(TaskDecodeError):
        TaskMessage.decode("tid", "q", "[" * 100_000 + "]" * 100_000)
    with pytest.raises(TaskDecodeError):
        TaskMessage.decode("tid", "q", '{"type":"t","payload":{"a":' + "[" * 100_000 + "]" * 100_000 + "}}")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=10), children, max_size=5),
    max_leaves=20,
)
message_like = st.fixed_dictionaries(
    {},
    optional={
        "type": json_values | st.text(min_size=1, max_size=20),
        "payload": json_values | st.dictionaries(st.text(max_size=5), json_values, max_size=3),
        "max_retry": json_values | st.integers(),
        "timeout": json_values | st.integers(min_value=-(10**400), max_value=10**400),
        "deadline": json_values,
        "retention": json_values,
        "unique_key": json_values,
        "enqueued_at": json_values | st.integers(min_value=-(10**400), max_value=10**400),
    },
)


def _decode_or_decode_error(data: Any) -> None:
    try:
        message = TaskMessage.decode("fuzz", "q", data)
    except TaskDecodeError:
        return
    assert isinstance(message, TaskMessage)
    assert isinstance(message.type, str) and message.type
    assert isinstance(message.payload, dict)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_fuzz_decode_bytes(data: bytes) -> None:
    _decode_or_decode_error(data)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_fuzz_decode_text(data: str) -> None:
    _decode_or_decode_error(data)


@settings(max_examples=300, deadline=None)
@given(json_values | message_like)
def test_fuzz_decode_json_values(value: Any) -> None:
    _decode_or_decode_error(json.dumps(value))


@settings(max_examples=100, deadline=None)
@given(
    type_name=st.text(min_size=1, max_size=30),
    payload=st.dictionaries(st.text(max_size=10), json_values.filter(lambda v: v == v), max_size=5),
    max_retry=st.integers(min_value=-5, max_value=10**6),
    timeout=st.none() | st.floats(min_value=0.001, max_value=1e9),
    retention=st.floats(min_value=0, max_value=1e9),
    enqueued_at=st.floats(min_value=0, max_value=4e9),
)
def test_fuzz_encode_decode_round_trip(type_name: str, payload: dict[str, Any], max_retry: int,
                                       timeout: float | None, retention: float, enqueued_at: float) -> None:
    try:
        payload_json = encode_payload(payload)
    except InvalidPayload:
        return  # NaN/inf somewhere inside: refused before it could be stored
    m = TaskMessage(id="r", type=type_name, payload=payload, queue="q", max_retry=max_retry, timeout=timeout,
                    retention=retention, enqueued_at=enqueued_at)
    assert TaskMessage.decode("r", "q", m.encode(payload_json)) == m


# -- small read-model helpers -------------------------------------------------------------------


def test_task_state_values_and_str() -> None:
    assert [s.value for s in TaskState] == ["pending", "active", "scheduled", "retry", "archived", "completed"]
    assert str(TaskState.RETRY) == "retry"


def test_ms_to_datetime() -> None:
    assert ms_to_datetime(None) is None and ms_to_datetime("") is None
    assert ms_to_datetime("1800000000500") == datetime(2027, 1, 15, 8, 0, 0, 500_000, tzinfo=UTC)


def test_task_info_to_dict_is_json_ready() -> None:
    info = TaskInfo(id="a", queue="q", type="t", state=TaskState.ARCHIVED, payload={"x": 1},
                    archived_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC))
    out = info.to_dict()
    assert out["state"] == "archived"
    assert out["archived_at"] == "2026-01-02T03:04:05+00:00"
    assert json.loads(json.dumps(out)) == out
