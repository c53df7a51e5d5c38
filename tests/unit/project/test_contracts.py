"""Every stage states its contract: the docstring of each module of the stage packages says
what it takes (``Input``) and what it gives (``Output``) — docs/architecture.md promises it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
STAGES = ("query", "rules", "config", "engine", "state", "kafka", "batch", "streaming")


@pytest.mark.parametrize("package", STAGES)
def test_each_stage_module_states_its_input_and_output(package):
    missing = []
    for path in sorted((ROOT / "l2m" / package).glob("*.py")):
        if path.name == "__init__.py":
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        if "Input" not in doc or "Output" not in doc:
            missing.append(str(path.relative_to(ROOT)))
    assert missing == []
