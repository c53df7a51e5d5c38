"""Native histograms and quantile gauges through the streaming job's state stage and through
``l2m backfill`` (issue 56): over two micro-batches — a native series re-keyed to its bucket
limit batch after batch, a classic+native histogram's two rows per log — the last sample per
Kafka key is backfill's output, byte for byte; backfill's lines are run_local's."""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path
from typing import Any

import orjson

from l2m.batch.backfill import run_backfill
from l2m.batch.local import RunSettings, run_local
from l2m.rules.loader import load_text
from l2m.rules.model import Aggregation, Rule

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

_BASE, _PROBLEMS = load_text("""\
rules:
  - {id: both, name: both_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [1, 50], group_by: [svc]}
  - {id: nat, name: nat_ms, kind: counter, query: 'svc:a', aggregation: histogram,
     field: ms, buckets: [1]}
  - {id: gh, name: gh_ms, kind: gauge, query: '*', aggregation: histogram, field: ms,
     buckets: [1], group_by: [svc]}
  - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: sum, field: ms}
""")


def _rules() -> list[Rule]:
    """Classic+native counter (schema 3, 12 buckets: its schema lowered as values come),
    native-only counter (schema 8), native gauge histogram (schema 2), quantile gauges."""
    assert _PROBLEMS == []
    both, nat, gh, q = _BASE
    plain = {"buckets": (), "bucket_labels": ()}
    return [dataclasses.replace(both, native_schema=3, native_max_buckets=12),
            dataclasses.replace(nat, **plain, native_schema=8),
            dataclasses.replace(gh, **plain, native_schema=2, native_max_buckets=20),
            dataclasses.replace(q, aggregation=Aggregation.QUANTILES, native_schema=5,
                                quantiles=(0.0, 0.5, 0.99, 1.0),
                                quantile_labels=("0", "0.5", "0.99", "1"))]


def _logs(n: int) -> list[bytes]:
    """``n`` logs in event-time order (none late) over three windows: lognormal latencies,
    zeros, negatives, non-numeric and missing values."""
    rng = random.Random(56)
    logs = []
    for i in range(n):
        doc: dict[str, Any] = {"@timestamp": T0 + i * 180_000 // n, "svc": rng.choice("ab")}
        roll = rng.random()
        doc["ms"] = 0 if roll < 0.05 else -rng.lognormvariate(0, 1) if roll < 0.12 else \
            "n/a" if roll < 0.15 else round(rng.lognormvariate(3, 1.5), 3)
        if rng.random() < 0.05:
            del doc["ms"]
        logs.append(orjson.dumps(doc))
    return logs


def test_streaming_equals_backfill_for_native_histograms_and_quantiles(stream_test, spark,
                                                                       tmp_path: Path):
    rules = _rules()
    lines = _logs(900)
    st = stream_test(rules)
    for at in (0, 450):  # two micro-batches: the second merges into re-keyed state
        st.add(lines[at:at + 450])
        st.process()
    latest: dict[str, str] = {}
    for key, value in st.received:
        latest[key] = value
    streamed = sorted(v.encode() for v in latest.values()
                      if not orjson.loads(v)["rule"].startswith("l2m-"))
    (tmp_path / "logs.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    out = tmp_path / "out.jsonl"
    run_backfill(spark, rules, [str(tmp_path / "logs.jsonl")], out, progress=False)
    backfilled = out.read_bytes().splitlines()
    assert backfilled == run_local(RunSettings().routing(rules), lines).lines
    assert streamed == sorted(backfilled)
    samples = [orjson.loads(line) for line in backfilled]
    # Every rule's schema lowered in some series (or window) by its bucket limit.
    schemas = {(s["rule"], s["histogram"]["schema"]) for s in samples if "histogram" in s}
    assert sorted(schemas) == [("both", -1), ("gh", 0), ("nat", 4)]
    assert len([s for s in samples if s["rule"] == "q"]) == 3 * 4
