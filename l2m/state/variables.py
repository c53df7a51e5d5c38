"""The state processor's variables (format 9), declared on Spark's handle, and the light
wrapper the query is given (:class:`Deferred`).

Light on purpose: Spark runs the processor's ``init`` on the driver too, in a Python process of
its own started on every query start (``transform_with_state_driver_worker``), only to learn the
variables and their schemas. There it must not import pandas, Arrow or the rules engine: 0.36 s
of imports, on every start's critical path.

Input: Spark's ``StatefulProcessorHandle`` and the counter TTL. Output: the five state variables
(:class:`Variables`); on executors, the wrapped processor doing the work."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark import cloudpickle
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues
from pyspark.sql.types import BinaryType, IntegerType, StringType, StructField, StructType

from l2m.process.collector import task_paused, task_resumed

# The state variables' schemas as types, not DDL strings: pyspark sends each string to the JVM
# to be parsed, a round trip per schema in every state task's init (14 calls instead of 5).
ENTRY = StructType([StructField("value", BinaryType())])  # orjson bytes (l2m.state.format)
SERIES_KEY = StructType([StructField("rule", StringType()), StructField("series", StringType())])
PAGE_KEY = StructType([StructField("rule", StringType()), StructField("page", IntegerType())])
RULE_KEY = StructType([StructField("rule", StringType())])
BUCKETS = 128  # last-touch buckets per counter TTL: how late an expired series stops counting


def bucket_ms(ttl_ms: int) -> int:
    """The width of a last-touch bucket of counter series (:mod:`l2m.state.processor`)."""
    return max(1, ttl_ms // BUCKETS)


@dataclass(frozen=True)
class Variables:
    """The processor's state variables (layouts: :mod:`l2m.state.format`)."""

    counter_series: Any  # MapState (rule, series) -> entry, expiring after the counter TTL
    counter_pages: Any  # MapState (rule, page) -> entry, expiring after the counter TTL
    counter_rules: Any  # MapState rule -> entry, outliving the buckets that count its series
    gauge_series: Any  # MapState (rule, series) -> entry
    gauge_pages: Any  # MapState (rule, page) -> entry
    gauge_rules: Any  # MapState rule -> entry
    meta: Any  # ValueState: the key's format, buckets, sweep or timer


def declare(handle: StatefulProcessorHandle, ttl_ms: int) -> Variables:
    """Declare the variables on ``handle`` (only possible in the processor's ``init``)."""
    return Variables(
        counter_series=handle.getMapState("counter_series", SERIES_KEY, ENTRY, ttl_ms),
        counter_pages=handle.getMapState("counter_pages", PAGE_KEY, ENTRY, ttl_ms),
        # A rule's entry must outlive the buckets that count its series: the last one's end
        # comes up to a bucket after its newest series expires.
        counter_rules=handle.getMapState("counter_rules", RULE_KEY, ENTRY,
                                         ttl_ms + 2 * bucket_ms(ttl_ms)),
        gauge_series=handle.getMapState("gauge_series", SERIES_KEY, ENTRY),
        gauge_pages=handle.getMapState("gauge_pages", PAGE_KEY, ENTRY),
        gauge_rules=handle.getMapState("gauge_rules", RULE_KEY, ENTRY),
        meta=handle.getValueState("meta", ENTRY),
    )


class Deferred(StatefulProcessor):
    """A processor as the query is given it: ``init`` declares the variables here; the
    processor itself (``processor``, any object with ``adopt(handle, variables)`` and the
    ``handle*`` methods) travels pickled and is rebuilt at its first call, so a process that
    only declares the variables never imports what the work needs. Rebuilt per task (each task
    unpickles its own ``Deferred``), as Spark would have: its accumulators register with the
    task that reports them."""

    def __init__(self, processor: Any, ttl_ms: int) -> None:
        self.ttl_ms = ttl_ms
        self.payload = cloudpickle.dumps(processor)
        self._impl: Any = None
        self._handle: StatefulProcessorHandle | None = None
        self._variables: Variables | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_impl": None, "_handle": None, "_variables": None}

    def init(self, handle: StatefulProcessorHandle) -> None:
        self._handle = handle
        self._variables = declare(handle, self.ttl_ms)

    def _processor(self) -> Any:
        if self._impl is None:
            impl = cloudpickle.loads(self.payload)
            assert self._handle is not None and self._variables is not None, "init first"
            impl.adopt(self._handle, self._variables)
            self._impl = impl
        return self._impl

    # The collector is paused from a task's first call to its end (close):
    # l2m.process.collector.task_paused.
    def handleInputRows(self, key: Any, rows: Iterator[Any],
                        timerValues: TimerValues) -> Iterator[Any]:
        task_paused()
        return self._processor().handleInputRows(key, rows, timerValues)

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[Any]:
        task_paused()
        return self._processor().handleExpiredTimer(
            key, timerValues, expiredTimerInfo)

    def close(self) -> None:
        try:
            if self._impl is not None:
                self._impl.close()
        finally:
            task_resumed()
