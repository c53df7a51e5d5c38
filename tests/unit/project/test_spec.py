"""The contract travels with the repository: docs/spec.md holds every section the code and
the pages cite as "SPEC §N", and nothing points outside the clone for it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
CITED = re.compile(r"SPEC §(\d+)(?:[–-](\d+))?")
OUTSIDE = re.compile(r"\.\./shared|shared/SPEC\.md")


def _texts() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("l2m", "tests", "benchmarks"):
        files += sorted((ROOT / folder).rglob("*.py"))
    return [f for f in files if f.name != "test_spec.py"]


def test_every_cited_section_is_in_docs_spec():
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "spec.md")
                                           .read_text(), re.M)}
    assert sections == set(range(1, 10))
    missing = []
    for path in _texts():
        for first, last in CITED.findall(path.read_text(errors="replace")):
            for n in range(int(first), int(last or first) + 1):
                if n not in sections:
                    missing.append(f"{path.relative_to(ROOT)}: SPEC §{n}")
    assert missing == []


def test_nothing_points_outside_the_repository_for_the_contract():
    outside = [str(p.relative_to(ROOT)) for p in _texts()
               if OUTSIDE.search(p.read_text(errors="replace"))]
    assert outside == []
