"""`l2m backfill` end to end on a hand-checked corpus: every aggregation, histogram buckets,
windows across minute boundaries, ISO and epoch timestamps with offsets, malformed lines."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from l2m.batch.backfill import run_backfill
from l2m.rules.loader import load_rules

ROOT = Path(__file__).resolve().parents[2]
T0 = 1795341600000  # 2026-11-22T10:00:00Z

PART1 = [
    '{"@timestamp":"2026-11-22T10:00:10Z","service":"web","status":500,"latency":0.25,'
    '"account":"acme"}',
    '{"@timestamp":1795341630500,"service":"web","status":"502","latency":"0.75",'
    '"account":"acme"}',
    '{"@timestamp":"2026-11-22T11:00:59.999+01:00","service":"api","status":200,"latency":3,'
    '"account":"globex"}',
    '{"@timestamp":"2026-11-22T05:01:00-05:00","service":"web","status":503,"latency":1.5,'
    '"account":"acme"}',
    '{"service": "web"',
]
PART2 = [
    '{"@timestamp":"2026-11-22T10:01:30.25Z","status":500,"latency":"n/a","account":"acme"}',
    '{"service":"web","status":500}',
    "[1, 2]",
    "",
    '{"@timestamp":"2026-11-22T10:02:00Z","service":"api","status":404,"latency":7,'
    '"account":"globex"}',
]

RULES = """\
rules:
  - id: errors
    name: errors_total
    kind: counter
    query: "status:[500 TO 599]"
    aggregation: count
    group_by: [service]
    labels: {env: prod}
    target_account: metrics
  - id: latency-sum
    name: latency_seconds_total
    kind: counter
    query: "*"
    aggregation: sum
    field: latency
    account: acme
  - id: latency-avg
    name: latency_avg
    kind: gauge
    query: "*"
    aggregation: avg
    field: latency
    group_by: [service]
  - id: latency-min
    name: latency_min
    kind: gauge
    query: "service:web"
    aggregation: min
    field: latency
  - id: latency-max
    name: latency_max
    kind: gauge
    query: "status:>=500"
    aggregation: max
    field: latency
  - id: latency-hist
    name: latency
    kind: counter
    query: "_exists_:status"
    aggregation: histogram
    field: latency
    buckets: [0.5, 1, 5]
  - id: web-latency-hist
    name: web_latency
    kind: gauge
    query: "service:web"
    aggregation: histogram
    field: latency
    buckets: [1]
  - id: off
    name: never_total
    kind: counter
    query: "*"
    aggregation: count
    enabled: false
  - id: logs-per-minute
    name: logs
    kind: gauge
    query: "*"
    aggregation: count
"""


def s(name, kind, labels, value, ts, rule, account=None):
    return {"name": name, "kind": kind, "labels": labels, "value": value, "timestamp": ts,
            "account": account, "rule": rule}


EXPECTED = [
    s("errors_total", "counter", {"env": "prod"}, 1.0, T0 + 90250, "errors", "metrics"),
    s("errors_total", "counter", {"env": "prod", "service": "web"}, 3.0, T0 + 60000, "errors",
      "metrics"),
    s("latency_seconds_total", "counter", {}, 2.5, T0 + 60000, "latency-sum"),
    s("latency_avg", "gauge", {"service": "api"}, 3.0, T0, "latency-avg"),
    s("latency_avg", "gauge", {"service": "api"}, 7.0, T0 + 120000, "latency-avg"),
    s("latency_avg", "gauge", {"service": "web"}, 0.5, T0, "latency-avg"),
    s("latency_avg", "gauge", {"service": "web"}, 1.5, T0 + 60000, "latency-avg"),
    s("latency_min", "gauge", {}, 0.25, T0, "latency-min"),
    s("latency_min", "gauge", {}, 1.5, T0 + 60000, "latency-min"),
    s("latency_max", "gauge", {}, 0.75, T0, "latency-max"),
    s("latency_max", "gauge", {}, 1.5, T0 + 60000, "latency-max"),
    s("latency_bucket", "counter", {"le": "0.5"}, 1.0, T0 + 120000, "latency-hist"),
    s("latency_bucket", "counter", {"le": "1"}, 2.0, T0 + 120000, "latency-hist"),
    s("latency_bucket", "counter", {"le": "5"}, 4.0, T0 + 120000, "latency-hist"),
    s("latency_bucket", "counter", {"le": "+Inf"}, 5.0, T0 + 120000, "latency-hist"),
    s("latency_sum", "counter", {}, 12.5, T0 + 120000, "latency-hist"),
    s("latency_count", "counter", {}, 5.0, T0 + 120000, "latency-hist"),
    s("web_latency_bucket", "gauge", {"le": "1"}, 2.0, T0, "web-latency-hist"),
    s("web_latency_bucket", "gauge", {"le": "+Inf"}, 2.0, T0, "web-latency-hist"),
    s("web_latency_sum", "gauge", {}, 1.0, T0, "web-latency-hist"),
    s("web_latency_count", "gauge", {}, 2.0, T0, "web-latency-hist"),
    s("web_latency_bucket", "gauge", {"le": "1"}, 0.0, T0 + 60000, "web-latency-hist"),
    s("web_latency_bucket", "gauge", {"le": "+Inf"}, 1.0, T0 + 60000, "web-latency-hist"),
    s("web_latency_sum", "gauge", {}, 1.5, T0 + 60000, "web-latency-hist"),
    s("web_latency_count", "gauge", {}, 1.0, T0 + 60000, "web-latency-hist"),
    s("logs", "gauge", {}, 3.0, T0, "logs-per-minute"),
    s("logs", "gauge", {}, 2.0, T0 + 60000, "logs-per-minute"),
    s("logs", "gauge", {}, 1.0, T0 + 120000, "logs-per-minute"),
]


@pytest.fixture
def corpus(tmp_path: Path) -> tuple[Path, Path]:
    logs = tmp_path / "logs"
    (logs / "day2").mkdir(parents=True)
    (logs / "part1.jsonl").write_text("\n".join(PART1) + "\n")
    with gzip.open(logs / "day2" / "part2.jsonl.gz", "wt") as f:
        f.write("\n".join(PART2) + "\n")
    rules = tmp_path / "rules.yaml"
    rules.write_text(RULES)
    return rules, logs


def test_backfill_hand_checked_corpus(spark, corpus, tmp_path):
    rules_path, logs = corpus
    out = tmp_path / "out" / "samples.jsonl"
    summary = run_backfill(spark, load_rules([rules_path]).rules, [str(logs)], out,
                           progress=False)
    samples = [json.loads(line) for line in out.read_text().splitlines()]
    assert samples == EXPECTED
    assert (summary.logs, summary.parsed, summary.malformed, summary.no_timestamp,
            summary.blank_lines, summary.samples) == (9, 6, 2, 1, 1, len(EXPECTED))
    assert summary.matches == {
        "errors": 4, "latency-sum": 4, "latency-avg": 6, "latency-min": 3, "latency-max": 4,
        "latency-hist": 6, "web-latency-hist": 3, "logs-per-minute": 6,
    }
    assert not (tmp_path / "out" / "samples.jsonl.partial").exists()


def test_backfill_with_no_matching_logs_writes_an_empty_file(spark, tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text(RULES)
    logs = tmp_path / "l.jsonl"
    logs.write_text('{"@timestamp": 1, "nothing": "here"}\n')
    out = tmp_path / "o.jsonl"
    summary = run_backfill(spark, load_rules([rules]).rules, [str(logs)], out, progress=False)
    # only the match-everything rules see it, and they have no value to aggregate
    assert [json.loads(x)["rule"] for x in out.read_text().splitlines()] == ["logs-per-minute"]
    assert summary.logs == 1


def test_cli_validate_and_backfill(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        rules:
          - id: web-5xx
            name: http_errors_total
            kind: counter
            query: "status:[500 TO 599] AND (service:web"
            aggregation: count
        """))
    cli = [sys.executable, "-m", "l2m.cli"]
    out = tmp_path / "samples.jsonl"
    # The backfill's JVM starts while the validations run (they are independent).
    backfill = _started([*cli, "backfill", "--rules", str(ROOT / "rules"), "--input",
                         str(ROOT / "samples"), "--output", str(out), "--master", "local[2]"])
    res = subprocess.run([*cli, "validate", str(bad)], capture_output=True, text=True)
    assert res.returncode == 1
    assert f"{bad}:5:37: rule 'web-5xx': query: unbalanced '(' [QUERY_SYNTAX]" in res.stderr
    res = subprocess.run([*cli, "validate", str(ROOT / "rules")], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    res = _finished(backfill)
    assert res.returncode == 0, res.stderr
    assert "logs read:          1500" in res.stderr
    lines = out.read_text().splitlines()
    assert f"wrote {len(lines)} samples" in res.stderr
    assert {json.loads(x)["rule"] for x in lines} >= {"http-requests", "payment-amount"}


def _started(command: list[str]) -> subprocess.Popen[str]:
    """``command`` running in the background, its output captured."""
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finished(process: subprocess.Popen[str]) -> subprocess.CompletedProcess[str]:
    """A :func:`_started` command's end (5 minutes at most), as ``subprocess.run`` gives it."""
    try:
        stdout, stderr = process.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        process.kill()
        raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def test_sums_are_exact_and_order_independent(spark, tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text(textwrap.dedent("""\
        rules:
          - {id: s, name: s, kind: counter, query: "*", aggregation: sum, field: v,
             group_by: [g]}
          - {id: a, name: a, kind: gauge, query: "*", aggregation: avg, field: v,
             group_by: [g]}
        """))
    logs = tmp_path / "l.jsonl"
    rows = [("small", 0.1), ("small", 0.2), ("huge", 1e30), ("huge", 1.0)]
    logs.write_text("".join(json.dumps({"@timestamp": 0, "g": g, "v": v}) + "\n"
                            for g, v in rows))
    out = tmp_path / "o.jsonl"
    run_backfill(spark, load_rules([rules]).rules, [str(logs)], out, progress=False)
    values = {(x["rule"], x["labels"]["g"]): x["value"]
              for x in map(json.loads, out.read_text().splitlines())}
    # 0.1 + 0.2 is 0.30000000000000004 in doubles; the exact decimal sum is 0.3
    assert values == {("s", "huge"): 1e30, ("s", "small"): 0.3,
                      ("a", "huge"): 5e29, ("a", "small"): 0.15}


LIMIT_RULES = """\
rules:
  - {id: by-service, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
  - {id: peak, name: peak_ms, kind: gauge, query: "*", aggregation: max, field: ms,
     group_by: [service, level]}
"""


def test_backfill_cuts_long_label_values_and_counts_the_cuts(spark, tmp_path):
    """Issue 20: a 1.1 MB group-by value is cut to the limit with a marker (the log still
    counts), the cuts are counted per rule in the summary, and the limit is an option."""
    from l2m.rules.loader import load_text

    rules, _ = load_text(LIMIT_RULES)
    logs = tmp_path / "logs.jsonl"
    rows = [{"@timestamp": T0 + i, "service": "web", "level": "info", "ms": i}
            for i in range(5)]
    rows += [{"@timestamp": T0 + 10, "service": "s" * 1_100_000, "level": "info", "ms": 50},
             {"@timestamp": T0 + 11, "service": "s" * 2_000, "level": "l" * 5000, "ms": 7}]
    logs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "out.jsonl"
    summary = run_backfill(spark, rules, [str(logs)], out, progress=False)
    samples = [json.loads(x) for x in out.read_text().splitlines()]
    cut_service = "s" * 1018 + "…(cut)"
    counts = {s["labels"]["service"]: s["value"] for s in samples if s["rule"] == "by-service"}
    assert counts == {"web": 5.0, cut_service: 2.0}
    peaks = {tuple(sorted(s["labels"].items())): s["value"] for s in samples
             if s["rule"] == "peak"}
    assert peaks[(("level", "info"), ("service", cut_service))] == 50.0
    assert peaks[(("level", "l" * 1018 + "…(cut)"), ("service", cut_service))] == 7.0
    assert all(len(v) <= 1024 for s in samples for v in s["labels"].values())
    assert summary.cut == {"by-service": 2, "peak": 3}
    assert "label values cut:   5 (longer than 1024 characters)" in summary.render()

    summary = run_backfill(spark, rules, [str(logs)], out, progress=False,
                           max_label_value_length=5_000)
    assert summary.cut == {"by-service": 1, "peak": 1}
    labels = {v for x in out.read_text().splitlines() for v in json.loads(x)["labels"].values()}
    assert "s" * 2_000 in labels and "l" * 5_000 in labels and "s" * 4994 + "…(cut)" in labels


def test_cli_backfill_refuses_a_label_limit_below_16(tmp_path):
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "backfill", "--rules",
                          str(ROOT / "rules"), "--input", str(ROOT / "samples"), "--output",
                          str(tmp_path / "o.jsonl"), "--max-label-value-length", "8"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "l2m: error [CONFIG]: the label value limit must be at least 16" in res.stderr


def test_cli_backfill_and_validate_take_the_job_s_caps(tmp_path):
    rules = tmp_path / "r.yaml"
    rules.write_text("rules:\n  - {id: by-id, name: req_total, kind: counter, query: '*', "
                     "aggregation: count, group_by: [id], account: acme}\n")
    logs = tmp_path / "l.jsonl"
    logs.write_text("".join(json.dumps({"@timestamp": 0, "account": "acme", "id": f"r{i}"})
                            + "\n" for i in range(5)))
    job = tmp_path / "job.yaml"
    job.write_text("kafka: {bootstrap.servers: 'x:1'}\nlimits:\n  max_series_per_rule: 100\n"
                   "  accounts:\n    acme: {max_series_per_rule: 2}\n")
    out, flagged = tmp_path / "o.jsonl", tmp_path / "flagged.jsonl"
    cli = [sys.executable, "-m", "l2m.cli"]
    # Both backfills at once (each its own JVM and output; they share nothing).
    with_config = _started([*cli, "backfill", "--rules", str(rules), "--input", str(logs),
                            "--output", str(out), "--config", str(job), "--master", "local[1]"])
    with_flags = _started([*cli, "backfill", "--rules", str(rules), "--input", str(logs),
                           "--output", str(flagged), "--master", "local[1]",
                           "--max-series-per-rule", "1", "--quiet"])
    res = _finished(with_config)
    assert res.returncode == 0, res.stderr
    assert "series refused:     3 logs" in res.stderr and "  by-id (rule): 3" in res.stderr
    values = {tuple(sorted(s["labels"].items())): s["value"]
              for s in map(json.loads, out.read_text().splitlines())}
    assert values == {(("id", "r0"),): 1.0, (("id", "r1"),): 1.0,
                      (("l2m_overflow", "true"),): 3.0}
    # without --config the flags set the caps (default 10,000 per rule)
    res = _finished(with_flags)
    assert res.returncode == 0, res.stderr
    assert len(flagged.read_text().splitlines()) == 2

    rules.write_text(rules.read_text().replace("account: acme}", "account: acme, "
                                               "max_series: 200000}"))
    res = subprocess.run([*cli, "validate", str(rules), "--config", str(job)],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 1
    assert "max_series 200000 is above account 'acme''s cap of 100000 series" in res.stderr
    assert "[MAX_SERIES_ABOVE_ACCOUNT]" in res.stderr


def test_the_packs_partition_keys_are_where_spark_s_hash_partitioning_sends_them(spark):
    # l2m.batch.packs computes Spark's Murmur3 of an int itself: checked against Spark's
    # hash() and against where repartition(n, key) really puts each key.
    from pyspark.sql import functions as F

    from l2m.batch.packs import _hash_int, partition_keys

    hashed = spark.range(-2000, 2000).selectExpr("cast(id as int) k", "hash(cast(id as int)) h")
    assert all(_hash_int(r.k) == r.h for r in hashed.collect())
    for n in (2, 3, 4, 8):
        keys = partition_keys(n)
        placed = spark.createDataFrame([(k,) for k in keys], "key int").repartition(n, "key") \
            .select("key", F.spark_partition_id().alias("p")).collect()
        assert sorted((r.p, r.key) for r in placed) == list(enumerate(keys))


def test_backfill_summary_per_rule_is_run_locals(spark, tmp_path):
    """The per-rule cost (issue 55 item 3) — series, the most in one window, label values,
    refusals — is counted on the driver over every sample, so Spark's read and last-stage
    tasks (several windows, a capped unique id cut early by the read tasks) give exactly
    what one process gives."""
    from l2m.batch.local import RunSettings, file_lines, run_local
    from l2m.policy.limits import Limits, SeriesLimits

    rules = tmp_path / "rules.yaml"
    rules.write_text(textwrap.dedent("""\
        rules:
          - {id: ids, name: ids_total, kind: counter, query: '*', aggregation: count,
             group_by: [request_id], max_series: 40}
          - {id: ids-g, name: ids_g, kind: gauge, query: '*', aggregation: count,
             group_by: [request_id, service], max_series: 25}
          - {id: lat, name: lat_ms, kind: gauge, query: '*', aggregation: histogram,
             field: ms, buckets: [10, 100], group_by: [service]}
          - {id: users, name: users_total, kind: counter, query: 'service:web',
             aggregation: count, group_by: [user]}
        """))
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps({
        "@timestamp": T0 + 997 * i, "request_id": f"r{i}", "service": "web api db"[
            (i % 3) * 4:(i % 3) * 4 + 3].strip(), "user": f"u{i % 37}", "ms": i % 250})
        + "\n" for i in range(3_000)))
    loaded = load_rules([rules]).rules
    limits = Limits(SeriesLimits(per_rule=1_000))
    summary = run_backfill(spark, loaded, [str(logs)], tmp_path / "out.jsonl", progress=False,
                           limits=limits)
    local = run_local(RunSettings(limits=limits).routing(loaded),
                      file_lines([str(logs)])).summary
    fields = ("matches", "samples_per_rule", "series_created", "window_series", "label_values",
              "labelled", "refused")
    assert {f: getattr(summary, f) for f in fields} == {f: getattr(local, f) for f in fields}
    assert summary.render_rules() == local.render_rules()
    # 50 windows of 60 logs: ids-g keeps 25 per window (1,250 in all) and its one overflow
    # series; ids keeps 40 and its overflow series
    assert summary.series_created == {"ids": 41, "ids-g": 1_251, "lat": 3, "users": 37}
    assert summary.window_series == {"ids-g": 26, "lat": 3}
    assert summary.refused == {"ids (rule)": 2_960, "ids-g (rule)": 1_750}
