"""Issue 11, items 3 and 4 through the CLI: an option out of range or an unstorable payload is a
refused input (exit 1, one line on stderr, nothing stored), never "Redis unreachable" (exit 2)."""

from __future__ import annotations

import json

import pytest

from tests.adminctl.conftest import Run


def stored_keys(redis_client, key_prefix: str) -> list[str]:
    return [k for k in redis_client.scan_iter(match=f"{key_prefix}:*") if ":{" in k]


@pytest.mark.parametrize(("args", "message"), [
    (["--unique", "1e20"], "unique_for is out of range"),
    (["--retention", "1e306"], "retention is out of range"),
    (["--process-in", "1e12"], "process_in is out of range"),
    (["--timeout", "400000000"], "timeout is out of range"),
    (["--max-retry", "100000000000000000000"], "max_retry is out of range"),
])
def test_an_option_out_of_range_exits_1_with_one_line(adminctl, redis_client, key_prefix: str, args: list[str],
                                                      message: str) -> None:
    run: Run = adminctl("enqueue", "demo.noop", *args)
    assert (run.code, run.stdout) == (1, ""), run
    assert len(run.stderr.splitlines()) == 1 and message in run.stderr and "unreachable" not in run.stderr
    assert stored_keys(redis_client, key_prefix) == []


@pytest.mark.parametrize(("payload", "message"), [
    ('{"s": "\\ud800"}', "lone surrogate"),
    (json.dumps({"v": json.loads("[" * 150 + "1" + "]" * 150)}), "nested more than 100 levels"),
    ('{"v": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),  # past json's own recursion limit
])
def test_a_payload_the_core_refuses_exits_1_with_one_line(adminctl, redis_client, key_prefix: str, payload: str,
                                                          message: str) -> None:
    run: Run = adminctl("enqueue", "demo.noop", "--payload", payload)
    assert (run.code, run.stdout) == (1, ""), run
    assert len(run.stderr.splitlines()) == 1 and message in run.stderr
    assert stored_keys(redis_client, key_prefix) == []
