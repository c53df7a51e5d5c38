"""The state stage: one ``applyInPandasWithState`` for counters and gauges alike.

State is keyed by (rule, shard, window): counters by (rule, shard) with window
:data:`CUMULATIVE` — many series per Python call — and gauges by (rule, shard, one-minute
window), so a batch touches only the windows its logs fall in. The value is one opaque
blob per key, so the state schema never depends on the rules. Running both in one query
means each log is read, parsed and routed once (Spark's own window aggregation cannot share a
query with ``applyInPandasWithState`` in update mode, hence gauges are ours too)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql.streaming.state import GroupState

from l2m.counters import CounterState
from l2m.gauges import GaugeState

CUMULATIVE = -1  # the window of every counter key
OUTPUT_SCHEMA = "key string, value string"
STATE_SCHEMA = "blob binary"


@dataclass
class MetricState:
    """The state function: counter keys to :class:`CounterState`, window keys to
    :class:`GaugeState`."""

    counters: CounterState
    gauges: GaugeState

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        if key[2] == CUMULATIVE:
            return self.counters(key, frames, state)
        return self.gauges(key, frames, state)
