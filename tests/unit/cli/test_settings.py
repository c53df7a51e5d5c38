"""The settings flags the commands that run rules over logs share (backfill, explain,
validate --estimate): a job file and a flag for the same setting are refused, and a label
value limit too short to keep anything is refused before any work — one line, code CONFIG."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m.cli import main

ROOT = Path(__file__).resolve().parents[3]
LOG = '{"@timestamp": 1795341600000, "service": "cart"}'


@pytest.mark.parametrize("flags, flag", [
    (["--timestamp-field", "ts"], "--timestamp-field"),
    (["--text-fields", "msg"], "--text-fields"),
    (["--default-fields", "msg", "--timestamp-field", "ts"], "--default-fields and "
                                                             "--timestamp-field"),
])
def test_a_flag_the_job_file_also_sets_is_refused(flags, flag, capsys):
    code = main(["explain", "--rules", str(ROOT / "rules"), "--config",
                 str(ROOT / "topology" / "local.yaml"), "--log", LOG, *flags])
    assert code == 1
    assert capsys.readouterr().err.strip() == (
        f"l2m: error [CONFIG]: {flag}: the job file given with --config sets this "
        "(text_fields, default_fields, timestamp_field); give one or the other")


@pytest.mark.parametrize("command", [
    ["explain", "--rules", str(ROOT / "rules"), "--log", LOG],
    ["validate", str(ROOT / "rules"), "--estimate", str(ROOT / "samples" / "logs.jsonl")],
])
def test_a_label_value_limit_below_the_marker_is_refused(command, capsys):
    assert main([*command, "--max-label-value-length", "3"]) == 1
    assert capsys.readouterr().err.strip() == (
        "l2m: error [CONFIG]: the label value limit must be at least 16 characters, got 3")
