"""Dictionary accumulators: what the job's tasks tell the driver about themselves, for its
metrics (:mod:`l2m.runtime.telemetry`).

Input: ``{key: number}`` updates added in tasks (pre-aggregation, state), keyed by the named
types below — what each number is about. Output: the merged dictionary on the driver. :class:`Sums`
adds values per key (logs matched per rule); :class:`Latest` keeps the last value per key (series
per state key, the exact input-status counts). Tasks of one micro-batch touch disjoint state keys
and batches run one after the other, so "last" is well defined. Kept free of heavy imports: workers
unpickle these. Each key pickles as its class and field values (``__reduce__``): a frozen slots
dataclass otherwise pickles through ``dataclasses.fields`` per object, a visible share of every
batch with 100,000 rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.accumulators import AccumulatorParam


@dataclass(frozen=True, slots=True)
class SeriesCount:
    """Live series of one rule in one state key (counters: window -1)."""

    rule: str
    shard: int
    window: int

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return SeriesCount, (self.rule, self.shard, self.window)


@dataclass(frozen=True, slots=True)
class InputCount:
    """Logs read with one input status label (exact: the input-status key's own count)."""

    status: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return InputCount, (self.status,)


@dataclass(frozen=True, slots=True)
class LateCount:
    """Logs that came after their gauge window had closed (exact)."""

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return LateCount, ()


@dataclass(frozen=True, slots=True)
class CutCount:
    """Label values of one rule's series cut to the job's limit (exact)."""

    rule: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return CutCount, (self.rule,)


@dataclass(frozen=True, slots=True)
class MatchCount:
    """Match rows (logs) one rule matched, as the pre-aggregation counted them."""

    rule: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return MatchCount, (self.rule,)


@dataclass(frozen=True, slots=True)
class RefusedCount:
    """Logs one rule counted into its overflow series because of one cap (``limit``: rule,
    metric or account; l2m.engine.admission), in one micro-batch (summed on the driver)."""

    rule: str
    account: str
    limit: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return RefusedCount, (self.rule, self.account, self.limit)


@dataclass(frozen=True, slots=True)
class SampleCount:
    """Samples one rule's series emitted in one micro-batch (summed on the driver)."""

    rule: str

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return SampleCount, (self.rule,)


TallyKey = (SeriesCount | InputCount | LateCount | CutCount | MatchCount | RefusedCount
            | SampleCount)
Tally = dict[TallyKey, float]


class Sums(AccumulatorParam[Tally]):
    """Per key: the sum of every update."""

    def zero(self, value: Tally) -> Tally:
        return {}

    def addInPlace(self, value1: Tally, value2: Tally) -> Tally:
        for key, number in value2.items():
            value1[key] = value1.get(key, 0) + number
        return value1


class Latest(AccumulatorParam[Tally]):
    """Per key: the last value set."""

    def zero(self, value: Tally) -> Tally:
        return {}

    def addInPlace(self, value1: Tally, value2: Tally) -> Tally:
        value1.update(value2)
        return value1
