"""Poison-proof input: no log can fail or stall the job, in streaming or backfill. Each hostile
record is either processed or counted (and, in streaming, dead-lettered with its reason); the
good logs around it are counted exactly."""

from __future__ import annotations

import bz2
import gzip
import json
import time
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Producer

from l2m.batch.backfill import run_backfill
from l2m.engine.parse import FUTURE, KAFKA_TIME, MALFORMED, NO_TIMESTAMP, OK, ParsePlan, parse_lines
from l2m.errors import InputError
from l2m.query.nodes import FieldUse
from l2m.rules.loader import load_text

from .kafka_helpers import CLOSER, consume_all, fresh_topics, job_config, latest_samples
from .test_streaming import run_once

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


@pytest.mark.spark
def test_backfill_counts_hostile_lines_skips_corrupt_archives_and_keeps_good_logs_exact(
        spark, tmp_path):
    good = [orjson.dumps({"@timestamp": T0 + i, "svc": "ok", "b": i}) for i in range(1, 101)]
    folder = tmp_path / "in"
    folder.mkdir()
    hostile = [r for r, _ in HOSTILE_TIMES + MALFORMED_LINES + PROCESSED]
    (folder / "a.jsonl").write_bytes(b"\n".join(good[:50] + hostile) + b"\n")
    with gzip.open(folder / "b.jsonl.gz", "wb") as f:
        f.write(b"\n".join(good[50:75]) + b"\n")
    with bz2.open(folder / "b2.jsonl.bz2", "wb") as f:
        f.write(b"\n".join(good[75:]))  # no final newline
    whole = gzip.compress(b"\n".join(good) * 50)
    (folder / "c.jsonl.gz").write_bytes(whole[: len(whole) // 2])  # truncated
    (folder / "d.jsonl.gz").write_bytes(b"not gzip at all")
    packed = bz2.compress(b"\n".join(good) * 50)
    (folder / "e.jsonl.bz2").write_bytes(packed[: len(packed) // 2])  # truncated

    out = tmp_path / "out.jsonl"
    summary = run_backfill(spark, RULES, [str(folder)], out, progress=False)
    assert sorted(Path(p).name for p, _ in summary.skipped_files) == [
        "c.jsonl.gz", "d.jsonl.gz", "e.jsonl.bz2"]
    assert summary.malformed == len(MALFORMED_LINES)
    assert summary.no_timestamp == len(HOSTILE_TIMES)
    assert summary.parsed == 100 + len(PROCESSED)
    samples = {(s["rule"], tuple(s["labels"].items()), s["timestamp"]): s["value"]
               for s in map(json.loads, out.read_text().splitlines())}
    assert samples[("n", (("svc", "ok"),), T0 + 100)] == 100.0
    assert samples[("n", (("svc", "big"),), T0 + 1)] == 2.0
    # a sum that leaves the double range is +Inf, written as Prometheus writes it, and counted
    assert samples[("s", (), T0 + 100)] == "+Inf"
    assert summary.nonfinite == 1
    assert "corrupt files:      3 (skipped)" in summary.render()

    with pytest.raises(InputError, match=r"corrupt or truncated (gzip|bzip2)"):
        run_backfill(spark, RULES, [str(folder)], tmp_path / "strict.jsonl", progress=False,
                     strict=True)
    assert not (tmp_path / "strict.jsonl.partial").exists()


def test_output_may_not_be_an_input(tmp_path):
    logs = tmp_path / "logs.jsonl"
    logs.write_text("{}\n")
    with pytest.raises(InputError, match="is the input file"):
        run_backfill(None, RULES, [str(logs)], logs, progress=False)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="inside the input directory"):
        run_backfill(None, RULES, [str(tmp_path)], tmp_path / "out" / "s.jsonl",  # type: ignore[arg-type]
                     progress=False)
    assert logs.read_text() == "{}\n"


@pytest.mark.spark
def test_a_failed_backfill_removes_its_partial_output(spark, tmp_path, monkeypatch):
    import l2m.batch.backfill as backfill

    logs = tmp_path / "logs.jsonl"
    logs.write_bytes(orjson.dumps({"@timestamp": T0, "svc": "a"}) + b"\n")

    def broken(*_args: object) -> object:
        yield {"rule": "n", "value": 1.0}  # the output has begun when the failure comes
        raise RuntimeError("disk full")

    monkeypatch.setattr(backfill, "samples_from_rows", broken)
    out = tmp_path / "out.jsonl"
    with pytest.raises(Exception, match="disk full"):
        run_backfill(spark, RULES, [str(logs)], out, progress=False)
    assert not out.exists() and not (tmp_path / "out.jsonl.partial").exists()


@pytest.mark.spark
def test_streaming_survives_every_hostile_record_and_counts_good_logs_exactly(
        spark, broker, tmp_path):
    t = fresh_topics(broker.bootstrap, partitions=2)
    # Event times near the clock: logs dated by their Kafka time (now) move the watermark.
    base = (int(time.time() * 1000) // 60_000 - 10) * 60_000
    good = [orjson.dumps({"@timestamp": base + i, "svc": "ok", "b": i}) for i in range(1, 101)]
    huge_malformed = b"{" + b"x" * (5 * 1024 * 1024)  # 5 MB, not JSON
    future = orjson.dumps({"@timestamp": int(time.time() * 1000) + 86_400_000, "svc": "ok",
                           "b": 1})
    hostile = ([r for r, _ in HOSTILE_TIMES + MALFORMED_LINES + PROCESSED]
               + [huge_malformed, future, None])  # None: a tombstone
    producer = Producer({"bootstrap.servers": t.bootstrap, "message.max.bytes": 16 << 20,
                         "log_level": "3"})
    for i, record in enumerate(good[:50] + hostile + good[50:]):
        producer.produce(t.topics.logs, value=record, partition=i % 2)
    producer.flush(30)
    for p in range(2):
        producer.produce(t.topics.logs, value=CLOSER, partition=p)
        producer.flush(30)
    cfg = job_config(t, tmp_path)
    run_once(spark, cfg, RULES)
    # a late log for the first window (within the 20-minute grace): the future-dated log did
    # not move the watermark a day ahead, so the window is still open
    producer.produce(t.topics.logs,
                     value=orjson.dumps({"@timestamp": base + 5, "svc": "late", "b": 10**6}),
                     partition=0)
    producer.flush(30)
    for p in range(2):
        producer.produce(t.topics.logs, value=CLOSER, partition=p)
        producer.flush(30)
    run_once(spark, cfg, RULES)

    samples = latest_samples(consume_all(t.bootstrap, t.topics.metrics))
    inputs = {s["labels"]["status"]: s["value"] for s in samples if s["rule"] == "l2m-input"}
    assert inputs == {"ok": 100.0 + len(PROCESSED) + 1,
                      "no_timestamp": float(len(HOSTILE_TIMES)),  # dated by Kafka time
                      "malformed": float(len(MALFORMED_LINES) + 1),
                      "future": 1.0, "blank": 5.0}  # the tombstone and 4 closers
    by = {(s["rule"], tuple(s["labels"].items()), s["timestamp"]): s["value"] for s in samples}
    assert by[("n", (("svc", "ok"),), base + 100)] == 100.0
    assert by[("g", (), base)] == 10.0**6  # the late log corrected the open window
    assert not [s for s in samples if s["rule"] == "l2m-late"]

    dead = consume_all(t.bootstrap, t.topics.dead_letters)
    assert len(dead) == len(MALFORMED_LINES) + 2
    headers = [dict(m.headers()) for m in dead]
    reasons = sorted(h["l2m.error"].decode().split(":")[0] for h in headers)
    assert reasons.count("future") == 1
    assert reasons.count("invalid JSON") == len(MALFORMED_LINES) + 1
    big = [(m, h) for m, h in zip(dead, headers, strict=True) if h.get("l2m.truncated")]
    assert len(big) == 1
    message, header = big[0]
    assert int(header["l2m.size"]) == len(huge_malformed)
    assert message.value() == huge_malformed[: len(message.value())]
    assert len(message.value()) < len(huge_malformed)
