"""The read task's pipeline: parsed logs → partials, without leaving Python.

    parse (:func:`l2m.engine.parse.parse_lines`) → fan out (:mod:`l2m.engine.fanout`)
    → pre-aggregate (:mod:`l2m.engine.preaggregate`) → merge at the end of the task

Input: the parsed batches of one read task (``ParsePlan.schema()``, in the reader's batches
of up to ten thousand logs) and the job's :class:`~l2m.engine.routing.Routing`. Output: one
partial per (rule, series, le, window) over the whole task (:data:`PARTIAL_ARROW`) — about
one row per two hundred logs with the benchmark rules — which is all that reaches the JVM,
the shuffle and the state.

Logs are fanned out in chunks of :data:`CHUNK_ROWS`: per-rule work is per call, not per log,
so larger chunks amortise it (with a thousand account-scoped rule sets, each account's slice
of a chunk is what a rule is evaluated on). The rules travel to the executors as one option
string (:func:`routing_option`), decoded once per Python worker process."""

from __future__ import annotations

import base64
import gc
import hashlib
import pickle
import zlib
from collections.abc import Iterator, Mapping
from typing import Any, Protocol, TypeVar

import pyarrow as pa

from l2m.engine.admission import RuleCaps
from l2m.engine.fanout import fan_out
from l2m.engine.partials import PARTIAL_ARROW, merge
from l2m.engine.preaggregate import preaggregate
from l2m.engine.routing import Delegating, Routing, plain_caps
from l2m.process.collector import collector_paused
from l2m.rules.model import Rule


class RuleVersion(Protocol):
    """The rule set a state call runs under (:class:`l2m.engine.rulesets.RuleVersion`, which
    imports this module: described here by what a table reads of it)."""

    @property
    def version(self) -> str:
        """The rule set's version."""


class Versions(Protocol):
    """How a worker finds a rule set's routing (:class:`l2m.engine.rulesets.Versions`)."""

    @property
    def version(self) -> str:
        """The rules the query started with."""

    def routing_at(self, at: Any) -> Routing:
        """The routing of the rule set ``at`` (None: the query's first)."""

V = TypeVar("V")
# Logs pre-aggregated at a time. A task's chunks are merged at its end, a grouping over all
# their partials — with a rule grouping by a unique id, one per log — so a task of up to this
# many logs is one chunk: a streaming task (at most 100,000 by default) and backfill's splits
# of up to 70 MB. A 125,000-log task of the unique-id rules: 0.94-0.97 -> 0.73-0.80 CPU-s
# (two chunks of 100,000 before), the same peak memory (+330 MB over its lines either way).
CHUNK_ROWS = 160_000
OUT_ROWS = 10_000  # rows per Arrow batch handed to Spark


class TaskPipeline:
    """Accumulates one task's parsed batches into its partials."""

    def __init__(self, routing: Routing, chunk_rows: int = CHUNK_ROWS) -> None:
        self.routing = routing
        self.exact = routing.exact_rules
        self.chunk_rows = chunk_rows
        self._pending: list[pa.RecordBatch] = []
        self._pending_rows = 0
        self._partials: list[pa.Table] = []
        self.logs = 0
        self.match_rows = 0

    def add(self, parsed: pa.RecordBatch) -> None:
        """One parsed batch of the task."""
        if not parsed.num_rows:
            return
        self._pending.append(parsed)
        self._pending_rows += parsed.num_rows
        if self._pending_rows >= self.chunk_rows:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        chunk = pa.Table.from_batches(self._pending)
        self._pending, self._pending_rows = [], 0
        self.logs += chunk.num_rows
        rows = fan_out(chunk, self.routing, with_status=True, coded=True)
        self.match_rows += rows.num_rows
        self._partials.append(preaggregate(rows, self.exact))
        if len(self._partials) > 8:  # keep memory bounded on long tasks
            self._partials = [merge(self._partials)]

    def finish(self) -> Iterator[pa.RecordBatch]:
        """The task's partials, in batches of at most :data:`OUT_ROWS`."""
        self._flush()
        table = merge(self._partials).cast(PARTIAL_ARROW)
        self._partials = []
        yield from table.to_batches(max_chunksize=OUT_ROWS)


def routing_option(routing: Routing) -> str:
    """The routing as a data-source option value (compressed pickle, base64)."""
    with collector_paused():  # pickle's memo: 0.9 → 0.4 s for 100,000 rules
        return base64.b64encode(zlib.compress(pickle.dumps(routing, protocol=5), 1)).decode()


_DECODED: dict[str, Routing] = {}
KEEP_ROUTINGS = 3


def routing_from_option(value: str) -> Routing:
    """The routing of :func:`routing_option`, decoded once per process (Python workers are
    reused across tasks and batches; ten thousand rules take a while to unpickle)."""
    digest = hashlib.sha256(value.encode()).hexdigest()
    found = _DECODED.get(digest)
    if found is None:
        # The rules live as long as the worker, and pyspark runs a full gc.collect() after
        # every task: with 10,000 rules that scan took 180 ms per task. Frozen below, the
        # cyclic collector skips them (and whatever else is alive then: garbage of this
        # moment would be frozen too, never freed, hence the collection first, while the heap
        # is small). Decoded with the collector off: unpickling makes millions of objects
        # and no cyclic garbage, and the collections it set off took 1.3 s of a 100,000-rule
        # routing's 1.5 s per worker (0.4 s without them).
        gc.collect()
        with collector_paused():
            found = pickle.loads(zlib.decompress(base64.b64decode(value)))
            assert isinstance(found, Routing)
            # One job per process; its rules change while it runs (l2m.engine.rulesets):
            # keep the newest few, for batches of the previous version still in flight or
            # replayed.
            while len(_DECODED) >= KEEP_ROUTINGS:
                _DECODED.pop(next(iter(_DECODED)))
            _DECODED[digest] = found
            # The tables each stage reads (Routing's cached properties) are built on first
            # use, after the freeze: a read worker never builds the state stage's, nor a state
            # worker the read stage's; the few dicts they are stay cheap to scan.
            gc.freeze()
    return found


class RoutingTable(Delegating[V]):
    """A table the state stage reads from the job's routing (rules of a kind, series caps): it
    travels as the routing option and is decoded once per Python worker, not unpickled with
    the state function for every task (ten thousand rules took 0.5 s per task that way), and
    kept once built (a lookup per series must not re-hash the option).

    The rules change while the job runs: ``versions`` finds the routing of the version a state
    call runs under, which the call passes (:meth:`at`); without ``versions``, the table is the
    option's rules. As a mapping, the table is the query's first rules."""

    def __init__(self, option: str, versions: Versions | None = None) -> None:
        self.option = option
        self.versions = versions
        self._built: dict[str | None, Mapping[str, V]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_built": {}}

    def _build(self, routing: Routing) -> Mapping[str, V]:
        raise NotImplementedError

    def _table(self) -> Mapping[str, V]:
        return self.at(None)

    def at(self, version: RuleVersion | None) -> Mapping[str, V]:
        """The table of the rule set ``version`` (None: the query's first), as a plain mapping:
        a call's hot loops look rules up hundreds of thousands of times."""
        key = None if self.versions is None else \
            version.version if version is not None else self.versions.version
        built = self._built.get(key)
        if built is None:
            routing = routing_from_option(self.option) if self.versions is None \
                else self.versions.routing_at(version)
            if len(self._built) >= KEEP_ROUTINGS:
                self._built.clear()
            built = self._built[key] = self._build(routing)
        return built


class RuleTable(RoutingTable[Rule]):
    """The job's rules of one kind (``counter``, ``gauge``) by id."""

    def __init__(self, option: str, kind: str, versions: Versions | None = None) -> None:
        super().__init__(option, versions)
        self.kind = kind

    def _build(self, routing: Routing) -> Mapping[str, Rule]:
        return routing.by_kind.get(self.kind, {})


class CapsTable(RoutingTable[RuleCaps]):
    """The job's series caps by rule id (:attr:`Routing.caps`)."""

    def _build(self, routing: Routing) -> Mapping[str, RuleCaps]:
        return plain_caps(routing.caps)
