"""The memory source (l2m/dev/memory.py) without a JVM: appended records get Kafka-like offsets per
partition, batches are planned only where there is something new, availableNow stops at the
offsets seen when it started, and ``read()`` works on a pickled copy of the reader (as on a
Python worker) and parses exactly as the Kafka reader does, record timestamps included."""

from __future__ import annotations

import pickle
import textwrap
from pathlib import Path

import orjson

from l2m.dev.memory import MemoryPartition, MemorySource, MemoryStreamReader, append
from l2m.engine.parse import BLANK, KAFKA_TIME, MALFORMED, OK, ParsePlan
from l2m.engine.routing import plan_for
from l2m.rules.loader import load_text

T0 = 1795341600000

RULES, _ = load_text(textwrap.dedent("""\
    rules:
      - {id: n, name: n_total, kind: counter, query: "*", aggregation: count}
    """))


def reader(folder: Path, partitions: int = 2) -> MemoryStreamReader:
    plan = plan_for(RULES).plan.to_json()
    # Spark passes the options as the user spelled them; the reader must not care.
    return MemoryStreamReader({"path": str(folder), "partitions": str(partitions),
                               "parsePlan": plan})


def test_offsets_count_records_per_partition_and_plans_skip_idle_ones(tmp_path):
    assert append(tmp_path, 0, [b"{}", b"{}"], [T0, T0]) == (0, 2)
    assert append(tmp_path, 0, [b"{}"], [T0]) == (2, 3)
    assert append(tmp_path, 1, [], []) == (0, 0)
    src = reader(tmp_path)
    start = src.initialOffset()
    assert start == {"partitions": {"0": 0, "1": 0}}
    end = src.latestOffset(start, None)
    assert end == {"partitions": {"0": 3, "1": 0}}
    assert src.reportLatestOffset() == end
    parts = src.partitions(start, end)
    assert [(p.partition, p.start, p.end) for p in parts] == [(0, 0, 3)]
    append(tmp_path, 1, [b"{}"], [T0])
    later = src.latestOffset(end, None)
    assert [(p.partition, p.start, p.end) for p in src.partitions(end, later)] == [(1, 0, 1)]


def test_available_now_stops_at_the_offsets_seen_when_it_started(tmp_path):
    append(tmp_path, 0, [b"{}"], [T0])
    src = reader(tmp_path, partitions=1)
    src.prepareForTriggerAvailableNow()
    append(tmp_path, 0, [b"{}"], [T0])
    assert src.latestOffset(src.initialOffset(), None) == {"partitions": {"0": 1}}


def test_a_pickled_reader_parses_a_range_with_record_times_as_fallback(tmp_path):
    append(tmp_path, 0, [orjson.dumps({"@timestamp": T0 + 1})], [T0 + 100])
    append(tmp_path, 0, [b'{"no": "time"}', b"not json", None], [T0 + 200, T0 + 300, T0 + 400])
    worker = pickle.loads(pickle.dumps(reader(tmp_path)))  # what a Python worker gets
    batches = list(worker.read(MemoryPartition(0, 0, 4)))
    assert len(batches) == 1
    rows = batches[0].select(["_ts", "_status"]).to_pylist()
    assert rows == [{"_ts": T0 + 1, "_status": OK},
                    {"_ts": T0 + 200, "_status": KAFKA_TIME},  # dated by its record
                    {"_ts": T0 + 300, "_status": MALFORMED},
                    {"_ts": T0 + 400, "_status": BLANK}]  # a tombstone
    # a range inside the files: only its records
    inner = list(worker.read(MemoryPartition(0, 1, 2)))
    assert inner[0].column("_ts").to_pylist() == [T0 + 200]
    assert list(worker.read(MemoryPartition(0, 4, 4))) == []


def test_the_schema_is_the_parse_plan_s():
    plan = plan_for(RULES).plan
    source = MemorySource({"parsePlan": plan.to_json(), "path": "x"})
    assert source.schema() == ParsePlan.from_json(plan.to_json()).spark_schema_ddl()
