"""Arrow tables as single values: Arrow IPC streams (LZ4), which Spark moves as binary values
instead of converting every row to its own rows and back.

Input: an Arrow table (or stream values). Output: its rows as stream values of bounded size,
and those values as a binary column (or the tables back). Used by the streaming read tasks'
packs (:func:`l2m.engine.streamtask.packed`) and backfill's (:mod:`l2m.batch.packs`)."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pyarrow as pa

# LZ4: a pack of 95,000 partials is 9.8 MB plain, 2.0 MB compressed, for ≈ 7 ms more to write
# and read; on a cluster the bytes cross the network.
OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")
PACK_ROWS = 50_000  # rows per stream at most: a stream is one value, and a value is < 2 GiB
BATCH_BYTES = 1 << 30  # a batch's values together at most (a binary column's offsets: 32-bit)


def stream(table: pa.Table) -> pa.Buffer:
    """``table`` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def streams(rows: pa.Table) -> Iterator[pa.Buffer]:
    """``rows`` as streams of at most :data:`PACK_ROWS` rows and :data:`BATCH_BYTES` each
    (halved until they fit: rows are bounded — label values are cut — so one row always
    fits), in order."""
    for start in range(0, rows.num_rows, PACK_ROWS):
        yield from _bounded(rows.slice(start, PACK_ROWS))


def _bounded(rows: pa.Table) -> Iterator[pa.Buffer]:
    value = stream(rows)
    if value.size <= BATCH_BYTES or rows.num_rows <= 1:
        yield value
        return
    half = rows.num_rows // 2
    yield from _bounded(rows.slice(0, half))
    yield from _bounded(rows.slice(half))


def batched(values: list[pa.Buffer]) -> Iterator[list[pa.Buffer]]:
    """``values`` in order, in runs of at most :data:`BATCH_BYTES` together (a value alone
    may be up to that much)."""
    run: list[pa.Buffer] = []
    size = 0
    for value in values:
        if run and size + value.size > BATCH_BYTES:
            yield run
            run, size = [], 0
        run.append(value)
        size += value.size
    if run:
        yield run


def binary_column(values: list[pa.Buffer]) -> pa.Array:
    """``values`` (at most :data:`BATCH_BYTES` together: :func:`batched`) as a binary array,
    copied once."""
    offsets = np.zeros(len(values) + 1, np.int64)
    offsets[1:] = np.cumsum([v.size for v in values])
    data = values[0] if len(values) == 1 else pa.py_buffer(b"".join(map(memoryview, values)))
    return pa.Array.from_buffers(pa.binary(), len(values),
                                 [None, pa.py_buffer(offsets.astype(np.int32).tobytes()), data])


def table_of(value: bytes | pa.Buffer) -> pa.Table:
    """The table of a :func:`stream` value."""
    return pa.ipc.open_stream(value).read_all()
