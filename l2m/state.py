"""The state stage: one ``applyInPandasWithState`` for counters and gauges alike.

State is keyed by (rule, shard, window): counters by (rule, shard) with window
:data:`CUMULATIVE` — many series per Python call — and gauges by (rule, shard, one-minute
window), so a batch touches only the windows its logs fall in. The value is one opaque
blob per key, so the state schema never depends on the rules. Running both in one query
means each log is read, parsed and routed once (Spark's own window aggregation cannot share a
query with ``applyInPandasWithState`` in update mode, hence gauges are ours too).

State outlives releases: every blob is orjson of a mapping with ``"v"``, the format version
(:data:`STATE_FORMAT`). :func:`load_blob` reads every version l2m has written since versions
exist (``tests/golden/`` pins each) and refuses anything else with ``[STATE_FORMAT]``, naming
the version it found and what to do. The checkpoint folder carries the same version in
``l2m.json`` (:func:`check_checkpoint`), so a wrong checkpoint is refused before Spark starts.

Layouts (version 1):

* counter key: ``{"v": 1, "sig": signature, "series": {series: [last_seen_ms, {le:
  partial}]}}``; the input-status key (rule ``__status__``) adds ``"late": partial`` — logs
  that came after the watermark had closed their window;
* gauge key: ``{"v": 1, "sig": signature, "series": {series: {le: partial}}}``;
* partial: ``[matches, n, sum, exact_sum (decimal string or null), min, max, ts]``; a
  non-finite float is stored as ``"+Inf"``, ``"-Inf"`` or ``"NaN"``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming.state import GroupState

from l2m.counters import CounterState
from l2m.errors import StateFormatError
from l2m.gauges import GaugeState
from l2m.statefmt import STATE_FORMAT, UPGRADE_HINT

CUMULATIVE = -1  # the window of every counter key
OUTPUT_SCHEMA = "key string, value string"
STATE_SCHEMA = "blob binary"


@dataclass
class Reduction:
    """What the read tasks' pre-aggregation did, summed over the query's life: match rows
    in (one per log and matching rule, plus one status row per log) → partials out, and
    (when set) the match rows per rule — the logs each rule matched (:class:`l2m.tally.Sums`).
    Counted where the partials arrive (accumulators cannot be used in a data source's
    reader): each partial carries the rows it stands for in ``matches``."""

    rows_in: Accumulator[int]
    rows_out: Accumulator[int]
    matches: Accumulator[dict[Any, float]] | None = None


@dataclass
class MetricState:
    """The state function: counter keys to :class:`CounterState`, window keys to
    :class:`GaugeState`; the partials it receives counted into ``reduction``."""

    counters: CounterState
    gauges: GaugeState
    reduction: Reduction | None = None

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        if self.reduction is not None:
            frames = self._counted(key[0], frames, self.reduction)
        if key[2] == CUMULATIVE:
            return self.counters(key, frames, state)
        return self.gauges(key, frames, state)

    @staticmethod
    def _counted(rule: str, frames: Iterator[pd.DataFrame],
                 reduction: Reduction) -> Iterator[pd.DataFrame]:
        rows = matches = 0
        for frame in frames:
            rows += len(frame)
            matches += int(frame["matches"].sum())
            yield frame
        if rows:
            reduction.rows_in.add(matches)
            reduction.rows_out.add(rows)
            if reduction.matches is not None:
                reduction.matches.add({("matches", rule): matches})


CHECKPOINT_MARKER = "l2m.json"


def check_checkpoint(checkpoint: str, query_dir: str) -> None:
    """Refuse a checkpoint this l2m cannot continue, before Spark starts; mark a new one.

    A checkpoint with a query folder but no ``l2m.json`` was written before state versions
    (or by the two-query layout); one whose version is not :data:`STATE_FORMAT` by another
    release. Only local (and mounted) paths are checked; object-store URIs rely on the
    blobs' own versions."""
    if "://" in checkpoint and not checkpoint.startswith("file://"):
        return
    root = Path(checkpoint.removeprefix("file://"))
    marker = root / CHECKPOINT_MARKER
    if marker.exists():
        try:
            found = json.loads(marker.read_text()).get("state_format")
        except (OSError, ValueError, AttributeError):
            found = "unreadable"
        if found != STATE_FORMAT:
            raise StateFormatError(
                f"checkpoint {checkpoint} holds state format {found}; this l2m reads format "
                f"{STATE_FORMAT}. {UPGRADE_HINT}")
        return
    started = (root / query_dir / "offsets").is_dir() or (root / "counters").is_dir() \
        or (root / "gauges").is_dir()
    if started:
        raise StateFormatError(
            f"checkpoint {checkpoint} was written by an l2m before state format versions "
            f"(format 0); this l2m reads format {STATE_FORMAT}. {UPGRADE_HINT}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"state_format": STATE_FORMAT}) + "\n")
    tmp.replace(marker)
