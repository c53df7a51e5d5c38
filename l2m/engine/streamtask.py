"""The streaming read task: a batch's records → the partials of the rules its batch was planned
with, tagged with that version and each rule's state shard.

Input: the job's :class:`~l2m.engine.rulesets.Versions`, the batch's version and the folder of
Spark's shipped files. Output: partials with two more columns (:data:`STREAM_PARTIAL_ARROW`,
:data:`~l2m.engine.columns.STREAM_PARTIAL_SCHEMA`): ``ruleset`` and ``place``, the state shard a
rule's series belong to (its account's: computed here, from the version's rules, so that a rule
added while the job runs is placed like one it started with)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.admission import placement_shard
from l2m.engine.columns import PLACE_COLUMN, RULESET_COLUMN
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing
from l2m.engine.rulesets import Versions

STREAM_PARTIAL_ARROW = PARTIAL_ARROW.append(pa.field(RULESET_COLUMN, pa.string())).append(
    pa.field(PLACE_COLUMN, pa.int32()))


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
