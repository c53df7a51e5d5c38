"""The state stage of format 9: ``transformWithStateInPandas``, a large rule's series in pages
of about 32 (a small rule's in its entry, the small rules of a few accounts in one bucket
entry), so a micro-batch reads and writes what it touches and nothing else.
:class:`MetricProcessor` dispatches each call: counter keys to
:class:`~l2m.state.counterkeys.CounterCall`, window keys and their timers to
:class:`~l2m.state.windowkeys.WindowCall`, each under the rule set its rows were planned with
(or, for a timer, the one its key was last written under), passed explicitly.

Input: the partials of one micro-batch (:data:`~l2m.engine.partials.PARTIAL_SCHEMA`, plus
``shard``, ``window`` and ``ruleset``, a key's partials packed in one row), grouped by the state
key (shard, window) — every series of an account in one shard
(:func:`l2m.engine.admission.placement_shard`), so series caps are counted in one key — and
that key's state variables (:mod:`l2m.state.variables`; layouts: :mod:`l2m.state.format`).
Output: the samples of every series the batch touched, and of every window published final
(:data:`~l2m.state.output.OUTPUT_SCHEMA`).

Format 2 kept one blob per key holding every series of the shard, decoded and rewritten
whenever any of them changed, so a batch's cost followed the live series. Here a batch costs
one read and one write of each page it touches (each a socket round trip to the JVM's
RocksDB, pipelined, :mod:`l2m.state.mapio`) whatever the state holds, and the changelog grows
by what changed; 100,000 new series of a rule are about 3,000 pages, not 100,000 entries.
Counter pages idle for ``counter_ttl`` are dropped by Spark's state TTL without calling
Python."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any

import pandas as pd
from pyspark import Accumulator
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.streaming.stateful_processor import ExpiredTimerInfo, TimerValues

from l2m.engine.admission import RuleCaps
from l2m.engine.rulesets import RuleVersion, Versions
from l2m.engine.status import STATUS_RULE
from l2m.process.collector import collector_paused
from l2m.state.caps import AccountIndex, CallCaps
from l2m.state.counterkeys import CounterCall
from l2m.state.counters import CounterState
from l2m.state.format import CUMULATIVE
from l2m.state.gauges import GaugeState
from l2m.state.keycall import Call, read_meta
from l2m.state.rows import (
    Reduction,
    at_version,
    by_rule,
    counted,
    planned_with,
    shipped_files,
    unpacked,
    versions_of,
)
from l2m.state.tally import Tally
from l2m.state.variables import Deferred, Variables, declare
from l2m.state.windowkeys import WindowCall


class MetricProcessor(StatefulProcessor):
    """Format 9's state processor (module docstring): counter keys (window
    :data:`~l2m.state.format.CUMULATIVE`) and gauge window keys. ``counters`` and
    ``gauges``: the per-rule semantics and their rules; ``caps``: each rule's series caps;
    ``reduction``: the partials' rows counted for the progress line; ``activity``: samples
    emitted and logs refused per rule, for the driver's metrics (:mod:`l2m.state.accounts`);
    ``shards``: the job's state shards (how many accounts a key's buckets are sized for).
    Rule tables that carry :class:`~l2m.engine.rulesets.Versions` are read under each call's
    rule set; plain mappings are the rules for good."""

    def __init__(self, counters: CounterState, gauges: GaugeState,
                 reduction: Reduction | None = None, caps: Mapping[str, RuleCaps] | None = None,
                 activity: Accumulator[Tally] | None = None, shards: int = 1) -> None:
        self.counters = counters
        self.gauges = gauges
        self.reduction = reduction
        self.caps = caps
        self.activity = activity
        self.shards = shards
        self._accounts = AccountIndex()  # each account's rules, per rule table: this task's

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.adopt(handle, declare(handle, self.counters.ttl_ms))

    def adopt(self, handle: StatefulProcessorHandle, variables: Variables) -> None:
        """Work with state variables declared elsewhere (:class:`~l2m.state.variables.
        Deferred`'s ``init``)."""
        self.handle = handle
        self.variables = variables

    def deferred(self) -> Deferred:
        """This processor as the query is given it: Spark's driver-side runner of its ``init``
        then imports only :mod:`l2m.state.variables`."""
        return Deferred(self, self.counters.ttl_ms)

    def close(self) -> None:
        pass

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame],
                        timerValues: TimerValues) -> Iterator[pd.DataFrame]:
        shard, window = int(key[0]), int(key[1])
        version, planned = planned_with(rows)
        versions = self._versions()
        call = self._call(None if versions is None
                          else versions.for_rows(version, shipped_files()))
        frames = counted(unpacked(planned), self.reduction,
                         (call.counters.rules, call.gauges.rules))
        now = timerValues.getCurrentProcessingTimeInMs()
        with collector_paused():
            if window == CUMULATIVE:
                by = by_rule(frames)
                # Only the input statuses read the watermark.
                watermark = timerValues.getCurrentWatermarkInMs() if STATUS_RULE in by else 0
                return CounterCall(call, self.variables, self.handle).rows(shard, by, now,
                                                                           watermark)
            return WindowCall(call, self.variables, self.handle).rows(
                shard, window, frames, now, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(self, key: Any, timerValues: TimerValues,
                           expiredTimerInfo: ExpiredTimerInfo) -> Iterator[pd.DataFrame]:
        shard, window = int(key[0]), int(key[1])
        if window == CUMULATIVE:
            return iter(())
        with collector_paused():
            meta = read_meta(self.variables)[0]
            versions = self._versions()
            # No rows to name their rule set: the one the key was last written under.
            call = self._call(None if versions is None
                              else versions.for_key(meta.get("rs"), shipped_files()))
            return WindowCall(call, self.variables, self.handle).expired(
                shard, window, timerValues.getCurrentProcessingTimeInMs(),
                timerValues.getCurrentWatermarkInMs(), meta)

    def _versions(self) -> Versions | None:
        """How this worker finds the job's rule sets (None: fixed rules)."""
        for table in (self.counters.rules, self.gauges.rules, self.caps or {}):
            versions = versions_of(table)
            if versions is not None:
                return versions
        return None

    def _call(self, version: RuleVersion | None) -> Call:
        """What a call under the rule set ``version`` runs with: each table read under it."""
        counters = replace(self.counters, rules=at_version(self.counters.rules, version))
        gauges = replace(self.gauges, rules=at_version(self.gauges.rules, version))
        caps = None if self.caps is None else at_version(self.caps, version)
        return Call(counters, gauges, CallCaps(caps, self._accounts), version, self.shards,
                    self.activity)
