"""The benchmark harness's smoke profile (every scenario once, on hundreds of logs, one-second
triggers), so the harness cannot rot. Its figures are not looked at: the quick and full
profiles (``l2m bench --quick``, ``l2m bench``) measure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_smoke_profile_writes_results_targets_and_plots(tmp_path: Path):
    """``l2m bench --smoke`` from some working directory, no --out: the results land in
    ./bench-results there, not in the source tree; its figures are not graded."""
    committed = ROOT / "benchmarks" / "results"
    before = {p.name: p.stat().st_mtime_ns for p in committed.iterdir()}
    res = subprocess.run([sys.executable, "-m", "l2m.cli", "bench", "--smoke"],
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    assert {p.name: p.stat().st_mtime_ns for p in committed.iterdir()} == before
    out = tmp_path / "bench-results"
    assert f"results in {out}" in res.stdout
    result = json.loads((out / "smoke.json").read_text())
    assert result["profile"] == "smoke"
    assert result["machine"]["cpus"] >= 1
    # Every scenario ran, the ones in processes of their own included.
    assert set(result["phases_s"]) == {
        "limit", "session", "drain", "latency", "recovery", "rules",
        "state, expiry, rules_100k, churn", "remote_write", "live_rules",
        "cardinality_backfill, once", "rollout", "peer"}
    assert [d["case"] for d in result["drain"]] == [
        "uniform, skew-aware", "uniform, per-partition", "hot 70%, skew-aware",
        "hot 70%, per-partition"]
    assert result["peer"]["logs_per_s"] > 0 and sum(result["peer"]["processed"]) > 0
    assert all(d["logs_per_s"] > 0 and d["plans"] for d in result["drain"])
    names = [t["name"] for t in result["targets"]]
    assert "records per task max/mean, hot partition, skew-aware" in names
    hot = next(d for d in result["drain"] if d["case"] == "hot 70%, skew-aware")
    assert hot["records_per_task_max_over_mean"] <= 1.25
    # Latency: a rate for a few seconds (under load, no sample may fall after the warm-up).
    assert result["latency"]["produced"] > 0 and isinstance(result["latency"]["cdf"], list)
    assert result["recovery"]["state_keys"] > 0 and result["recovery"]["first_sample_s"] > 0
    scale = result["rule_scale"]
    assert [d["rules"] for d in scale["drain"]] == [20, 50]
    assert all(d["logs_per_s"] > 0 for d in scale["drain"])
    assert scale["validate_s"] > 0 and scale["backfill"]["many_samples"] > 0
    assert "validate 50 rules, s" in names
    issue21 = result["issue21"]
    # Each of the 2,000 logs with ids opens a series of its own (its request_id).
    assert issue21["state"]["levels"][-1]["live_series"] > 2_000
    assert issue21["state"]["restart_first_sample_s"] > 0
    assert issue21["expiry"]["state_rows_after"] < issue21["expiry"]["state_rows_before"]
    assert [d["rules"] for d in issue21["rules_100k"]["drain"]] == [20, 60]
    assert issue21["rules_100k"]["tenant_dirs"] and issue21["rules_100k"]["validate_s"] > 0
    churn = issue21["churn"]["modes"]
    # without caps every series the burst's logs offered was counted new, exactly
    assert churn["uncapped"]["offered_made"] and churn["uncapped"]["new_series"] > 2_000
    assert issue21["cardinality_backfill"]["cardinality_rules"]["samples"] > 0
    assert 4_000 <= issue21["once"]["logs"] <= 4_004 and issue21["once"]["whole_logs_per_s"] > 0
    assert issue21["once"]["steady_logs_per_s"]  # micro-batches of 2,000: a second one
    # the same backlog read again with the source as shipped: one batch, every log
    shipped = issue21["once"]["shipped"]
    assert len(shipped["batches"]) == 1 and shipped["logs"] == issue21["once"]["logs"]
    assert shipped["runs_s"] == [shipped["whole_s"]]  # one round in the smoke profile
    # issue 58's second corpus: two micro-batches of 500, no shipped plan in the smoke profile
    varied = issue21["once"]["varied"]
    assert varied["corpus"] == "varied" and varied["rules"] == "rules_text.yaml"
    assert 1_000 <= varied["logs"] <= 1_004 and varied["steady_logs_per_s"]
    assert "shipped" not in varied and varied["ceiling"]["per_s"] > 0
    assert any(n.startswith("varied corpus (rules_text.yaml), 1,000 logs: steady") for n in names)
    assert result["limit"]["consume_parse"]["per_s"] > 0
    remote = result["remote_write"]
    # 100 series over 2 batches; delivery adds a 0 before each new series.
    assert remote["kafka_sink"]["samples"] == 200
    assert "remote_write_prometheus" in remote, \
        "no Prometheus on this machine: the remote-write arm was skipped (run tools/prometheus.sh)"
    assert remote["remote_write_null"]["samples"] == remote["remote_write_prometheus"][
        "samples"] == 300
    assert remote["remote_write_null"]["bytes_per_sample"] > 0
    assert remote["drain"]["requests"] > 0 and remote["drain"]["ratio"] > 0
    assert "drain with l2m deliver running beside it / without (medians)" in names
    live = result["live_rules"]
    assert [a["rules_loaded"] for a in live["adds"]] == [20, 71]
    assert all(a["seconds"] and a["seconds"] > 0 for a in live["adds"])
    assert [r["reload"] for r in live["reloads"]] == ["21 → 71 rules", "72 → 22 rules"]
    assert len(live["rss_after_round_trips_mib"]) == 1
    assert "validate 60 rules (tenant folders), s" in names
    # One roll-out: the old process stopped gracefully on SIGTERM, the new rule came out.
    rollout = result["rollout"]
    assert [r["exit_code"] for r in rollout["rollouts"]] == [0]
    assert rollout["median_gap_s"] > 0 and rollout["trigger"] == "1 second"
    for png in ("throughput.png", "records_per_task.png", "rules.png", "state.png",
                "latency_cdf.png", "rollout.png"):
        assert (out / f"smoke-{png}").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not (out / png).exists()  # the full profile's plots are left alone
    assert all(d["runs"] and d["logs_per_s"] == max(d["runs"]) for d in result["drain"])
    assert "# Benchmark results" in (out / "SMOKE.md").read_text()
    # Not graded: the targets are the full profile's, and say so.
    assert all(t["met"] is None and t["goal"] == "n/a (smoke)" and t["full_goal"]
               for t in result["targets"])
    assert "met False" not in res.stdout and "met True" not in res.stdout
    assert "smoke test" in res.stdout and "not graded" in res.stdout
    smoke_md = (out / "SMOKE.md").read_text()
    assert "smoke test" in smoke_md and "**no**" not in smoke_md and "| yes |" not in smoke_md
    # The peer ran on its own packages (benchmarks/peer_env.py: Quix Streams pins an older
    # confluent-kafka than l2m's), and every one of its processes ended well.
    versions = result["peer"]["versions"]
    assert versions["quixstreams"] and versions["confluent-kafka"]
    assert result["peer"]["exit_codes"] == [0] * result["peer"]["processes"]
