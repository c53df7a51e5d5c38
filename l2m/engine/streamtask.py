"""The streaming read task: a batch's records → the partials of the rules its batch was planned
with, tagged with that version and each rule's state shard.

Input: the job's :class:`~l2m.engine.rulesets.Versions`, the batch's version and the folder of
Spark's shipped files. Output: partials with three more columns (:data:`STREAM_PARTIAL_ARROW`,
:data:`~l2m.engine.columns.STREAM_PARTIAL_SCHEMA`): ``ruleset``; ``place``, the state shard a
rule's series belong to (its account's: computed here, from the version's rules, so that a rule
added while the job runs is placed like one it started with); ``pack``: with state formats 4
and later the rows of one state key come gathered in one row (:func:`packed`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.admission import placement_shard
from l2m.engine.columns import PACK_COLUMN, PACK_RULE, PLACE_COLUMN, RULESET_COLUMN
from l2m.engine.ipc import stream
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing
from l2m.engine.rulesets import Versions

STREAM_PARTIAL_ARROW = PARTIAL_ARROW.append(pa.field(RULESET_COLUMN, pa.string())).append(
    pa.field(PLACE_COLUMN, pa.int32())).append(pa.field(PACK_COLUMN, pa.binary()))


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
        [*batch.columns, pa.array([version] * batch.num_rows, pa.string()), place,
         pa.nulls(batch.num_rows, pa.binary())],
        schema=STREAM_PARTIAL_ARROW)


def packed(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's tagged partials with the placed rows (the rules' own, not l2m's) of each
    (place, window) gathered into one row: ``rule`` :data:`~l2m.engine.columns.PACK_RULE`,
    their partials (:data:`~l2m.engine.partials.PARTIAL_ARROW` columns) in ``pack`` as one
    value (:func:`l2m.engine.ipc.stream`), and in ``ts`` the latest event time among them as
    the job's watermark reads a row's (``coalesce(ts, greatest(window, 0))``), so the
    watermark moves as it would with the rows themselves. l2m's own rows pass as they are:
    Spark places them by hash.

    Why (benchmarks/README.md, "Session 19"): pyspark hands ``transformWithStateInPandas`` its
    rows one by one (a tuple per row, a pandas frame built from the tuples per key), and the
    JVM converts each row on the way; a key's pack is decoded at once by
    :func:`l2m.state.function.unpacked`. The 100,000-rule drain: 22,198 and 22,425 → 24,286
    and 24,283 logs/s (alternating runs)."""
    table = pa.Table.from_batches(batches, schema=STREAM_PARTIAL_ARROW)
    placed = pc.is_valid(table.column(PLACE_COLUMN))
    own = table.filter(pc.invert(placed))
    rows = table.filter(placed)
    if own.num_rows:
        yield from own.to_batches()
    if not rows.num_rows:
        return
    rows = rows.take(pc.sort_indices(rows, [(PLACE_COLUMN, "ascending", "at_start"),
                                            ("window", "ascending", "at_start")]))
    event_time = pc.coalesce(rows.column("ts"), pc.max_element_wise(rows.column("window"), 0))
    places_, windows = rows.column(PLACE_COLUMN).to_pylist(), rows.column("window").to_pylist()
    version = rows.column(RULESET_COLUMN)[0].as_py()
    partials = rows.select(PARTIAL_ARROW.names)
    keys: list[tuple[int, int | None]] = []
    starts = [i for i in range(len(places_))
              if not i or (places_[i], windows[i]) != (places_[i - 1], windows[i - 1])]
    packs, latest = [], []
    for start, end in zip(starts, [*starts[1:], len(places_)], strict=True):
        keys.append((places_[start], windows[start]))
        packs.append(stream(partials.slice(start, end - start)).to_pybytes())
        latest.append(pc.max(event_time.slice(start, end - start)).as_py())
    n = len(keys)
    columns = {name: pa.nulls(n, PARTIAL_ARROW.field(name).type) for name in PARTIAL_ARROW.names}
    columns.update({"rule": pa.array([PACK_RULE] * n, pa.string()),
                    "series": pa.array([""] * n, pa.string()),
                    "window": pa.array([w for _p, w in keys], pa.int64()),
                    "matches": pa.array([0] * n, pa.int64()), "n": pa.array([0] * n, pa.int64()),
                    "sum": pa.array([0.0] * n, pa.float64()),
                    "exact_n": pa.array([0] * n, pa.int64()),
                    "ts": pa.array(latest, pa.int64()),
                    RULESET_COLUMN: pa.array([version] * n, pa.string()),
                    PLACE_COLUMN: pa.array([p for p, _w in keys], pa.int32()),
                    PACK_COLUMN: pa.array(packs, pa.binary())})
    yield pa.RecordBatch.from_arrays([columns[f.name].cast(f.type) for f in STREAM_PARTIAL_ARROW],
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
                 shards: int, pack: bool = False) -> None:
        self.version = version or versions.version
        routing = versions.routing(self.version, files_dir)
        super().__init__(routing.plan, routing)
        self.places = places(self.version, routing, shards)
        self.pack = pack  # gather each state key's rows (packed): state formats 4 and later

    def finish(self) -> Iterator[pa.RecordBatch]:
        tagged = [tag(batch, self.version, self.places) for batch in super().finish()]
        if self.pack:
            yield from packed(tagged)
        else:
            yield from tagged
