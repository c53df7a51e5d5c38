"""Dictionary accumulators: what the job's tasks tell the driver about themselves, for its
metrics (:mod:`l2m.runtime.telemetry`).

Input: ``{key: number}`` updates added in tasks (pre-aggregation, state), keyed by the named
types below — what each number is about. Output: the merged dictionary on the driver. :class:`Sums`
adds values per key (logs matched per rule); :class:`Latest` keeps the last value per key (series
per state key, the exact input-status counts). Tasks of one micro-batch touch disjoint state keys
and batches run one after the other, so "last" is well defined. Kept free of heavy imports: workers
unpickle these."""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any

from pyspark.accumulators import AccumulatorParam

from l2m.process.records import FieldValues
from l2m.state.format import CUMULATIVE


@dataclass(frozen=True, slots=True)
class SeriesCount(FieldValues):
    """Live series of one rule in one state key (counters: window :data:`CUMULATIVE`)."""

    rule: str
    shard: int
    window: int

    @property
    def windowed(self) -> bool:
        """Whether this count is of a gauge window (not of a counter key)."""
        return self.window != CUMULATIVE


@dataclass(frozen=True, slots=True)
class InputCount(FieldValues):
    """Logs read with one input status label (exact: the input-status key's own count)."""

    status: str


@dataclass(frozen=True, slots=True)
class LateCount(FieldValues):
    """Logs that came after their gauge window had closed (exact)."""


@dataclass(frozen=True, slots=True)
class CutCount(FieldValues):
    """Label values of one rule's series cut to the job's limit (exact)."""

    rule: str


@dataclass(frozen=True, slots=True)
class MatchCount(FieldValues):
    """Match rows (logs) one rule matched, as the pre-aggregation counted them."""

    rule: str


@dataclass(frozen=True, slots=True)
class RefusedCount(FieldValues):
    """Logs one rule counted into its overflow series because of one cap (``limit``: rule,
    metric or account; l2m.engine.admission), in one micro-batch (summed on the driver)."""

    rule: str
    account: str
    limit: str


@dataclass(frozen=True, slots=True)
class SampleCount(FieldValues):
    """Samples one rule's series emitted in one micro-batch (summed on the driver)."""

    rule: str


TallyKey = (SeriesCount | InputCount | LateCount | CutCount | MatchCount | RefusedCount
            | SampleCount)
Tally = dict[TallyKey, float]


def _unpacked(groups: list[tuple[type, list[Any], list[float]]]) -> Tally:
    tally: Tally = Packed()
    for cls, fields, numbers in groups:
        width = len(getattr(cls, "__slots__", ()))
        keys = (cls(*f) for f in fields) if width > 1 else \
            (cls(f) for f in fields) if width else (cls() for _ in fields)
        tally.update(zip(keys, numbers, strict=True))
    return tally


_GETTERS: dict[type, Any] = {}


class Packed(dict[TallyKey, float]):
    """A tally as a task sends it: pickled as columns per key type (the keys' field values
    and the numbers in lists), not key by key — a state task with 100,000 rules reports tens
    of thousands of series and sample counts per micro-batch, and pickling them one record at
    a time cost ≈ 65 ms per 24,000 (a few % of the task); as columns 5–11 ms. Unpickles as
    the same mapping (the accumulators' ``zero`` gives one to every task)."""

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        groups: dict[type, tuple[list[Any], list[float]]] = {}
        for key, number in self.items():
            cls = type(key)
            group = groups.get(cls)
            if group is None:
                group = groups[cls] = ([], [])
            group[0].append(key)
            group[1].append(number)
        packed = []
        for cls, (keys, numbers) in groups.items():
            getter = _GETTERS.get(cls)
            if getter is None:
                names = cls.__slots__
                getter = _GETTERS[cls] = attrgetter(*names) if names else (lambda _k: None)
            packed.append((cls, list(map(getter, keys)), numbers))
        return _unpacked, (packed,)


class Sums(AccumulatorParam[Tally]):
    """Per key: the sum of every update."""

    def zero(self, value: Tally) -> Tally:
        return Packed()

    def addInPlace(self, value1: Tally, value2: Tally) -> Tally:
        for key, number in value2.items():
            value1[key] = value1.get(key, 0) + number
        return value1


class Latest(AccumulatorParam[Tally]):
    """Per key: the last value set. The driver's (``drops_closed_windows``) drops a gauge
    window's count when its 0 arrives: a closed window reports 0 once and never again, so
    over months its keys would pile up — one per gauge rule and window — and every batch's
    per-account totals and every scrape would read them all. Tasks get a plain copy: their
    0s must reach the driver, whose value they fix."""

    def __init__(self, drops_closed_windows: bool = False) -> None:
        self.drops_closed_windows = drops_closed_windows

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return Latest, ()

    def zero(self, value: Tally) -> Tally:
        return Packed()

    def addInPlace(self, value1: Tally, value2: Tally) -> Tally:
        if not self.drops_closed_windows:
            value1.update(value2)
            return value1
        for key, number in value2.items():
            if not number and isinstance(key, SeriesCount) and key.windowed:
                value1.pop(key, None)
            else:
                value1[key] = number
        return value1


def task_sums(counts: Any) -> Tally:
    """What a query's tasks summed per rule (:class:`l2m.streaming.job.Counts`, or any object
    shaped like it): logs matched (:class:`MatchCount`), logs refused by a series cap and
    samples emitted (its ``activity``: :class:`RefusedCount`, :class:`SampleCount`)."""
    matches = counts.reduction.matches
    sums: Tally = dict(matches.value if matches is not None else {})
    if counts.activity is not None:
        sums.update(counts.activity.value)
    return sums
