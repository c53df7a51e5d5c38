"""Arrow tables through Spark as packed binary values (l2m.batch.packs): the rows come back
as they went, in order, however many packs they take."""

from __future__ import annotations

import pyarrow as pa
import pytest

from l2m.batch import packs
from l2m.batch.packs import PACKED_ARROW, pack, partition_keys, unpack
from l2m.engine import ipc

SCHEMA = pa.schema([("n", pa.int64()), ("line", pa.binary()), ("label", pa.string())])


def _table(rows: int) -> pa.Table:
    return pa.table({"n": list(range(rows)),
                     "line": [f'{{"v":{i}}}'.encode() if i % 7 else None for i in range(rows)],
                     "label": [f"é{i}" for i in range(rows)]}, schema=SCHEMA)


@pytest.mark.parametrize("rows", [1, 9, 10, 11, 35])
def test_rows_come_back_as_they_went_in_one_pack_or_several(monkeypatch, rows):
    monkeypatch.setattr(ipc, "PACK_ROWS", 10)
    table = _table(rows)
    (batch,) = pack(table, key=17)
    assert batch.schema == PACKED_ARROW
    assert batch.num_rows == -(-rows // 10)
    assert batch.column("key").to_pylist() == [17] * batch.num_rows
    assert unpack([batch], SCHEMA).equals(table)


def test_packs_past_a_batch_s_bytes_go_in_further_batches(monkeypatch):
    # A binary column's offsets are 32-bit: its values together stay under 2 GiB.
    monkeypatch.setattr(ipc, "PACK_ROWS", 10)
    monkeypatch.setattr(ipc, "BATCH_BYTES", 1500)
    table = _table(95)
    batches = list(pack(table, key=3))
    assert len(batches) > 1
    assert all(sum(len(v.as_py()) for v in b.column("pack")) <= 1500 or b.num_rows == 1
               for b in batches)
    assert unpack(batches, SCHEMA).equals(table)


def test_a_pack_past_a_batch_s_bytes_is_halved_until_it_fits(monkeypatch):
    monkeypatch.setattr(ipc, "BATCH_BYTES", 1500)
    table = _table(95)  # one pack of PACK_ROWS would be one stream of more than 1500 bytes
    batches = list(pack(table, key=3))
    assert sum(b.num_rows for b in batches) > 1
    assert all(len(v.as_py()) <= 1500 for b in batches for v in b.column("pack"))
    assert unpack(batches, SCHEMA).equals(table)


def test_an_empty_table_makes_no_pack_and_nothing_unpacks_to_an_empty_table():
    assert list(pack(SCHEMA.empty_table())) == []
    assert unpack([], SCHEMA).equals(SCHEMA.empty_table())


def test_each_partition_gets_one_key_spark_sends_there():
    # Murmur3 (seed 42) of an int, pmod n: values checked against Spark's hash() in
    # tests/spark/test_backfill.py; here, that the keys are distinct and the least.
    for n in (1, 2, 3, 4, 8, 16, 64):
        keys = partition_keys(n)
        assert len(set(keys)) == n
        assert [packs._hash_int(k) % n for k in keys] == list(range(n))
        assert all(packs._hash_int(v) % n != i for i, k in enumerate(keys) for v in range(k))
    assert packs._hash_int(0) == 933211791  # Spark: SELECT hash(0)
