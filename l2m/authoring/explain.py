"""``l2m explain`` (placeholder: being written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from l2m.config.job import JobConfig
from l2m.rules.model import Rule


def input_line(path: str, number: int) -> bytes:
    """Line ``number`` (1 = the first) of a JSON-lines file."""
    raise NotImplementedError


def explain_command(rules: Sequence[Rule], line: str | bytes, cfg: JobConfig,
                    rule_id: str | None, as_json: bool, out: TextIO) -> int:
    """Explain one log against the rules; the exit code."""
    raise NotImplementedError
