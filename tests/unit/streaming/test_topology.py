"""topology/TOPOLOGY.md is what `l2m topology` prints for topology/local.yaml: rendered from
the code (stage modules found by name, the state format and keys from their constants), never
edited by hand."""

from __future__ import annotations

from pathlib import Path

from l2m.state.format import STATE_FORMAT, STATE_KEY
from tests.support.tools import cli

ROOT = Path(__file__).resolve().parents[3]


def test_topology_md_equals_what_l2m_topology_prints():
    res = cli("topology", "--config", str(ROOT / "topology" / "local.yaml"), cwd=ROOT)
    assert res.returncode == 0, res.stderr
    assert res.stdout == (ROOT / "topology" / "TOPOLOGY.md").read_text(), (
        "run: l2m topology --config topology/local.yaml --write topology/TOPOLOGY.md")


def test_the_document_states_the_current_state_format_and_keys():
    text = (ROOT / "topology" / "TOPOLOGY.md").read_text()
    assert f"format {STATE_FORMAT}" in text
    assert f"hash({', '.join(STATE_KEY)})" in text
    for path in ("l2m/kafka/source.py", "l2m/engine/readtask.py", "l2m/state/processor.py"):
        assert f"`{path}`" in text and (ROOT / path).is_file()
