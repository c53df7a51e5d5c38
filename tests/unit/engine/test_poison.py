"""Poison-proof input: no log can fail or stall the job, in streaming or backfill. Each hostile
record is either processed or counted (and, in streaming, dead-lettered with its reason); the
good logs around it are counted exactly."""

from __future__ import annotations

import time

import pytest

from l2m.batch.backfill import run_backfill
from l2m.engine.parse import (
    FUTURE,
    KAFKA_TIME,
    MALFORMED,
    NO_TIMESTAMP,
    OK,
    ParsePlan,
    parse_lines,
)
from l2m.errors import InputError
from l2m.query.nodes import FieldUse
from tests.support.poison import HOSTILE_TIMES, MALFORMED_LINES, PROCESSED, RULES


def test_every_hostile_value_gets_a_status_never_an_exception():
    plan = ParsePlan.merge([FieldUse("svc", string=True), FieldUse("b", number=True)])
    lines = [r for r, _ in HOSTILE_TIMES + MALFORMED_LINES + PROCESSED]
    batch = parse_lines(lines, plan).to_pydict()
    n_times, n_bad = len(HOSTILE_TIMES), len(MALFORMED_LINES)
    assert batch["_status"] == ([NO_TIMESTAMP] * n_times + [MALFORMED] * n_bad
                                + [OK] * len(PROCESSED))
    assert all(batch["_error"][n_times + i] for i in range(n_bad))
    # streaming: an unusable time falls back to the record's Kafka time
    now = int(time.time() * 1000)
    batch = parse_lines(lines, plan, fallback_ts=[now] * len(lines), now_ms=now).to_pydict()
    assert batch["_status"][:n_times] == [KAFKA_TIME] * n_times
    assert batch["_ts"][:n_times] == [now] * n_times


def test_future_event_times_are_bounded_by_the_record_time_and_the_clock():
    plan = ParsePlan.merge([FieldUse("svc", string=True)], max_future_ms=60_000)
    now = 1_800_000_000_000
    batch = parse_lines([
        b'{"@timestamp": 1800000059000}',  # 59 s ahead of its record: fine
        b'{"@timestamp": 1800000061000}',  # 61 s ahead: future
        b'{"svc": "no time"}',             # dated by a record 2 h ahead of the clock: future
        b"not json",                       # malformed, whatever its time
    ], plan, fallback_ts=[now, now, now + 7_200_000, now + 7_200_000], now_ms=now).to_pydict()
    assert batch["_status"] == [OK, FUTURE, FUTURE, MALFORMED]
    assert batch["_error"][1].startswith("future: event time")
    assert batch["_ts"][1] == now  # the record's time dates the input counter, nothing else


def test_output_may_not_be_an_input(tmp_path):
    logs = tmp_path / "logs.jsonl"
    logs.write_text("{}\n")
    with pytest.raises(InputError, match="is the input file"):
        run_backfill(None, RULES, [str(logs)], logs, progress=False)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="inside the input directory"):
        run_backfill(None, RULES, [str(tmp_path)], tmp_path / "out" / "s.jsonl",  # type: ignore[arg-type]
                     progress=False)
    assert logs.read_text() == "{}\n"


