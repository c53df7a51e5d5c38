"""``l2m validate --estimate`` (placeholder: being written)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TextIO

from l2m.config.job import JobConfig
from l2m.rules.model import Rule


def estimate_command(rules: Sequence[Rule], inputs: Sequence[str], cfg: JobConfig,
                     out: TextIO) -> int:
    """Each rule's cost over a sample of logs; the exit code."""
    raise NotImplementedError
