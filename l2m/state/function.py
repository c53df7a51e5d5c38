"""The state stage: one ``applyInPandasWithState`` for counters and gauges alike.

State is keyed by (shard, window) for all rules together (format 2; format 1 checkpoints keep
their (rule, shard, window) keys): counters by shard with window :data:`CUMULATIVE`, gauges
by (shard, one-minute window), so a batch touches only the windows its logs fall in, and the
number of Python calls — Spark's per-key overhead is about a millisecond — does not grow
with the number of rules. The value is one opaque
blob per key, so the state schema never depends on the rules. Running both in one query
means each log is read, parsed and routed once (Spark's own window aggregation cannot share a
query with ``applyInPandasWithState`` in update mode, hence gauges are ours too).

State outlives releases: every blob is orjson of a mapping with ``"v"``, the format version
(:data:`STATE_FORMAT`). :func:`load_blob` reads every version l2m has written since versions
exist (``tests/golden/`` pins each) and refuses anything else with ``[STATE_FORMAT]``, naming
the version it found and what to do. The checkpoint folder carries the same version in
``l2m.json`` (:func:`check_checkpoint`), so a wrong checkpoint is refused before Spark starts.

Layouts, version 2: a key's blob is ``{"v": 2, "rules": {rule id: section}}`` — a counter
key adds ``"swept": ms`` (when its idle series were last dropped for every rule; touched rules
are swept each batch) — and each section is what a version 1 blob holds below, without
``"v"``. Version 1:

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

from l2m.engine.partials import Partial, frame_partials
from l2m.engine.routing import STATUS_RULE
from l2m.engine.samples import samples_frame
from l2m.errors import StateFormatError
from l2m.state.counters import CounterState, tallied
from l2m.state.format import READABLE, STATE_FORMAT, UPGRADE_HINT, dump_blob, load_blob
from l2m.state.gauges import GaugeState

CUMULATIVE = -1  # the window of every counter key
SWEEP_MS = 60_000  # format 2: how often a key's untouched rules are checked for idle series
OUTPUT_SCHEMA = "key string, value string"
STATE_SCHEMA = "blob binary"


@dataclass
class Reduction:
    """What the read tasks' pre-aggregation did, summed over the query's life: match rows
    in (one per log and matching rule, plus one status row per log) → partials out, and
    (when set) the match rows per rule — the logs each rule matched (:class:`l2m.state.tally.Sums`).
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
            frames = self._counted(frames, self.reduction)
        if len(key) == 3:  # format 1: (rule, shard, window)
            if key[2] == CUMULATIVE:
                return self.counters(key, frames, state)
            return self.gauges(key, frames, state)
        shard, window = key
        if window == CUMULATIVE:
            return self._counter_key(int(shard), frames, state)
        return self._gauge_key(int(shard), int(window), frames, state)

    def _counter_key(self, shard: int, frames: Iterator[pd.DataFrame],
                     state: GroupState) -> Iterator[pd.DataFrame]:
        """Format 2: every rule's counter series of one shard, one section per rule."""
        stored = load_blob(state.get[0]) if state.exists else {}
        sections: dict[str, Any] = stored.get("rules", {})
        now = state.getCurrentProcessingTimeMs()
        rows = {} if state.hasTimedOut else _by_rule(frames)
        swept = stored.get("swept", 0)
        sweep = state.hasTimedOut or now - swept >= SWEEP_MS
        watermark = state.getCurrentWatermarkMs() if STATUS_RULE in rows else 0
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(set(sections) | set(rows)):
            if rule_id not in rows and not sweep:
                kept[rule_id] = sections[rule_id]
                continue
            content, out = self.counters.update(rule_id, sections.get(rule_id, {}),
                                                rows.get(rule_id, []), now, watermark)
            if content is not None:
                kept[rule_id] = content
            samples += out
        if kept:
            state.update((dump_blob({"rules": kept, "swept": now if sweep else swept}),))
            state.setTimeoutDuration(self.counters.ttl_ms)
        else:
            state.remove()
        if self.counters.tally is not None:
            tally: dict[Any, float] = {}
            for rule_id in set(sections) | set(kept):
                tally.update(tallied(rule_id, shard, CUMULATIVE, kept.get(rule_id)))
            self.counters.tally.add(tally)
        if samples:
            yield samples_frame(samples)

    def _gauge_key(self, shard: int, window: int, frames: Iterator[pd.DataFrame],
                   state: GroupState) -> Iterator[pd.DataFrame]:
        """Format 2: every rule's gauge series of one shard in one one-minute window."""
        stored = load_blob(state.get[0]) if state.exists else {}
        sections: dict[str, Any] = stored.get("rules", {})
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        if GaugeState.closed(window, state.getCurrentWatermarkMs()):
            state.remove()
        else:
            rows = {} if state.hasTimedOut else _by_rule(frames)
            rules = self.gauges.rules
            kept = {r: c for r, c in sections.items() if r in rules}  # removed rules go
            for rule_id, parts in rows.items():
                if rule_id in rules:
                    kept[rule_id], out = self.gauges.update(rule_id, window,
                                                            kept.get(rule_id, {}), parts)
                    samples += out
            if kept:
                state.update((dump_blob({"rules": kept}),))
                state.setTimeoutDuration(self.gauges.recheck_ms)
            else:
                state.remove()
        if self.gauges.tally is not None:
            self.gauges.tally.add({("series", r, shard, window): len(kept.get(r, {}).get(
                "series", {})) for r in set(sections) | set(kept)})
        if samples:
            yield samples_frame(samples)

    @staticmethod
    def _counted(frames: Iterator[pd.DataFrame],
                 reduction: Reduction) -> Iterator[pd.DataFrame]:
        rows = matches = 0
        per_rule: dict[Any, float] = {}
        for frame in frames:
            rows += len(frame)
            matches += int(frame["matches"].sum())
            if reduction.matches is not None:
                for rule, n in frame.groupby("rule", sort=False)["matches"].sum().items():
                    per_rule[("matches", rule)] = per_rule.get(("matches", rule), 0) + int(n)
            yield frame
        if rows:
            reduction.rows_in.add(matches)
            reduction.rows_out.add(rows)
            if reduction.matches is not None:
                reduction.matches.add(per_rule)


def _by_rule(frames: Iterator[pd.DataFrame]) -> dict[str, list[tuple[str, str, Partial]]]:
    """The partials of a key's frames, by rule."""
    out: dict[str, list[tuple[str, str, Partial]]] = {}
    for frame in frames:
        for rule, row in zip(frame["rule"].tolist(), frame_partials(frame), strict=True):
            out.setdefault(rule, []).append(row)
    return out


CHECKPOINT_MARKER = "l2m.json"


def local_checkpoint(checkpoint: str) -> str | None:
    """The path of a checkpoint on a local (or mounted) disk — a plain path or a ``file://``
    URI; None for an object store (``s3a://``, ``gs://``, ``hdfs://``…)."""
    if checkpoint.startswith("file://"):
        return checkpoint.removeprefix("file://")
    return None if "://" in checkpoint else checkpoint


def check_checkpoint(checkpoint: str, query_dir: str) -> int:
    """The state format of a checkpoint this l2m continues (a new one is marked with
    :data:`STATE_FORMAT`); a checkpoint it cannot continue is refused before Spark starts.

    A checkpoint with a query folder but no ``l2m.json`` was written before state versions
    (or by the two-query layout); one whose version is not :data:`STATE_FORMAT` by another
    release. Only local (and mounted) paths are checked; object-store URIs rely on the
    blobs' own versions."""
    local = local_checkpoint(checkpoint)
    if local is None:
        return STATE_FORMAT
    root = Path(local)
    marker = root / CHECKPOINT_MARKER
    if marker.exists():
        try:
            found = json.loads(marker.read_text()).get("state_format")
        except (OSError, ValueError, AttributeError):
            found = "unreadable"
        if found not in READABLE:
            raise StateFormatError(
                f"checkpoint {checkpoint} holds state format {found}; this l2m reads formats "
                f"{', '.join(map(str, READABLE))}. {UPGRADE_HINT}")
        return int(found)
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
    return STATE_FORMAT
