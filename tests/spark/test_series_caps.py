"""Series caps end to end (issue 20, deliverable 1): past its cap a rule's new series count
into its overflow series, so totals stay exact; the series it had keep counting exactly;
other tenants are untouched; refusals are counted; the caps hold across a restart (they are
state) and backfill decides the same."""

from __future__ import annotations

import json
from pathlib import Path

from l2m.batch.backfill import run_backfill
from l2m.config.job import LimitsConfig
from l2m.policy.tenancy import Tenancy
from l2m.rules.loader import load_rules
from l2m.rules.model import Rule
from l2m.state.tally import RefusedCount

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start
LIMITS = LimitsConfig(max_series_per_rule=100)


def submit(root: Path) -> list[Rule]:
    rules = {
        "acme": [
            "{id: req, name: req_total, kind: counter, query: '*', aggregation: count, "
            "group_by: [request_id], max_series: 3}",
            "{id: all, name: logs_total, kind: counter, query: '*', aggregation: count}",
            "{id: users, name: users_ms, kind: gauge, query: '*', aggregation: sum, "
            "field: ms, group_by: [user], max_series: 2}"],
        "globex": [
            "{id: req, name: req_total, kind: counter, query: '*', aggregation: count, "
            "group_by: [request_id]}"],
    }
    for account, specs in rules.items():
        (root / account).mkdir(parents=True)
        (root / account / "rules.yaml").write_text(
            "rules:\n" + "".join(f"  - {spec}\n" for spec in specs))
    return list(load_rules([root], tenancy=Tenancy(), limits=LIMITS.series).rules)


def log(account: str, i: int, request: str, user: str = "u0", ms: int = 1) -> bytes:
    return json.dumps({"@timestamp": T0 + i, "account": account, "request_id": request,
                       "user": user, "ms": ms}).encode()


FIRST = [log("acme", 0, "r0", "u0", 1), log("acme", 1, "r1", "u1", 2),
         log("acme", 2, "r2", "u2", 4), log("acme", 3, "r3", "u0", 8),
         log("acme", 4, "r4", "u3", 16),
         *[log("globex", 10 + i, f"g{i}") for i in range(4)]]
SECOND = [log("acme", 20, "r0", "u1", 32), log("acme", 21, "r9", "u4", 64)]


def values(samples: list[dict]) -> dict[tuple[str, str, tuple], float]:
    return {(s["rule"], s["name"], tuple(sorted(s["labels"].items()))): s["value"]
            for s in samples}


OVERFLOW = (("l2m_overflow", "true"),)
# After FIRST: acme/req admits r0..r2 (key order), r3 and r4 overflow; acme/users admits u0,
# u1 in the window, u2 (4 ms) and u3 (16 ms) overflow; globex is under its cap.
AFTER_FIRST = {
    ("acme/req", "req_total", (("request_id", "r0"),)): 1.0,
    ("acme/req", "req_total", (("request_id", "r1"),)): 1.0,
    ("acme/req", "req_total", (("request_id", "r2"),)): 1.0,
    ("acme/req", "req_total", OVERFLOW): 2.0,
    ("acme/all", "logs_total", ()): 5.0,
    ("acme/users", "users_ms", (("user", "u0"),)): 9.0,
    ("acme/users", "users_ms", (("user", "u1"),)): 2.0,
    ("acme/users", "users_ms", OVERFLOW): 20.0,
    **{("globex/req", "req_total", (("request_id", f"g{i}"),)): 1.0 for i in range(4)},
}
# After SECOND: r0 is known (counts on), r9 overflows; u1 is known, u4 overflows.
AFTER_SECOND = {
    **AFTER_FIRST,
    ("acme/req", "req_total", (("request_id", "r0"),)): 2.0,
    ("acme/req", "req_total", OVERFLOW): 3.0,
    ("acme/all", "logs_total", ()): 7.0,
    ("acme/users", "users_ms", (("user", "u1"),)): 34.0,
    ("acme/users", "users_ms", OVERFLOW): 84.0,
}
REFUSED = {("acme/req", "acme", "rule"): 3.0}
REFUSED_IN_WINDOW = {("acme/users", "acme", "rule"): 3.0}


def refusals(samples: list[dict], name: str) -> dict[tuple[str, str, str], float]:
    return {(s["labels"]["rule"], s["labels"]["account"], s["labels"]["limit"]): s["value"]
            for s in samples if s["name"] == name}


def test_streaming_caps_hold_across_a_restart_and_backfill_decides_the_same(
        spark, stream_test, tmp_path):
    rules = submit(tmp_path / "rules")
    job = stream_test(rules, limits=LIMITS)
    job.add(FIRST, record_ts=T0)
    counts = job.process().counts
    assert values(job.samples()) == AFTER_FIRST
    assert counts is not None and counts.activity is not None
    assert {(k.rule, k.limit): v for k, v in counts.activity.value.items()
            if isinstance(k, RefusedCount)} == {("acme/req", "rule"): 2, ("acme/users", "rule"): 2}
    job.stop()
    job.add(SECOND, record_ts=T0)
    job.restart()
    assert values(job.samples()) == AFTER_SECOND
    own = job.samples(own=True)
    assert refusals(own, "l2m_series_refused_total") == REFUSED
    assert refusals(own, "l2m_series_refused") == REFUSED_IN_WINDOW

    source = tmp_path / "logs.jsonl"
    source.write_bytes(b"\n".join(FIRST + SECOND) + b"\n")
    out = tmp_path / "out.jsonl"
    summary = run_backfill(spark, rules, [str(source)], out, progress=False,
                           limits=LIMITS.series)
    assert values([json.loads(line) for line in out.read_text().splitlines()]) == AFTER_SECOND
    assert summary.refused == {"acme/req (rule)": 3, "acme/users (rule)": 3}


def test_backfill_collapsing_past_rule_caps_on_the_executors_decides_as_the_driver_would(
        spark, tmp_path, monkeypatch):
    """beyond_rule_caps merges series ranked past a rule's cap on the executors, before
    admission: the output and the refusal counts (reason included) must be those of
    admitting every series on the driver. Random ids, rule caps above and below the
    account's and the metric's."""
    import random

    import l2m.batch.backfill as backfill
    from l2m.policy.limits import Limits, SeriesLimits

    seed = 2026
    print(f"seed {seed}")
    rng = random.Random(seed)
    root = tmp_path / "rules"
    (root / "acme").mkdir(parents=True)
    (root / "acme" / "r.yaml").write_text(
        "rules:\n"
        "  - {id: a, name: m_total, kind: counter, query: '*', aggregation: count, "
        "group_by: [x], max_series: 4}\n"
        "  - {id: b, name: m_total, kind: counter, query: '*', aggregation: count, "
        "group_by: [y], labels: {r: b}, max_series: 9}\n"
        "  - {id: g, name: g_ms, kind: gauge, query: '*', aggregation: histogram, field: ms, "
        "buckets: [1, 10], group_by: [x], max_series: 3}\n")
    limits = Limits(SeriesLimits(per_rule=100, per_metric=10, per_account=12))
    rules = load_rules([root], tenancy=Tenancy(), limits=limits).rules
    logs = tmp_path / "logs.jsonl"
    logs.write_bytes(b"\n".join(json.dumps({
        "@timestamp": T0 + rng.randrange(180_000), "account": "acme",
        "x": f"x{rng.randrange(12)}", "y": f"y{rng.randrange(15)}",
        "ms": rng.choice([0.5, 5, 50])}).encode() for _ in range(400)) + b"\n")

    def run(name: str) -> tuple[list[dict], dict[str, int]]:
        out = tmp_path / f"{name}.jsonl"
        summary = run_backfill(spark, rules, [str(logs)], out, progress=False, limits=limits)
        return [json.loads(line) for line in out.read_text().splitlines()], summary.refused

    collapsed, refused = run("collapsed")
    def keep(table, caps):  # pickled by value: the executors run this one
        return table

    monkeypatch.setattr(backfill, "beyond_rule_caps", keep)
    reference, refused_reference = run("reference")
    assert collapsed == reference
    assert refused == refused_reference
    assert set(refused) == {"acme/a (rule)", "acme/b (metric)", "acme/g (rule)"}


def test_partials_are_placed_in_their_rule_s_placement_shard(spark, tmp_path):
    """A read task tags each partial with its rule's shard from the rules its batch was
    planned with (a tenant's `<account>/<id>`, `rule:<id>` without an account, an open-mode
    rule naming an account): l2m.engine.admission.placement_shard, so an account's rules
    share one; Spark keeps that shard and spreads l2m's own rows (label cuts)."""
    import pyarrow as pa

    from l2m.engine.admission import placement_shard
    from l2m.engine.partials import PARTIAL_ARROW
    from l2m.engine.routing import plan_for
    from l2m.engine.streamtask import places, tag
    from l2m.rules.loader import load_text
    from l2m.state.format import STATE_FORMAT
    from l2m.streaming.job import shard_column

    tenant_rules = submit(tmp_path / "rules")
    open_rules, _ = load_text(
        "rules:\n"
        "  - {id: o1, name: o1_total, kind: counter, query: '*', aggregation: count}\n"
        "  - {id: o2, name: o2_total, kind: counter, query: '*', aggregation: count, "
        "account: acme}\n"
        "  - {id: o3, name: o3_total, kind: counter, query: '*', aggregation: count, "
        "account: globex}\n")
    rules = [*tenant_rules, *open_rules]
    ids = [r.id for r in rules] + ["__cut__"]
    partials = pa.RecordBatch.from_pylist(
        [{"rule": i, "series": "1:x"} for i in ids], schema=PARTIAL_ARROW)
    for shards in (2, 8, 64):
        tagged = tag(partials, "v1", places(f"v{shards}", plan_for(rules), shards))
        frame = spark.createDataFrame(tagged.to_pandas())
        got = {row["rule"]: row["shard"] for row in frame.select(
            "rule", shard_column(shards, STATE_FORMAT).alias("shard")).collect()}
        assert {r.id: got[r.id] for r in rules} == \
            {r.id: placement_shard(r, shards) for r in rules}
        assert got["acme/req"] == got["acme/all"] == got["o2"]
        assert tagged.column("place").to_pylist()[-1] is None
        assert 0 <= got["__cut__"] < shards
