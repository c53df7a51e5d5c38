"""Counters stage (SPEC §3): cumulative totals per (rule, series) since first seen, in the
state of a (rule, shard) key; idle series expire after the TTL."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pandas as pd
from pyspark.sql.streaming.state import GroupState

from l2m.route import STATUS_RULE
from l2m.rules import Rule
from l2m.samples import Partial, frame_partials, rule_samples, samples_frame, series_labels

# The input counter l2m keeps about itself: logs per parse status (ok, malformed, …).
INPUT_RULE = Rule(id="l2m-input", name="l2m_input_logs_total", kind="counter", query="*",
                  aggregation="count", group_by=("status",), file="<l2m>")


def signature(rule: Rule) -> list[Any]:
    """What makes accumulated values meaningful: when it changes, a series restarts."""
    return [rule.aggregation, rule.field, list(rule.bucket_labels), list(rule.group_by)]


@dataclass
class CounterState:
    """Counter keys of the state function, keyed by (rule, shard, …).

    State: one blob per key — orjson of ``{"sig": signature, "series": {series: [last_seen_ms,
    {le: Partial.dump()}]}}`` — so many series are updated per Python call
    and the state schema does not depend on the rules. Series idle for longer than the TTL
    are dropped (a later log restarts them at 0, a counter reset for PromQL)."""

    rules: dict[str, Rule]
    ttl_ms: int

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        rule_id = key[0]
        rule = INPUT_RULE if rule_id == STATUS_RULE else self.rules.get(rule_id)
        now = state.getCurrentProcessingTimeMs()
        stored = orjson.loads(state.get[0]) if state.exists else {}
        series: dict[str, list[Any]] = stored.get("series", {})
        if rule is not None and stored.get("sig") not in (None, signature(rule)):
            series = {}
        touched: set[str] = set()
        if not state.hasTimedOut:
            for frame in frames:
                for name, le, part in frame_partials(frame):
                    entry = series.setdefault(name, [now, {}])
                    entry[0] = now
                    entry[1][le] = part.merged_into(entry[1].get(le))
                    touched.add(name)
        cutoff = now - self.ttl_ms
        series = {s: v for s, v in series.items() if v[0] >= cutoff}
        if not series:
            state.remove()
        else:
            sig = signature(rule) if rule is not None else stored.get("sig")
            state.update((orjson.dumps({"sig": sig, "series": series}),))
            state.setTimeoutDuration(self.ttl_ms)
        if rule is None or not touched:
            return
        yield samples_frame([
            s for name in sorted(touched)
            for s in rule_samples(rule, series_labels(rule, name), None,
                                  {le: Partial.load(v) for le, v in series[name][1].items()})])
