"""The streaming read task: a batch's records → the partials of the rules its batch was planned
with, tagged with that version and each rule's state shard.

Input: the job's :class:`~l2m.engine.rulesets.Versions`, the batch's version and the folder of
Spark's shipped files. Output: partials with three more columns (:data:`STREAM_PARTIAL_ARROW`,
:data:`~l2m.engine.columns.STREAM_PARTIAL_SCHEMA`): ``ruleset``; ``place``, the state shard a
rule's series belong to (its account's: computed here, from the version's rules, so that a rule
added while the job runs is placed like one it started with); ``pack``: with the current state
format (the processor's) the rows of one state key come gathered in one row (:func:`packed`)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.admission import account_shard, placement_shard
from l2m.engine.columns import PACK_COLUMN, PACK_RULE, PLACE_COLUMN, RULESET_COLUMN
from l2m.engine.ipc import batched, binary_column, streams
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


# A key's rows in a task travel as rows below this many (a pack's schema and framing cost
# ≈ 1.5 KB and ≈ 0.1 ms to read: more than a few rows themselves), packed from it on.
MIN_PACK_ROWS = 32
_NO_WINDOW = np.iinfo(np.int64).min  # counters' null window, for finding the keys' runs


def packed(batches: list[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task's tagged partials with the placed rows (the rules' own, not l2m's) of each
    (place, window) gathered into packed rows: ``rule`` :data:`~l2m.engine.columns.PACK_RULE`,
    their partials (:data:`~l2m.engine.partials.PARTIAL_ARROW` columns) in ``pack``
    (:func:`l2m.engine.ipc.streams`: one value per :data:`~l2m.engine.ipc.PACK_ROWS` rows),
    and in ``ts`` the latest event time among them as the job's watermark reads a row's
    (``coalesce(ts, greatest(window, 0))``), so the watermark moves as it would with the rows
    themselves. l2m's own rows (Spark places them by hash) and the keys of fewer than
    :data:`MIN_PACK_ROWS` rows pass as they are.

    Why: pyspark hands ``transformWithStateInPandas`` its
    rows one by one (a tuple per row, a pandas frame built from the tuples per key), and the
    JVM converts each row on the way; a pack is decoded at once by
    :func:`l2m.state.rows.unpacked`. The 100,000-rule drain: 22,198 and 22,425 → 24,286
    and 24,283 logs/s (alternating runs)."""
    table = pa.Table.from_batches(batches, schema=STREAM_PARTIAL_ARROW)
    placed = pc.is_valid(table.column(PLACE_COLUMN))
    rows = table.filter(placed)
    rows = rows.take(pc.sort_indices(rows, [(PLACE_COLUMN, "ascending", "at_start"),
                                            ("window", "ascending", "at_start")]))
    places_ = rows.column(PLACE_COLUMN).to_numpy()
    windows = rows.column("window").fill_null(_NO_WINDOW).to_numpy()
    n = rows.num_rows
    change = np.ones(n, bool)
    change[1:] = (places_[1:] != places_[:-1]) | (windows[1:] != windows[:-1])
    starts = np.flatnonzero(change).tolist()
    ends = [*starts[1:], n] if n else []
    loose = [table.filter(pc.invert(placed))]  # passed as rows
    event_time = pc.coalesce(rows.column("ts"), pc.max_element_wise(rows.column("window"), 0))
    partials = rows.select(PARTIAL_ARROW.names)
    keys: list[tuple[int, int | None, int]] = []  # place, window, latest event time per pack
    values: list[pa.Buffer] = []
    for start, end in zip(starts, ends, strict=True):
        if end - start < MIN_PACK_ROWS:
            loose.append(rows.slice(start, end - start))
            continue
        window = None if windows[start] == _NO_WINDOW else int(windows[start])
        # Each of the key's packs carries the latest of them all.
        latest = pc.max(event_time.slice(start, end - start)).as_py()
        for value in streams(partials.slice(start, end - start)):
            keys.append((int(places_[start]), window, latest))
            values.append(value)
    for part in loose:
        yield from part.to_batches()
    if not values:
        return
    version = rows.column(RULESET_COLUMN)[0].as_py()
    done = 0
    for run in batched(values):
        run_keys = keys[done:done + len(run)]
        done += len(run)
        yield _pack_rows(run_keys, run, version)


def _pack_rows(keys: list[tuple[int, int | None, int]], values: list[pa.Buffer],
               version: str) -> pa.RecordBatch:
    n = len(keys)
    columns = {name: pa.nulls(n, PARTIAL_ARROW.field(name).type) for name in PARTIAL_ARROW.names}
    columns.update({"rule": pa.array([PACK_RULE] * n, pa.string()),
                    "series": pa.array([""] * n, pa.string()),
                    "window": pa.array([w for _p, w, _t in keys], pa.int64()),
                    "matches": pa.array([0] * n, pa.int64()), "n": pa.array([0] * n, pa.int64()),
                    "sum": pa.array([0.0] * n, pa.float64()),
                    "exact_n": pa.array([0] * n, pa.int64()),
                    "ts": pa.array([t for _p, _w, t in keys], pa.int64()),
                    RULESET_COLUMN: pa.array([version] * n, pa.string()),
                    PLACE_COLUMN: pa.array([p for p, _w, _t in keys], pa.int32()),
                    PACK_COLUMN: binary_column(values)})
    return pa.RecordBatch.from_arrays([columns[f.name] for f in STREAM_PARTIAL_ARROW],
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
        # An account's rules share a shard: one hash per account (10,000 of 100,000 rules).
        by_account: dict[str, int] = {}
        found = _PLACES[key] = {}
        for rule in routing.rules:
            account = rule.account
            if account is None:
                found[rule.id] = placement_shard(rule, shards)
                continue
            shard = by_account.get(account)
            if shard is None:
                shard = by_account[account] = account_shard(account, shards)
            found[rule.id] = shard
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
        self.pack = pack  # gather each state key's rows (packed): the current state format

    def finish(self) -> Iterator[pa.RecordBatch]:
        tagged = (tag(batch, self.version, self.places) for batch in super().finish())
        if self.pack:
            yield from packed(list(tagged))
        else:
            yield from tagged
