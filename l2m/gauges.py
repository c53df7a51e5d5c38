"""Gauges stage (SPEC §3): one-minute tumbling windows per series, in the state of a
(rule, shard, window) key.

The watermark is Spark's (``withWatermark`` on the partials' event time: the largest event
time seen minus the grace, advanced at the end of each micro-batch). A window stays open —
each batch that changes it re-emits its corrected value — until the watermark passes its
end; then its state goes, and logs that still arrive for it are dropped and counted."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming.state import GroupState

from l2m.counters import WINDOW_MS, signature
from l2m.rules import Rule
from l2m.samples import Partial, frame_partials, rule_samples, samples_frame, series_labels
from l2m.statefmt import dump_blob, load_blob


@dataclass
class GaugeState:
    """Gauge keys of the state function, keyed by (rule, shard, window start).

    State: a blob (:mod:`l2m.state`) of ``{"sig", "series": {series: {le: partial}}}``. A
    key that gets no data is looked at again every ``recheck_ms`` of processing time, to let
    its window go once the watermark has passed."""

    rules: dict[str, Rule]
    recheck_ms: int = 60_000
    # The driver's metrics (l2m.tally.Latest): open series per (rule, shard, window) key.
    tally: Accumulator[dict[Any, float]] | None = None

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        rule_id, _shard, window = key
        rule = self.rules.get(rule_id)
        if int(window) + WINDOW_MS <= state.getCurrentWatermarkMs():
            # Closed: the logs still arriving for it are counted as late by the input-status
            # key (l2m_late_logs_total), which sees every log once.
            self._tally(key, 0)
            state.remove()
            return
        if rule is None:  # a removed rule: nothing more will come for it
            self._tally(key, 0)
            state.remove()
            return
        stored = load_blob(state.get[0]) if state.exists else {}
        series: dict[str, dict[str, list[Any]]] = stored.get("series", {})
        if stored.get("sig") not in (None, signature(rule)):
            series = {}
        touched: set[str] = set()
        if not state.hasTimedOut:
            for frame in frames:
                for name, le, part in frame_partials(frame):
                    buckets = series.setdefault(name, {})
                    buckets[le] = part.merged_into(buckets.get(le))
                    touched.add(name)
        state.update((dump_blob({"sig": signature(rule), "series": series}),))
        state.setTimeoutDuration(self.recheck_ms)
        self._tally(key, len(series))
        if not touched:
            return
        yield samples_frame([
            s for name in sorted(touched)
            for s in rule_samples(rule, series_labels(rule, name), int(window),
                                  {le: Partial.load(v) for le, v in series[name].items()})])


    def _tally(self, key: tuple[Any, ...], series: int) -> None:
        if self.tally is not None:
            self.tally.add({("series", key[0], key[1], key[2]): series})
