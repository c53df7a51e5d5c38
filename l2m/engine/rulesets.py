"""Rule sets by version, on the workers: the streaming job's rules change while it runs
(docs/streaming.md "Live rule changes"), and every micro-batch names the version it was
planned with.

Input: a version (:func:`l2m.rules.snapshot.version_of`) — from the batch's source offset
(read tasks) or the ``ruleset`` column of its partials (the state stage) — and the folder where
Spark put the files the driver shipped (``SparkFiles``' root: the caller's, since the engine
never imports pyspark). Output: that version's :class:`~l2m.engine.routing.Routing`, decoded
once per process (:func:`~l2m.engine.pipeline.routing_from_option`); and the two columns the
streaming read tasks add to their partials (:data:`STREAM_PARTIAL_SCHEMA`): ``ruleset`` and
``place``, the state shard a rule's series belong to (its account's: computed here, from the
version's rules, so that a rule added while the job runs is placed like one it started
with)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.admission import placement_shard
from l2m.engine.partials import PARTIAL_ARROW, PARTIAL_SCHEMA
from l2m.engine.pipeline import routing_from_option
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing
from l2m.errors import RuleSnapshotError

RULESET_COLUMN = "ruleset"
PLACE_COLUMN = "place"
# The streaming source's rows: the partials, the rule set they were made with, their shard.
STREAM_PARTIAL_SCHEMA = f"{PARTIAL_SCHEMA}, {RULESET_COLUMN} string, {PLACE_COLUMN} int"
STREAM_PARTIAL_ARROW = PARTIAL_ARROW.append(pa.field(RULESET_COLUMN, pa.string())).append(
    pa.field(PLACE_COLUMN, pa.int32()))


def routing_file(version: str) -> str:
    """The name under which the driver ships a version's compiled rules (``SparkContext.
    addFile``): its routing option (:func:`~l2m.engine.pipeline.routing_option`)."""
    return f"l2m-routing-{version}"


@dataclass(frozen=True)
class Versions:
    """How a worker finds a version's routing: the job's rules at start travel inline (the
    query's options); every later version is a file Spark shipped."""

    version: str  # the rules the query started with
    option: str  # … and their routing option

    def routing(self, version: str | None, files_dir: str | None) -> Routing:
        """The routing of ``version`` (None: the query's first), read from ``files_dir``."""
        if version is None or version == self.version:
            return routing_from_option(self.option)
        if files_dir is None:
            raise RuleSnapshotError(f"rule set {version}: no shipped files here (not a Spark "
                                    "worker)")
        path = os.path.join(files_dir, routing_file(version))
        try:
            with open(path) as file:
                return routing_from_option(file.read())
        except FileNotFoundError:
            raise RuleSnapshotError(f"rule set {version} was not shipped to this worker "
                                    f"({path} missing)") from None

    def has(self, version: str, files_dir: str | None) -> bool:
        """Whether this worker can read ``version``: the query's first, or a shipped file."""
        return version == self.version or (
            files_dir is not None and os.path.exists(os.path.join(files_dir,
                                                                  routing_file(version))))

    def current(self) -> str:
        """The version the state stage's rows at hand were planned with (:func:`select`)."""
        return _selected[0] or self.version

    def selected_routing(self) -> Routing:
        """The routing of :meth:`current`."""
        return self.routing(_selected[0], _selected[1])


# The rule set the state stage's current call reads (set from its rows' ``ruleset``; a call
# with timers only keeps the last one this process saw), and where shipped files are.
_selected: tuple[str | None, str | None] = (None, None)


def select(version: str | None, files_dir: str | None) -> None:
    """The state stage: the rows at hand were planned with ``version``; Spark's shipped files
    are in ``files_dir``."""
    global _selected
    if version is not None:
        _selected = (version, files_dir)


def planned_version(ruleset_file: str | None, first: str) -> str:
    """The version a source plans its next batch with: the driver's latest good rule set
    (``ruleset_file``, written by l2m.streaming.rulesets), else the query's ``first``."""
    if ruleset_file:
        try:
            with open(ruleset_file) as file:
                return file.read().strip() or first
        except FileNotFoundError:
            pass
    return first


def tag(batch: pa.RecordBatch, version: str, places: Mapping[str, int]) -> pa.RecordBatch:
    """A read task's partials with their ``ruleset`` and ``place`` (null for l2m's own rows:
    input statuses and label cuts, spread by Spark)."""
    rules = batch.column(0)
    # Looked up per distinct rule: a value set of every rule (100,000) hashed per batch cost
    # more than the batch's own rows.
    distinct = pc.unique(rules)
    shards = pa.array([places.get(r) for r in distinct.to_pylist()], pa.int32())
    place = pc.take(shards, pc.index_in(rules, value_set=distinct))
    return pa.RecordBatch.from_arrays(
        [*batch.columns, pa.array([version] * batch.num_rows, pa.string()), place],
        schema=STREAM_PARTIAL_ARROW)


_PLACES: dict[tuple[str, int], dict[str, int]] = {}


def places(version: str, routing: Routing, shards: int) -> dict[str, int]:
    """Each rule of ``version`` (its ``routing``) and its state shard
    (:func:`~l2m.engine.admission.placement_shard`), once per version and process."""
    key = (version, shards)
    found = _PLACES.get(key)
    if found is None:
        if len(_PLACES) > 4:
            _PLACES.clear()
        found = _PLACES[key] = {r.id: placement_shard(r, shards) for r in routing.rules}
    return found


class StreamTask(ReadTask):
    """A streaming read task: the partials of the rules its batch was planned with, tagged
    (:func:`tag`) with that version and each rule's shard."""

    def __init__(self, versions: Versions, version: str | None, files_dir: str | None,
                 shards: int) -> None:
        self.version = version or versions.version
        routing = versions.routing(self.version, files_dir)
        super().__init__(routing.plan, routing)
        self.places = places(self.version, routing, shards)

    def finish(self) -> Iterator[pa.RecordBatch]:
        for batch in super().finish():
            yield tag(batch, self.version, self.places)
