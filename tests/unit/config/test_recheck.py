"""The job's ``recheck`` (docs/streaming.md, "Ticks"): how often a gauge window without new
logs is looked at again; a minute by default, at most one (live rules keep a rule set's
version for one minute past its windows), at least a second."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m import defaults
from l2m.config.loader import load_config
from l2m.streaming.rulesets import RECHECK_MARGIN_MS
from tests.support.configs import KAFKA, config_error

ROOT = Path(__file__).resolve().parents[3]


def test_the_default_is_a_minute_and_production_yaml_names_it(tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA)
    assert load_config(path).recheck_ms == defaults.RECHECK_MS == 60_000
    assert load_config(ROOT / "topology" / "production.yaml").recheck_ms == 60_000
    assert defaults.RECHECK_MS <= RECHECK_MARGIN_MS


@pytest.mark.parametrize(("text", "ms"), [("5 seconds", 5_000), ("1s", 1_000),
                                          ("1 minute", 60_000)])
def test_a_shorter_recheck_is_taken(tmp_path: Path, text: str, ms: int) -> None:
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA + f"recheck: {text}\n")
    assert load_config(path).recheck_ms == ms


@pytest.mark.parametrize("text", ["2 minutes", "500 ms", "0"])
def test_a_recheck_out_of_range_is_refused_on_its_line(tmp_path: Path, text: str) -> None:
    assert config_error(tmp_path, KAFKA + f"recheck: {text}\n") == (
        "job.yaml:3: recheck: must be between 1 second and 1 minute (live rules keep a rule "
        f"set for one past its windows), got {text}")


def test_a_recheck_that_is_no_duration_is_refused(tmp_path: Path) -> None:
    assert config_error(tmp_path, KAFKA + "recheck: soon\n").startswith(
        "job.yaml:3: recheck: ")
