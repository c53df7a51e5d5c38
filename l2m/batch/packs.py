"""Arrow tables handed through Spark as a few binary values instead of row by row.

Backfill's partials go from the read tasks through a shuffle to the last stage, and its
samples from there to the driver. Row by row, the JVM converts every row from Arrow to its
own rows and back (the unique-id backfill: 458,000 partials and 350,000 sample lines of
88 MB, ≈ 2 CPU-s of JVM work). Packed, a task's rows for one
destination are one Arrow IPC stream (LZ4, :mod:`l2m.engine.ipc`) in one binary value, which the
JVM copies as it is.

A shuffle still needs a column to partition by: :func:`partition_keys` gives, for each of
``n`` destinations, an int that Spark's hash partitioning (``repartition(n, column)``: the
Murmur3 hash of the value, seed 42, modulo ``n``) sends to that destination's partition, so
that ``n`` destinations fill ``n`` tasks, none idle, none doubled.

Input: Arrow tables. Output: :data:`PACKED_SCHEMA` rows (``key`` the destination's
partition key, ``pack`` the rows), and the tables back from them."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Iterator

import numpy as np
import pyarrow as pa

from l2m.engine.ipc import batched, binary_column, streams, table_of

PACKED_SCHEMA = "key int, pack binary"
PACKED_ARROW = pa.schema([("key", pa.int32()), ("pack", pa.binary())])
_SEED = 42  # Spark's HashPartitioning: Murmur3Hash(children, 42)
_MASK = 0xFFFFFFFF


def pack(table: pa.Table, key: int = 0) -> Iterator[pa.RecordBatch]:
    """``table``'s rows as :data:`PACKED_SCHEMA` rows for the destination ``key``, one per
    :data:`~l2m.engine.ipc.PACK_ROWS` rows (none for an empty table), in batches of at most
    :data:`~l2m.engine.ipc.BATCH_BYTES` of packs (a binary column's offsets are 32-bit)."""
    for run in batched(list(streams(table))):
        yield pa.RecordBatch.from_arrays(
            [pa.array(np.full(len(run), key, np.int32)), binary_column(run)],
            schema=PACKED_ARROW)


def unpack(batches: Iterable[pa.RecordBatch], schema: pa.Schema) -> pa.Table:
    """The rows of :data:`PACKED_SCHEMA` batches, each pack's stream of ``schema``."""
    tables = [table_of(value.as_buffer())
              for batch in batches for value in batch.column("pack") if value.is_valid]
    return pa.concat_tables(tables) if tables else schema.empty_table()


@functools.cache
def partition_keys(n: int) -> tuple[int, ...]:
    """For each partition ``i`` of ``n``, the least non-negative int that ``repartition(n,
    column)`` sends there (an int column: Spark's ``Murmur3_x86_32.hashInt``)."""
    keys: dict[int, int] = {}
    value = 0
    while len(keys) < n:
        keys.setdefault(_hash_int(value) % n, value)  # Python's % is Spark's pmod here
        value += 1
    return tuple(keys[i] for i in range(n))


def _hash_int(value: int) -> int:
    """Spark's Murmur3 hash of an int (seed 42), as the signed int it is in Java."""
    k1 = _mix_k1(value & _MASK)
    h1 = _mix_h1(_SEED, k1)
    h1 ^= 4  # the input's length in bytes
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & _MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & _MASK
    h1 ^= h1 >> 16
    return h1 - (1 << 32) if h1 & 0x80000000 else h1


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k1(k1: int) -> int:
    k1 = (k1 * 0xCC9E2D51) & _MASK
    k1 = _rotl(k1, 15)
    return (k1 * 0x1B873593) & _MASK


def _mix_h1(h1: int, k1: int) -> int:
    h1 ^= k1
    h1 = _rotl(h1, 13)
    return (h1 * 5 + 0xE6546B64) & _MASK
