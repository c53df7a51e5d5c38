"""How logs spread over a topic's partitions — uniform, one hot partition, Zipf — for
``l2m load`` and the benchmark harness (benchmarks/load.py imports it from here).

Input: a skew as written on the command line (``uniform``, ``hot:0.7``, ``zipf:1.2``) and a
partition count. Output: each partition's share of the logs (:meth:`Skew.weights`), exact
counts for ``n`` logs (:func:`partition_counts`), and an evenly interleaved order of
partitions that follows those counts (:func:`schedule`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from l2m.errors import ConfigError

SKEW_SYNTAX = "uniform, hot:SHARE (0 < SHARE < 1) or zipf:S (0 < S <= 100)"


@dataclass(frozen=True)
class Skew:
    """How records spread over partitions: ``uniform``; ``hot`` — ``hot_share`` of them on
    partition 0, the rest evenly on the others; ``zipf`` — partition k (from 1) weighs
    1/k^``zipf_s``."""

    mode: str = "uniform"  # uniform | hot | zipf
    hot_share: float = 0.7  # hot: share of records on partition 0
    zipf_s: float = 1.2  # zipf: exponent

    def weights(self, partitions: int) -> list[float]:
        """Each partition's share of the records (they add up to 1)."""
        if partitions < 1:
            raise ValueError(f"partitions must be at least 1, got {partitions}")
        if self.mode == "uniform" or partitions == 1:
            return [1.0 / partitions] * partitions
        if self.mode == "hot":
            rest = (1.0 - self.hot_share) / (partitions - 1)
            return [self.hot_share] + [rest] * (partitions - 1)
        if self.mode == "zipf":
            raw = [1.0 / (k ** self.zipf_s) for k in range(1, partitions + 1)]
            total = sum(raw)
            return [w / total for w in raw]
        raise ValueError(f"unknown skew mode {self.mode!r}")

    @property
    def label(self) -> str:
        """A short human name: ``uniform``, ``hot 70%``, ``zipf s=1.2``."""
        if self.mode == "hot":
            return f"hot {self.hot_share:.0%}"
        if self.mode == "zipf":
            return f"zipf s={self.zipf_s:g}"
        return "uniform"

    @property
    def text(self) -> str:
        """The command-line form :func:`parse_skew` reads back."""
        if self.mode == "hot":
            return f"hot:{self.hot_share:g}"
        if self.mode == "zipf":
            return f"zipf:{self.zipf_s:g}"
        return "uniform"


def parse_skew(text: str) -> Skew:
    """``uniform`` | ``hot:SHARE`` (0 < SHARE < 1) | ``zipf:S`` (0 < S ≤ 100) → :class:`Skew`;
    anything else a :class:`~l2m.errors.ConfigError` naming the accepted forms."""
    mode, sep, value = text.strip().partition(":")
    mode = mode.strip().lower()
    if mode == "uniform" and not sep:
        return Skew()
    if mode in ("hot", "zipf") and sep:
        try:
            number = float(value)
        except ValueError:
            number = math.nan
        if mode == "hot" and 0 < number < 1:
            return Skew("hot", hot_share=number)
        if mode == "zipf" and 0 < number <= 100:
            return Skew("zipf", zipf_s=number)
    raise ConfigError(f"--skew: expected {SKEW_SYNTAX}, got {text!r}")


def partition_counts(n: int, weights: Sequence[float]) -> list[int]:
    """Exact record counts per partition for ``n`` records (largest remainders)."""
    raw = [n * w for w in weights]
    counts = [int(x) for x in raw]
    order = sorted(range(len(raw)), key=lambda i: raw[i] - counts[i], reverse=True)
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


def schedule(weights: Sequence[float], length: int) -> list[int]:
    """``length`` partition numbers, each partition's as many as :func:`partition_counts`
    gives it, spread evenly (a partition with count c at positions near (k + ½)/c): cycled
    through, any stretch of the producer's output follows the skew, with no run of one
    partition a consumer would see as a burst."""
    counts = partition_counts(length, weights)
    slots = sorted(((k + 0.5) / c, p) for p, c in enumerate(counts) for k in range(c))
    return [p for _, p in slots]
