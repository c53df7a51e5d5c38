"""A backfill read task without a JVM: the series a rule's cap refuses for certain leave the
task already merged into the rule's overflow series, however many partial batches the task
makes — one row per log of a unique id would otherwise go through the shuffle."""

from __future__ import annotations

import json

import pyarrow as pa

from l2m.batch.backfill import task_partials
from l2m.engine.admission import OVERFLOW_SERIES
from l2m.engine.pipeline import routing_option
from l2m.engine.routing import plan_for
from l2m.limits import Limits, SeriesLimits
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
    run = task_partials(routing_option(routing))
    out = pa.Table.from_batches(list(run(iter([pa.record_batch([pa.array(lines)],
                                                               names=["value"])]))))
    rows = {(r["rule"], r["series"]): r["matches"] for r in out.to_pylist()}
    ids = sorted(s for (rule, s) in rows if rule == "per-id" and s != OVERFLOW_SERIES)
    assert ids == [f"8:{i:08d}" for i in range(7)]  # the first 7 in key order, one log each
    assert [rows["per-id", s] for s in ids] == [1] * 7
    assert rows["per-id", OVERFLOW_SERIES] == logs - 7
    assert sum(m for (rule, _s), m in rows.items() if rule == "all") == logs
