"""Poison-proof input: no log can fail or stall the job, in streaming or backfill. Each hostile
record is either processed or counted (and, in streaming, dead-lettered with its reason); the
good logs around it are counted exactly."""

from __future__ import annotations

import bz2
import gzip
import json
from pathlib import Path
from typing import BinaryIO

import orjson
import pytest

from l2m.batch.backfill import run_backfill
from l2m.errors import InputError
from tests.support.poison import HOSTILE_TIMES, MALFORMED_LINES, PROCESSED, RULES, T0


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


def test_a_failed_backfill_removes_its_partial_output(spark, tmp_path, monkeypatch):
    import l2m.batch.backfill as backfill

    logs = tmp_path / "logs.jsonl"
    logs.write_bytes(orjson.dumps({"@timestamp": T0, "svc": "a"}) + b"\n")

    def broken(out: BinaryIO, lines: list[bytes]) -> None:
        out.write(lines[0])  # the output has begun when the failure comes
        raise RuntimeError("disk full")

    monkeypatch.setattr(backfill, "write_lines", broken)
    out = tmp_path / "out.jsonl"
    with pytest.raises(Exception, match="disk full"):
        run_backfill(spark, RULES, [str(logs)], out, progress=False)
    assert not out.exists() and not (tmp_path / "out.jsonl.partial").exists()


