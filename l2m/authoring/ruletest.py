"""``l2m test`` (placeholder: being written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO


def run_test_files(paths: Sequence[str], junit: str | None, only: str | None, verbose: bool,
                   out: TextIO) -> int:
    """Run the test files under ``paths``; the exit code (1 on any failure)."""
    raise NotImplementedError
