"""Arrow tables as single values: one Arrow IPC stream (LZ4) each, which Spark moves as one
binary value instead of converting every row to its own rows and back.

Input: an Arrow table (or the stream value). Output: the stream value (or the table). Used by
the streaming read tasks' packs (:func:`l2m.engine.streamtask.packed`) and backfill's
(:mod:`l2m.batch.packs`)."""

from __future__ import annotations

import pyarrow as pa

# LZ4: a pack of 95,000 partials is 9.8 MB plain, 2.0 MB compressed, for ≈ 7 ms more to write
# and read (benchmarks/README.md, "Session 19"); on a cluster the bytes cross the network.
OPTIONS = pa.ipc.IpcWriteOptions(compression="lz4")


def stream(table: pa.Table) -> pa.Buffer:
    """``table`` as one Arrow IPC stream."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=OPTIONS) as writer:
        writer.write_table(table)
    return sink.getvalue()


def table_of(value: bytes | pa.Buffer) -> pa.Table:
    """The table of a :func:`stream` value."""
    return pa.ipc.open_stream(value).read_all()
