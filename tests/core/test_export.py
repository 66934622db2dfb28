"""Exports of a task list: JSON Lines with every field, CSV a spreadsheet reads safely; streamed."""

from __future__ import annotations

import csv
import dataclasses
import io
import json

from queuecore.core.export import CSV_COLUMNS, csv_lines, jsonl_lines, lines


def test_iter_tasks_streams_every_match_and_the_formats_carry_them(client, inspector) -> None:
    for n in range(1205):  # three chunks of 500
        client.enqueue("t.a" if n % 5 else "t.b", {"n": n, "note": "=cmd|' /C calc'!A0" if n == 5 else "ok"})
    every = list(inspector.iter_tasks("default", "pending"))
    assert len(every) == 1205 and [t.payload["n"] for t in every[:3]] == [0, 1, 2]  # oldest (next to run) first
    of_b = list(inspector.iter_tasks("default", "pending", type="t.b", order="newest"))
    assert [t.payload["n"] for t in of_b][:3] == [1200, 1195, 1190] and len(of_b) == 241
    assert len(list(inspector.iter_tasks("default", "pending", search='"n": 1204'))) == 1
    assert len(list(inspector.iter_tasks("default", "pending", limit=7))) == 7
    rows = [json.loads(line) for line in jsonl_lines(of_b[:2])]
    assert [r["payload"]["n"] for r in rows] == [1200, 1195] and rows[0]["state"] == "pending"
    table = list(csv.reader(io.StringIO("".join(csv_lines(of_b)))))
    assert tuple(table[0]) == CSV_COLUMNS and len(table) == 242
    assert table[-1][CSV_COLUMNS.index("type")] == "t.b"
    five = next(r for r in table[1:] if r[0] == of_b[-2].id)  # n == 5: a formula inside the payload's JSON
    assert json.loads(five[CSV_COLUMNS.index("payload")])["note"].startswith("=cmd")  # intact: the cell starts with {


def test_a_cell_that_would_run_as_a_formula_is_quoted(inspector, client) -> None:
    client.enqueue("t.c", {})
    info = dataclasses.replace(next(inspector.iter_tasks("default", "pending")), last_error="=1+1 boom\nTraceback ...")
    row = list(csv.reader(io.StringIO("".join(csv_lines([info])))))[1]
    assert row[CSV_COLUMNS.index("last_error")] == "'=1+1 boom"
    # A review: a plain number was quoted too, so a max_retry of -1 (retry for ever) or an id "-42"
    # became text ("'-1", "'-42"), and the id no longer named its task when fed back to adminctl.
    odd = dataclasses.replace(info, id="-42", max_retry=-1, last_error="-1+cmd|' /C calc'!A0")
    row = list(csv.reader(io.StringIO("".join(csv_lines([odd])))))[1]
    assert (row[CSV_COLUMNS.index("id")], row[CSV_COLUMNS.index("max_retry")]) == ("-42", "-1")
    assert row[CSV_COLUMNS.index("last_error")].startswith("'-1+cmd")  # not a plain number: quoted
    try:
        list(lines("xml", []))
    except ValueError as exc:
        assert "jsonl, csv" in str(exc)
    else:
        raise AssertionError("an unknown format was accepted")
