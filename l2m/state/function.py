"""The state stage: one ``applyInPandasWithState`` for counters and gauges alike.

State is keyed by (shard, window) for all rules together (format 2; format 1 checkpoints keep
their (rule, shard, window) keys): counters by shard with window :data:`CUMULATIVE`, gauges
by (shard, one-minute window), so a batch touches only the windows its logs fall in, and the
number of Python calls — Spark's per-key overhead is about a millisecond — does not grow
with the number of rules. The value is one opaque blob per key, so the state schema never depends on
the rules. Running both in one query means each log is read, parsed and routed once (Spark's own
window aggregation cannot share a query with ``applyInPandasWithState`` in update mode, hence gauges
are ours too).

Input: the partials of one micro-batch (:data:`~l2m.engine.partials.PARTIAL_SCHEMA`, plus
``shard`` and ``window``), grouped by the state key, and each key's stored blob. Output: the
samples of every series the batch touched (``key, value`` rows, :data:`OUTPUT_SCHEMA`: the
deterministic Kafka key and the JSON sample) and each key's new blob
(:data:`STATE_SCHEMA`; its layouts: :mod:`l2m.state.format`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, TypeAlias

import pandas as pd
import pyarrow as pa
from pyspark import Accumulator
from pyspark.sql.streaming.state import GroupState

from l2m.engine.admission import OVERFLOW_SERIES, Admission, RuleCaps, refused_series
from l2m.engine.columns import PACK_COLUMN, RULESET_COLUMN, SAMPLE_SCHEMA
from l2m.engine.ipc import table_of
from l2m.engine.partials import Partial, column_list, frame_partials
from l2m.engine.rulesets import select
from l2m.engine.samples import samples_frame
from l2m.engine.status import STATUS_RULE
from l2m.errors import StateFormatError
from l2m.state.counters import REFUSED_RULE, CounterState, same_signature, tallied
from l2m.state.format import UPGRADE_HINT, dump_blob, load_blob
from l2m.state.gauges import GaugeState
from l2m.state.tally import (
    CUMULATIVE,
    MatchCount,
    RefusedCount,
    SampleCount,
    SeriesCount,
    Tally,
)

# The state key's columns by state format (l2m.state.format): format 2 keys all rules
# together; a format 1 checkpoint keeps its per-rule keys.
STATE_KEYS: dict[int, tuple[str, ...]] = {7: ("shard", "window"), 6: ("shard", "window"),
                                          5: ("shard", "window"),
                                          4: ("shard", "window"),
                                          3: ("shard", "window"),
                                          2: ("shard", "window"),
                                          1: ("rule", "shard", "window")}
# The first format kept one map entry per series by transformWithStateInPandas
# (l2m.state.processor); formats 1 to 3 keep one blob per key, this module's MetricState.
MAP_FORMAT = 4
# The first format whose shards hold whole accounts (l2m.engine.admission.placement), so that
# series caps can be enforced; formats 1 and 2 place series by (rule, series) and run uncapped.
CAPPED_FORMAT = 3
SWEEP_MS = 60_000  # format 2: how often a key's untouched rules are checked for idle series
# The state stage's output: a sample's Kafka key, JSON value, time and mark, or in ``pack`` a
# call's samples together (l2m.engine.samples.samples_frame).
OUTPUT_SCHEMA = SAMPLE_SCHEMA
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
    :class:`GaugeState`; the partials it receives counted into ``reduction``. ``caps``: each
    rule's series caps (:mod:`l2m.engine.admission`), enforced per key when the checkpoint's
    ``state_format`` places whole accounts in one shard; ``activity``: the logs refused and the
    samples emitted per rule, for the driver's metrics (:mod:`l2m.state.accounts`)."""

    counters: CounterState
    gauges: GaugeState
    reduction: Reduction | None = None
    caps: Mapping[str, RuleCaps] | None = None
    state_format: int = CAPPED_FORMAT  # the last format kept in blobs
    activity: Accumulator[Tally] | None = None

    def __call__(self, key: tuple[Any, ...], frames: Iterator[pd.DataFrame],
                 state: GroupState) -> Iterator[pd.DataFrame]:
        frames = counted(versioned(frames), self.reduction)
        if len(key) == 3:  # format 1: (rule, shard, window)
            if key[2] == CUMULATIVE:
                return self.counters(key, frames, state)
            return self.gauges(key, frames, state)
        shard, window = key
        if window == CUMULATIVE:
            return self._counter_key(int(shard), frames, state)
        return self._gauge_key(int(shard), int(window), frames, state)

    def _load(self, state: GroupState) -> dict[str, Any]:
        """A key's stored blob, which must be of the checkpoint's own format: formats 2 and 3
        share their key columns, so Spark would hand a format 2 blob to a format 3 job (an
        object-store checkpoint carries no ``l2m.json`` to tell them apart) — whose shards
        place series differently."""
        if not state.exists:
            return {}
        stored = load_blob(state.get[0])
        if stored.get("v") != self.state_format:
            raise StateFormatError(
                f"the checkpoint holds state format {stored.get('v')} blobs, but this job "
                f"took it for format {self.state_format} (an object-store checkpoint has no "
                f"l2m.json marker; formats 2 and 3 place series in different shards). "
                f"{UPGRADE_HINT}")
        return stored

    def _counter_key(self, shard: int, frames: Iterator[pd.DataFrame],
                     state: GroupState) -> Iterator[pd.DataFrame]:
        """Formats 2 and 3: every rule's counter series of one shard, one section per rule."""
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
        refusals = refusal_rows(admission, self.activity)
        if refusals or (sweep and REFUSED_RULE in sections):
            content, out = self.counters.update(REFUSED_RULE, sections.get(REFUSED_RULE, {}),
                                                refusals, now, watermark)
            if content is not None:
                kept[REFUSED_RULE] = content
            samples += out
        elif REFUSED_RULE in sections:
            kept[REFUSED_RULE] = sections[REFUSED_RULE]
        if kept:
            state.update((dump_blob({"rules": kept, "swept": now if sweep else swept},
                                    self.state_format),))
            state.setTimeoutDuration(self.counters.ttl_ms)
        else:
            state.remove()
        if self.counters.tally is not None:
            tally: dict[Any, float] = {}
            # What changed: the rules touched, or all when swept (the driver keeps the last
            # value; 100,000 rules' keys each batch cost more to pickle than the batch's work).
            for rule_id in (set(sections) | set(kept)) if sweep else set(rows):
                tally.update(tallied(rule_id, shard, CUMULATIVE, kept.get(rule_id)))
            self.counters.tally.add(tally)
        yield from emitted(samples, self.activity, now)

    def _gauge_key(self, shard: int, window: int, frames: Iterator[pd.DataFrame],
                   state: GroupState) -> Iterator[pd.DataFrame]:
        """Formats 2 and 3: every rule's gauge series of one shard in one one-minute window."""
        stored = self._load(state)
        sections: dict[str, Any] = stored.get("rules", {})
        kept: dict[str, Any] = {}
        samples: list[dict[str, Any]] = []
        rows: dict[str, list[tuple[str, str, Partial]]] = {}
        if GaugeState.closed(window, state.getCurrentWatermarkMs()):
            state.remove()
        else:
            rows = {} if state.hasTimedOut else by_rule(frames)
            rules = self.gauges.rules
            # removed rules go
            kept = {r: c for r, c in sections.items() if r in rules or r == REFUSED_RULE}
            admission = self._admission(kept, rules)
            for rule_id in sorted(rows):
                if rule_id in rules:
                    kept[rule_id], out = self.gauges.update(rule_id, window,
                                                            kept.get(rule_id, {}),
                                                            rows[rule_id], admission)
                    samples += out
            refusals = refusal_rows(admission, self.activity)
            if refusals:
                kept[REFUSED_RULE], out = self.gauges.update(
                    REFUSED_RULE, window, kept.get(REFUSED_RULE, {}), refusals)
                samples += out
            if kept:
                state.update((dump_blob({"rules": kept}, self.state_format),))
                state.setTimeoutDuration(self.gauges.recheck_ms)
            else:
                state.remove()
        if self.gauges.tally is not None:
            changed = set(rows) if kept else set(sections)  # a closed window: all go to 0
            self.gauges.tally.add({SeriesCount(r, shard, window): len(kept.get(r, {}).get(
                "series", {})) for r in changed})
        yield from emitted(samples, self.activity, state.getCurrentProcessingTimeMs())

    def _admission(self, sections: Mapping[str, Any], rules: Mapping[str, Any]
                   ) -> Admission | None:
        """The caps of one domain (a counter key, or a gauge key's window) given its stored
        sections; None when caps are off (a checkpoint of format 1 or 2)."""
        if self.caps is None or self.state_format < CAPPED_FORMAT:
            return None
        sizes = {}
        for rule_id, section in sections.items():
            rule = rules.get(rule_id)
            if rule is None or not same_signature(section.get("sig"), rule):
                continue  # removed, or restarting: its series go
            series = section.get("series", {})
            sizes[rule_id] = len(series) - (OVERFLOW_SERIES in series)
        return Admission(self.caps, sizes)


def refusal_rows(admission: Admission | None, activity: Accumulator[Tally] | None
                 ) -> list[tuple[str, str, Partial]]:
    """A call's refusals as rows of l2m's own refusal counts (one log each), also added to
    the driver's metrics (``activity``)."""
    if admission is None or not admission.refused:
        return []
    rows = []
    tally: Tally = {}
    for (rule_id, limit), (logs, ts) in sorted(admission.refused.items()):
        account = admission.account_of(rule_id)
        rows.append((refused_series(rule_id, account, limit), "",
                     Partial(logs, logs, float(logs), Decimal(logs), None, None, ts)))
        tally[RefusedCount(rule_id, account or "", str(limit))] = logs
    if activity is not None:
        activity.add(tally)
    return rows


def emitted(samples: list[dict[str, Any]], activity: Accumulator[Tally] | None,
            batch_ms: int, mark: str | None = None) -> Iterator[pd.DataFrame]:
    """The samples of one call as the output frame (:func:`~l2m.engine.samples.
    samples_frame`, at the micro-batch's time ``batch_ms``, gauge windows' ``mark``), counted
    per rule."""
    if not samples:
        return
    if activity is not None:
        # Counted by rule id, then keyed: a record per sample was 95,000 a 100,000-rule batch.
        counts: dict[str, int] = {}
        for s in samples:
            counts[s["rule"]] = counts.get(s["rule"], 0) + 1
        activity.add({SampleCount(rule): n for rule, n in counts.items()})
    yield samples_frame(samples, batch_ms, mark)


def versioned(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
    """The frames as they are, once the rule set they were planned with is selected for the
    state stage's tables (:func:`l2m.engine.rulesets.select`): before any rule is looked up."""
    first = next(frames, None)
    if first is None:
        return iter(())
    if RULESET_COLUMN in first.columns and len(first):
        from pyspark import SparkFiles

        select(str(first[RULESET_COLUMN].iat[0]), SparkFiles.getRootDirectory())
    return itertools.chain([first], frames)


# A key's partials: a pandas frame from Spark, or the Arrow table of a pack (unpacked).
Frame: TypeAlias = pd.DataFrame | pa.Table


def unpacked(frames: Iterator[pd.DataFrame]) -> Iterator[Frame]:
    """A key's frames with every packed row (:func:`l2m.engine.streamtask.packed`) replaced
    by the partials it holds, as an Arrow table; rows that are not packs as they came."""
    for frame in frames:
        if PACK_COLUMN not in frame.columns:
            yield frame
            continue
        packs = frame[PACK_COLUMN]
        is_pack = packs.notna()
        if not is_pack.any():
            yield frame
            continue
        if not is_pack.all():
            yield frame[~is_pack]
        for blob in packs[is_pack].tolist():
            yield table_of(blob)


def counted(frames: Iterator[Frame], reduction: Reduction | None) -> Iterator[Frame]:
    """The frames as they are, their rows and matches counted into ``reduction``."""
    if reduction is None:
        yield from frames
        return
    rows = matches = 0
    per_rule: dict[Any, float] = {}
    for frame in frames:
        rows += len(frame)
        logs = column_list(frame, "matches")
        matches += int(sum(logs))
        if reduction.matches is not None:
            # A plain loop: a pandas groupby per key's frame cost ≈ 4 ms a call, 220 calls a
            # batch with 100,000 rules (≈ 300 partials each).
            sums: dict[str, int] = {}
            for rule, n in zip(column_list(frame, "rule"), logs, strict=True):
                sums[rule] = sums.get(rule, 0) + n
            for rule, n in sums.items():
                key = MatchCount(rule)
                per_rule[key] = per_rule.get(key, 0) + n
        yield frame
    if rows:
        reduction.rows_in.add(matches)
        reduction.rows_out.add(rows)
        if reduction.matches is not None:
            reduction.matches.add(per_rule)


def by_rule(frames: Iterator[Frame]) -> dict[str, list[tuple[str, str, Partial]]]:
    """The partials of a key's frames, by rule."""
    out: dict[str, list[tuple[str, str, Partial]]] = {}
    for frame in frames:
        for rule, row in zip(column_list(frame, "rule"), frame_partials(frame), strict=True):
            out.setdefault(rule, []).append(row)
    return out
