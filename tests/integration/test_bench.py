"""The benchmark harness's quick profile on tiny data, so the harness cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def test_quick_profile_writes_results_targets_and_plots(tmp_path: Path):
    res = subprocess.run([sys.executable, "-m", "benchmarks", "--quick", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=600,
                         cwd=Path(__file__).resolve().parents[2])
    assert res.returncode == 0, res.stderr[-3000:]
    result = json.loads((tmp_path / "quick.json").read_text())
    assert result["machine"]["cpus"] >= 1
    assert [d["case"] for d in result["drain"]] == [
        "uniform, skew-aware", "uniform, per-partition", "hot 70%, skew-aware",
        "hot 70%, per-partition"]
    assert result["peer"]["logs_per_s"] > 0 and sum(result["peer"]["processed"]) > 0
    assert all(d["logs_per_s"] > 0 and d["plans"] for d in result["drain"])
    names = [t["name"] for t in result["targets"]]
    assert "records per task max/mean, hot partition, skew-aware" in names
    hot = next(d for d in result["drain"] if d["case"] == "hot 70%, skew-aware")
    assert hot["records_per_task_max_over_mean"] <= 1.25
    scale = result["rule_scale"]
    assert [d["rules"] for d in scale["drain"]] == [20, 200]
    assert all(d["logs_per_s"] > 0 for d in scale["drain"])
    assert scale["validate_s"] > 0 and scale["backfill"]["many_samples"] > 0
    assert "validate 200 rules, s" in names
    for png in ("throughput.png", "records_per_task.png", "rules.png"):
        assert (tmp_path / f"quick-{png}").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert not (tmp_path / png).exists()  # the full profile's plots are left alone
    assert all(d["runs"] and d["logs_per_s"] == max(d["runs"]) for d in result["drain"])
    assert "# Benchmark results" in (tmp_path / "QUICK.md").read_text()
