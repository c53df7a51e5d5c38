"""Poison-proof input: no log can fail or stall the job, in streaming or backfill. Each hostile
record is either processed or counted (and, in streaming, dead-lettered with its reason); the
good logs around it are counted exactly."""

from __future__ import annotations

import json
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
from l2m.rules.loader import load_text

T0 = 1795341600000  # 2026-11-22T10:00:00Z
RULES, _ = load_text("""\
rules:
  - {id: n, name: logs_total, kind: counter, query: "*", aggregation: count, group_by: [svc]}
  - {id: s, name: bytes_total, kind: counter, query: "*", aggregation: sum, field: b}
  - {id: g, name: bytes_max, kind: gauge, query: "NOT svc:big", aggregation: max, field: b}
""")

# (record, what it is): hostile records that are still JSON objects with a usable time, or
# not; the expected status follows each.
HOSTILE_TIMES = [
    (b'{"@timestamp": 1e20, "svc": "a"}', "timestamp 1e20"),
    (b'{"@timestamp": 9223372036854775808, "svc": "a"}', "timestamp 2^63"),
    (b'{"@timestamp": -9223372036854775808, "svc": "a"}', "timestamp int64 min"),
    (b'{"@timestamp": 1e16, "svc": "a"}', "timestamp 1e16"),
    (b'{"@timestamp": 1e30, "svc": "a"}', "timestamp 1e30"),
    (b'{"@timestamp": "99999-01-01T00:00:00Z", "svc": "a"}', "ISO year 99999"),
    (b'{"@timestamp": "0001-01-01T00:00:00+01:00", "svc": "a"}', "before year 1"),
]
MALFORMED_LINES = [
    (b'{"@timestamp": 1795341600000, "b": NaN}', "NaN literal"),
    (b'{"@timestamp": 1795341600000, "b": Infinity}', "Infinity literal"),
    (b'{"@timestamp": 1795341600000, "svc": "\xff\xfe"}', "invalid UTF-8"),
    (b'{"a":' * 5000 + b"1" + b"}" * 5000, "nesting 5000 deep"),
    (b'{"@timestamp": 1795341600002, "b": 1e400}', "past double range"),
]
PROCESSED = [
    (b'{"@timestamp": 1795341600000, "b": 1e308, "svc": "big"}', "1e308"),
    (b'{"@timestamp": 1795341600001, "b": 1e308, "svc": "big"}', "1e308 again: sum is +Inf"),
    (b'{"@timestamp": 1795341600002, "b": 123456789012345678901234567890, "svc": "x"}',
     "an integer past int64: read as a double"),
    (json.dumps({"@timestamp": T0, "svc": "huge", "m": "x" * 2_000_000}).encode(), "2 MB"),
]


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


