"""A backfill read task without a JVM: the series a rule's cap refuses for certain leave the
task already merged into the rule's overflow series, however many partial batches the task
makes — one row per log of a unique id would otherwise go through the shuffle."""

from __future__ import annotations

import json

import pyarrow as pa

from l2m.batch.backfill import packed_domains, task_partials
from l2m.batch.packs import PACKED_ARROW, partition_keys, unpack
from l2m.engine.admission import OVERFLOW_SERIES
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.pipeline import routing_option
from l2m.engine.routing import plan_for
from l2m.policy.limits import Limits, SeriesLimits
from l2m.rules.loader import load_text

RULES, _ = load_text("""\
rules:
  - {id: per-id, name: req_total, kind: counter, query: "*", aggregation: count,
     group_by: [id], max_series: 7}
  - {id: all, name: all_total, kind: counter, query: "*", aggregation: count}
""")
T0 = 1_795_341_600_000


def test_a_read_task_sends_a_capped_rule_s_cap_of_series_and_its_overflow_series():
    logs = 25_000  # past OUT_ROWS and BATCH_ROWS: several batches in and out
    lines = [json.dumps({"@timestamp": T0 + i, "id": f"{i:08d}"}).encode()
             for i in range(logs)]
    routing = plan_for(RULES, limits=Limits(SeriesLimits(per_rule=100, per_metric=0,
                                                                per_account=0)))
    run = task_partials(routing_option(routing), 4)
    packs = list(run(iter([pa.record_batch([pa.array(lines)], names=["value"])])))
    # Counters only (window null): one pack, for the first last-stage task.
    assert [p.column("key").to_pylist() for p in packs] == [[partition_keys(4)[0]]]
    out = unpack(packs, PARTIAL_ARROW)
    rows = {(r["rule"], r["series"]): r["matches"] for r in out.to_pylist()}
    ids = sorted(s for (rule, s) in rows if rule == "per-id" and s != OVERFLOW_SERIES)
    assert ids == [f"8:{i:08d}" for i in range(7)]  # the first 7 in key order, one log each
    assert [rows["per-id", s] for s in ids] == [1] * 7
    assert rows["per-id", OVERFLOW_SERIES] == logs - 7
    assert sum(m for (rule, _s), m in rows.items() if rule == "all") == logs


def test_a_read_task_packs_each_window_whole_for_one_last_stage_task():
    minute = 60_000
    windows = [None, 0, minute, 2 * minute, 5 * minute, -minute, 0, None, 5 * minute]
    table = pa.Table.from_pylist(
        [{"rule": "r", "series": f"s{i}", "le": None, "window": w, "matches": 1}
         for i, w in enumerate(windows)], schema=PARTIAL_ARROW)
    keys = partition_keys(4)
    packs = list(packed_domains(table, 4))
    assert all(p.schema == PACKED_ARROW for p in packs)
    placed = {}
    for p in packs:
        (key,) = p.column("key").to_pylist()
        for row in unpack([p], PARTIAL_ARROW).to_pylist():
            placed[row["series"]] = keys.index(key)
    # minute m to task m mod 4, the counters (window null) to the first
    assert placed == {"s0": 0, "s1": 0, "s2": 1, "s3": 2, "s4": 1, "s5": 3, "s6": 0, "s7": 0,
                      "s8": 1}
    assert list(packed_domains(PARTIAL_ARROW.empty_table(), 4)) == []
