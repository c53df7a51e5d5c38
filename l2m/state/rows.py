"""A state call's input, for either format: the partials of one key as they arrive, unpacked,
counted and grouped by rule, and the rule set they were planned with.

Input: the frames Spark hands a state call (:data:`~l2m.engine.partials.PARTIAL_SCHEMA` rows,
plus ``shard``, ``window``, ``ruleset`` and packed rows, :func:`l2m.engine.streamtask.packed`).
Output: the key's partials by rule (:func:`by_rule`), each frame counted into the query's
:class:`Reduction`; the version of the rules the rows were planned with
(:func:`planned_with`)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeAlias, TypeVar

import pandas as pd
import pyarrow as pa
from pyspark import Accumulator

from l2m.engine.columns import PACK_COLUMN, RULESET_COLUMN
from l2m.engine.ipc import table_of
from l2m.engine.nativebuckets import is_native_key, logs_twice
from l2m.engine.partials import Partial, column_list, frame_partials
from l2m.engine.pipeline import RoutingTable
from l2m.engine.rulesets import RuleVersion, Versions
from l2m.rules.model import Rule
from l2m.state.tally import MatchCount

V = TypeVar("V")

# A key's partials: a pandas frame from Spark, or the Arrow table of a pack (unpacked).
Frame: TypeAlias = pd.DataFrame | pa.Table
# One rule's partials in a key: (series, le, partial).
Rows: TypeAlias = list[tuple[str, str, Partial]]


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


def planned_with(frames: Iterator[pd.DataFrame]) -> tuple[str | None, Iterator[pd.DataFrame]]:
    """The rule set version the rows were planned with (their ``ruleset`` column; None: no
    rows, or none named), and the frames as they are."""
    first = next(frames, None)
    if first is None:
        return None, iter(())
    version = str(first[RULESET_COLUMN].iat[0]) \
        if RULESET_COLUMN in first.columns and len(first) else None
    return version, itertools.chain([first], frames)


def versions_of(table: Mapping[str, Any]) -> Versions | None:
    """How a worker finds the rule sets of a table the state stage reads (None: fixed rules —
    a plain mapping, or a table of one routing)."""
    found = table.versions if isinstance(table, RoutingTable) else None
    return found if isinstance(found, Versions) else None


def at_version(table: Mapping[str, V], at: RuleVersion | None) -> Mapping[str, V]:
    """The table under the rule set a call runs under (``at``; None: the query's first), as a
    plain mapping; a plain mapping as it is."""
    return table.at(at) if isinstance(table, RoutingTable) else table


def shipped_files() -> str:
    """Where Spark put the files the driver shipped on this worker (the rule sets)."""
    from pyspark import SparkFiles

    return SparkFiles.getRootDirectory()


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


def counted(frames: Iterator[Frame], reduction: Reduction | None,
            rules: Sequence[Mapping[str, Rule]] = ()) -> Iterator[Frame]:
    """The frames as they are, their rows and matches counted into ``reduction``: a rule's
    logs once each, though a classic and native histogram (found in ``rules``, the call's
    counters and gauges) has two rows per log
    (:func:`~l2m.engine.nativebuckets.logs_twice`): its native keys' are not counted."""
    if reduction is None:
        yield from frames
        return
    rows = matches = 0
    per_rule: dict[Any, float] = {}
    twice: dict[str, bool] = {}

    def logs_twice_of(rule_id: str) -> bool:
        found = twice.get(rule_id)
        if found is None:
            rule = next((m[rule_id] for m in rules if rule_id in m), None)
            found = twice[rule_id] = rule is not None and logs_twice(rule)
        return found

    for frame in frames:
        rows += len(frame)
        logs = column_list(frame, "matches")
        matches += int(sum(logs))
        if reduction.matches is not None:
            # A plain loop: a pandas groupby per key's frame cost ≈ 4 ms a call, 220 calls a
            # batch with 100,000 rules (≈ 300 partials each).
            sums: dict[str, int] = {}
            names = column_list(frame, "rule")
            for rule, n in zip(names, logs, strict=True):
                sums[rule] = sums.get(rule, 0) + n
            if any(logs_twice_of(rule) for rule in sums):
                for rule, le, n in zip(names, column_list(frame, "le"), logs, strict=True):
                    if isinstance(le, str) and is_native_key(le) and logs_twice_of(rule):
                        sums[rule] -= n
            for rule, n in sums.items():
                key = MatchCount(rule)
                per_rule[key] = per_rule.get(key, 0) + n
        yield frame
    if rows:
        reduction.rows_in.add(matches)
        reduction.rows_out.add(rows)
        if reduction.matches is not None:
            reduction.matches.add(per_rule)


def by_rule(frames: Iterator[Frame]) -> dict[str, Rows]:
    """The partials of a key's frames, by rule."""
    out: dict[str, Rows] = {}
    for frame in frames:
        for rule, row in zip(column_list(frame, "rule"), frame_partials(frame), strict=True):
            out.setdefault(rule, []).append(row)
    return out
