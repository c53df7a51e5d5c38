"""CHANGELOG.md is kept with the code: its newest entry is the package's version, and each
entry calls out the state format and configuration changes (or says there are none)."""

from __future__ import annotations

import re
from pathlib import Path

import l2m
from l2m.state.format import READABLE, STATE_FORMAT

ROOT = Path(__file__).resolve().parents[3]


def entries() -> list[tuple[str, str]]:
    text = (ROOT / "CHANGELOG.md").read_text()
    parts = re.split(r"(?m)^## ", text)[1:]
    return [(part.split()[0], part) for part in parts]


def test_the_newest_entry_is_this_version():
    assert entries()[0][0] == l2m.__version__


def test_the_newest_entry_states_the_state_format_and_configuration():
    newest = entries()[0][1]
    assert "**State format:**" in newest and "**Configuration:**" in newest
    assert f"format {STATE_FORMAT} is written" in newest
    readable = list(map(str, READABLE))
    assert f"formats {', '.join(readable[:-1])} and {readable[-1]} are read" in newest
