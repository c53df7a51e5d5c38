"""The state stage of format 2, the format releases 0.1.0 and 0.2.0 wrote: their checkpoints
continue in it (a plain restart; docs/streaming.md, "Upgrading"). One
``applyInPandasWithState`` function for counters and gauges alike, one blob per key.

State is keyed by (shard, window) for all rules together: counters by shard with window
:data:`~l2m.state.format.CUMULATIVE`, gauges by (shard, one-minute window), so a batch
touches only the windows its logs fall in, and the number of Python calls — Spark's per-key
overhead is about a millisecond — does not grow with the number of rules. The value is one
opaque blob per key (:func:`l2m.state.format.dump_blob`), so the state schema never depends
on the rules. Format 2 places series by (rule, series), not by account, so series caps are
not enforced on it.

Input: the partials of one micro-batch (:data:`~l2m.engine.partials.PARTIAL_SCHEMA`, plus
``shard`` and ``window``), grouped by the state key, and each key's stored blob. Output: the
samples of every series the batch touched (:data:`~l2m.state.output.OUTPUT_SCHEMA` rows) and
each key's new blob (:data:`STATE_SCHEMA`).

Format 9's code (:mod:`l2m.state.processor`) never imports this module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming.state import GroupState

from l2m.engine.status import STATUS_RULE
from l2m.state.counters import SWEEP_MS, CounterState, tallied
from l2m.state.format import CUMULATIVE, dump_blob, load_blob
from l2m.state.gauges import GaugeState
from l2m.state.output import emitted
from l2m.state.rows import (
    Reduction,
    Rows,
    at_version,
    by_rule,
    counted,
    planned_with,
    shipped_files,
    versions_of,
)
from l2m.state.tally import SeriesCount, Tally

STATE_SCHEMA = "blob binary"  # the state of a key: its blob


@dataclass
class MetricState:
    """The state function of format 2: counter keys to :class:`CounterState`, window keys to
    :class:`GaugeState`, each call under the rule set its rows were planned with; the
    partials it receives counted into ``reduction``; ``activity``: the samples emitted per
    rule, for the driver's metrics (:mod:`l2m.state.accounts`)."""

    counters: CounterState
    gauges: GaugeState
    reduction: Reduction | None = None
    activity: Accumulator[Tally] | None = None

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        version, frames = planned_with(frames)
        counters, gauges = self._at(version)
        rows = counted(frames, self.reduction, (counters.rules, gauges.rules))
        shard, window = key
        if window == CUMULATIVE:
            return self._counter_key(counters, int(shard), rows, state)
        return self._gauge_key(gauges, int(shard), int(window), rows, state)

    def _at(self, version: str | None) -> tuple[CounterState, GaugeState]:
        """The counters and gauges under the rule set ``version`` (None: the query's first),
        passed to this call's tables."""
        versions = versions_of(self.counters.rules)
        if versions is None:
            return self.counters, self.gauges  # fixed rules
        at = versions.for_rows(version, shipped_files())
        return (replace(self.counters, rules=at_version(self.counters.rules, at)),
                replace(self.gauges, rules=at_version(self.gauges.rules, at)))

    @staticmethod
    def _load(state: GroupState) -> dict[str, Any]:
        """A key's stored blob: format 2's, or a refusal naming the format found (an
        object-store checkpoint without ``l2m.json`` is taken for format 2 unread)."""
        return load_blob(state.get[0]) if state.exists else {}

    def _counter_key(self, counters: CounterState, shard: int, frames: Iterator[Any],
                     state: GroupState) -> Iterator[pd.DataFrame]:
        """Every rule's counter series of one shard, one section per rule."""
        stored = self._load(state)
        sections: dict[str, Any] = stored.get("rules", {})
        now = state.getCurrentProcessingTimeMs()
        rows: dict[str, Rows] = {} if state.hasTimedOut else by_rule(frames)
        swept = stored.get("swept", 0)
        sweep = state.hasTimedOut or now - swept >= SWEEP_MS
        watermark = state.getCurrentWatermarkMs() if STATUS_RULE in rows else 0
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        for rule_id in sorted(set(sections) | set(rows)):
            if rule_id not in rows and not sweep:
                kept[rule_id] = sections[rule_id]
                continue
            content, out = counters.update(rule_id, sections.get(rule_id, {}),
                                           rows.get(rule_id, []), now, watermark)
            if content is not None:
                kept[rule_id] = content
            samples += out
        if kept:
            state.update((dump_blob({"rules": kept, "swept": now if sweep else swept}),))
            state.setTimeoutDuration(counters.ttl_ms)
        else:
            state.remove()
        if counters.tally is not None:
            tally: dict[Any, float] = {}
            # What changed: the rules touched, or all when swept (the driver keeps the last
            # value; 100,000 rules' keys each batch cost more to pickle than the batch's work).
            for rule_id in (set(sections) | set(kept)) if sweep else set(rows):
                tally.update(tallied(rule_id, shard, CUMULATIVE, kept.get(rule_id)))
            counters.tally.add(tally)
        yield from emitted(samples, self.activity, now)

    def _gauge_key(self, gauges: GaugeState, shard: int, window: int, frames: Iterator[Any],
                   state: GroupState) -> Iterator[pd.DataFrame]:
        """Every rule's gauge series of one shard in one one-minute window."""
        stored = self._load(state)
        sections: dict[str, Any] = stored.get("rules", {})
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        rows: dict[str, Rows] = {}
        if GaugeState.closed(window, state.getCurrentWatermarkMs()):
            state.remove()
        else:
            rows = {} if state.hasTimedOut else by_rule(frames)
            rules = gauges.rules
            kept = {r: c for r, c in sections.items() if r in rules}  # removed rules go
            for rule_id in sorted(rows):
                if rule_id in rules:
                    kept[rule_id], out = gauges.update(rule_id, window, kept.get(rule_id, {}),
                                                       rows[rule_id])
                    samples += out
            if kept:
                state.update((dump_blob({"rules": kept}),))
                state.setTimeoutDuration(gauges.recheck_ms)
            else:
                state.remove()
        if gauges.tally is not None:
            changed = set(rows) if kept else set(sections)  # a closed window: all go to 0
            gauges.tally.add({SeriesCount(r, shard, window): len(kept.get(r, {}).get(
                "series", {})) for r in changed})
        yield from emitted(samples, self.activity, state.getCurrentProcessingTimeMs())
