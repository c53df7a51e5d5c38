"""A stand-in for Spark's state server behind ``transformWithStateInPandas``, to run
:class:`l2m.state.processor.MetricProcessor` without a JVM: map and value states scoped to the
grouping key, TTL by batch time (as Spark's: an entry written at t is gone from t + ttl),
processing-time timers, and a count of the reads and writes each call makes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from l2m.state.format import load_entry
from tests.support.outputs import output_samples


class Store:
    """Every state variable of every grouping key: {(name, grouping key, user key): (value,
    expires at or None)}; ``reads``/``writes``: state calls since the last :meth:`reset`;
    ``ttls``: each variable's TTL as declared."""

    def __init__(self) -> None:
        self.data: dict[tuple[str, Any, Any], tuple[tuple[Any, ...], int | None]] = {}
        self.ttls: dict[str, int | None] = {}
        self.timers: dict[Any, set[int]] = {}
        self.key: Any = None
        self.now = 0
        self.reads = 0
        self.writes = 0

    def reset(self) -> None:
        self.reads = self.writes = 0

    def live(self, name: str, key: Any = None) -> dict[Any, Any]:
        """The unexpired entries of one state variable (of one grouping key, or all)."""
        return {k[2] if key is not None else k[1:]: load_entry(v[0][0])
                for k, v in self.data.items()
                if k[0] == name and (key is None or k[1] == key)
                and (v[1] is None or self.now < v[1])}


    def paged(self, name: str, key: Any = None) -> dict[tuple[str, str], Any]:
        """Every series the pages of ``name`` (``counter_pages``, ``gauge_pages``) hold, of
        one grouping key or all, by (rule, series): the value stored for it (pages of an
        older generation than their rule's included; their series read as absent)."""
        out: dict[tuple[str, str], Any] = {}
        for k, page in self.live(name, key).items():
            rule = (k if key is not None else k[1])[0]
            for series, value in page["s"].items():
                out[rule, series] = value
        return out


class _State:
    def __init__(self, store: Store, name: str, ttl_ms: int | None) -> None:
        self.store = store
        self.name = name
        self.ttl_ms = ttl_ms

    def _get(self, user_key: Any) -> tuple[Any, ...] | None:
        self.store.reads += 1
        found = self.store.data.get((self.name, self.store.key, user_key))
        if found is None or (found[1] is not None and self.store.now >= found[1]):
            return None
        return found[0]

    def _put(self, user_key: Any, value: tuple[Any, ...]) -> None:
        self.store.writes += 1
        expires = None if self.ttl_ms is None else self.store.now + self.ttl_ms
        self.store.data[(self.name, self.store.key, user_key)] = (value, expires)

    def _entries(self) -> list[tuple[Any, tuple[Any, ...]]]:
        return [(k[2], v[0]) for k, v in list(self.store.data.items())
                if k[0] == self.name and k[1] == self.store.key
                and (v[1] is None or self.store.now < v[1])]


class MapState(_State):
    def getValue(self, key: tuple[Any, ...]) -> tuple[Any, ...] | None:
        return self._get(key)

    def updateValue(self, key: tuple[Any, ...], value: tuple[Any, ...]) -> None:
        self._put(key, value)

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.store.writes += 1
        self.store.data.pop((self.name, self.store.key, key), None)

    def iterator(self) -> Iterator[tuple[tuple[Any, ...], tuple[Any, ...]]]:
        return iter(self._entries())

    def keys(self) -> Iterator[tuple[Any, ...]]:
        return iter([k for k, _ in self._entries()])

    def clear(self) -> None:
        for k, _ in self._entries():
            self.removeKey(k)


class ValueState(_State):
    def exists(self) -> bool:
        return self._get(None) is not None

    def get(self) -> tuple[Any, ...] | None:
        return self._get(None)

    def update(self, value: tuple[Any, ...]) -> None:
        self._put(None, value)

    def clear(self) -> None:
        self.store.data.pop((self.name, self.store.key, None), None)


class Handle:
    """The processor's handle onto a :class:`Store`."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def getMapState(self, name: str, key_schema: Any, value_schema: Any,
                    ttl_ms: int | None = None) -> MapState:
        self.store.ttls[name] = ttl_ms
        return MapState(self.store, name, ttl_ms)

    def getValueState(self, name: str, schema: Any, ttl_ms: int | None = None) -> ValueState:
        self.store.ttls[name] = ttl_ms
        return ValueState(self.store, name, ttl_ms)

    def registerTimer(self, at: int) -> None:
        self.store.timers.setdefault(self.store.key, set()).add(at)

    def deleteTimer(self, at: int) -> None:
        self.store.timers.get(self.store.key, set()).discard(at)

    def listTimers(self) -> Iterator[int]:
        return iter(sorted(self.store.timers.get(self.store.key, set())))


def call(processor: Any, store: Store, key: tuple[int, int], rows: list[dict[str, Any]],
         now: int, watermark: int = 0) -> list[dict[str, Any]]:
    """One micro-batch's call for one key: the samples it emits."""
    store.key, store.now = key, now
    frames = [pd.DataFrame(rows)] if rows else []
    out = processor.handleInputRows(key, iter(frames), TimerValues(now, watermark))
    return output_samples(out)


def fire(processor: Any, store: Store, now: int, watermark: int) -> list[dict[str, Any]]:
    """The timers due at ``now``, as Spark fires them after a batch's input."""
    out = []
    for key, timers in sorted(store.timers.items()):
        for at in sorted(t for t in timers if t <= now):
            timers.discard(at)
            store.key, store.now = key, now
            out += list(processor.handleExpiredTimer(key, TimerValues(now, watermark),
                                                     ExpiredTimerInfo(at)))
    return out
