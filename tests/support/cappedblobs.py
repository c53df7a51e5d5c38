"""The reference the format 7 processor's tests compare it with: every rule's series of a
(shard, window) key in one blob, series caps counted from the blob itself — what 0.3.0's
development builds kept as state format 3, the simplest layout that enforces caps. Not l2m's
code any more (format 3 checkpoints are refused); kept here as the oracle of
``tests/unit/state/test_state_processor.py``: the processor must decide exactly as it does
(same samples, same caps)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
import pandas as pd
from pyspark.sql.streaming.state import GroupState

from l2m.engine.admission import OVERFLOW_SERIES, Admission, RuleCaps
from l2m.engine.status import STATUS_RULE
from l2m.state.counters import REFUSED_RULE, SWEEP_MS, CounterState, same_signature
from l2m.state.format import CUMULATIVE
from l2m.state.gauges import GaugeState
from l2m.state.output import emitted, refusal_rows
from l2m.state.rows import by_rule


@dataclass
class CappedBlobs:
    """Counter keys to ``counters``, window keys to ``gauges``, with ``caps`` enforced per
    key from the series its blob holds."""

    counters: CounterState
    gauges: GaugeState
    caps: Mapping[str, RuleCaps] | None = None

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        window = key[1]
        if window == CUMULATIVE:
            return self._counter_key(frames, state)
        return self._gauge_key(int(window), frames, state)

    @staticmethod
    def _load(state: GroupState) -> dict[str, Any]:
        return orjson.loads(state.get[0]) if state.exists else {}

    def _counter_key(self, frames: Iterator[pd.DataFrame], state: GroupState
                     ) -> Iterator[pd.DataFrame]:
        stored = self._load(state)
        sections: dict[str, Any] = stored.get("rules", {})
        now = state.getCurrentProcessingTimeMs()
        rows = {} if state.hasTimedOut else by_rule(frames)
        swept = stored.get("swept", 0)
        sweep = state.hasTimedOut or now - swept >= SWEEP_MS
        watermark = state.getCurrentWatermarkMs() if STATUS_RULE in rows else 0
        admission = self._admission(sections, self.counters.rules)
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        for rule_id in sorted((set(sections) | set(rows)) - {REFUSED_RULE}):
            if rule_id not in rows and not sweep:
                kept[rule_id] = sections[rule_id]
                continue
            content, out = self.counters.update(rule_id, sections.get(rule_id, {}),
                                                rows.get(rule_id, []), now, watermark,
                                                admission=admission)
            if content is not None:
                kept[rule_id] = content
            samples += out
        refusals = refusal_rows(admission, None)
        if refusals or (sweep and REFUSED_RULE in sections):
            content, out = self.counters.update(REFUSED_RULE, sections.get(REFUSED_RULE, {}),
                                                refusals, now, watermark)
            if content is not None:
                kept[REFUSED_RULE] = content
            samples += out
        elif REFUSED_RULE in sections:
            kept[REFUSED_RULE] = sections[REFUSED_RULE]
        if kept:
            state.update((orjson.dumps({"rules": kept, "swept": now if sweep else swept}),))
        else:
            state.remove()
        yield from emitted(samples, None, now)

    def _gauge_key(self, window: int, frames: Iterator[pd.DataFrame], state: GroupState
                   ) -> Iterator[pd.DataFrame]:
        stored = self._load(state)
        sections: dict[str, Any] = stored.get("rules", {})
        samples: list[dict[str, Any]] = []
        if GaugeState.closed(window, state.getCurrentWatermarkMs()):
            state.remove()
        else:
            rows = {} if state.hasTimedOut else by_rule(frames)
            rules = self.gauges.rules
            kept = {r: c for r, c in sections.items() if r in rules or r == REFUSED_RULE}
            admission = self._admission(kept, rules)
            for rule_id in sorted(rows):
                if rule_id in rules:
                    kept[rule_id], out = self.gauges.update(rule_id, window,
                                                            kept.get(rule_id, {}),
                                                            rows[rule_id], admission)
                    samples += out
            refusals = refusal_rows(admission, None)
            if refusals:
                kept[REFUSED_RULE], out = self.gauges.update(
                    REFUSED_RULE, window, kept.get(REFUSED_RULE, {}), refusals)
                samples += out
            if kept:
                state.update((orjson.dumps({"rules": kept}),))
            else:
                state.remove()
        yield from emitted(samples, None, state.getCurrentProcessingTimeMs())

    def _admission(self, sections: Mapping[str, Any], rules: Mapping[str, Any]
                   ) -> Admission | None:
        if self.caps is None:
            return None
        sizes = {}
        for rule_id, section in sections.items():
            rule = rules.get(rule_id)
            if rule is None or not same_signature(section.get("sig"), rule):
                continue  # removed, or restarting: its series go
            series = section.get("series", {})
            sizes[rule_id] = len(series) - (OVERFLOW_SERIES in series)
        return Admission(self.caps, sizes)
