"""A state call's samples leave the state stage as rows, or from PACK_SAMPLES on as packs
(l2m.engine.samples.samples_frame), which the sink reads back as the same rows
(unpacked_samples): keys, values, times and marks exactly, in order."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from l2m.engine import samples as samples_module
from l2m.engine.columns import PACK_COLUMN, SAMPLE_COLUMNS, SAMPLE_SCHEMA
from l2m.engine.samples import (
    CORRECTION,
    FINAL,
    MARK_KEY,
    NEW,
    PACK_SAMPLES,
    sample_arrow,
    samples_frame,
    series_key,
    unpacked_samples,
)
from l2m.state.output import OUTPUT_SCHEMA
from tests.support.outputs import output_rows

W = 1_795_341_600_000


def _samples(n: int) -> list[dict]:
    out = []
    for i in range(n):
        s = {"name": "c_total", "kind": "counter", "labels": {"s": f"s{i}"},
             "value": float(i), "timestamp": W, "account": "a", "rule": "c"}
        if i % 3 == 0:
            s[MARK_KEY] = NEW  # a sample's own mark, over the call's
        out.append(s)
    return out


def _expected(n: int, mark: str | None) -> list[tuple]:
    rows = []
    for s in _samples(n):
        own = s.pop(MARK_KEY, mark)
        rows.append((series_key(s).decode(), orjson.dumps(s).decode(), W + 5, own))
    return rows


@pytest.mark.parametrize("n", [1, PACK_SAMPLES - 1, PACK_SAMPLES, 1000])
@pytest.mark.parametrize("mark", [None, FINAL, CORRECTION])
def test_samples_travel_as_rows_or_packs_and_read_back_the_same(n, mark):
    frame = samples_frame(_samples(n), W + 5, mark)
    packed = n >= PACK_SAMPLES
    assert len(frame) == (1 if packed else n)
    assert frame["pack"].notna().all() if packed else frame["pack"].isna().all()
    assert output_rows([frame]) == _expected(n, mark)


def test_a_pack_is_cut_past_its_rows_bound_and_batches_mix_rows_and_packs(monkeypatch):
    monkeypatch.setattr("l2m.engine.ipc.PACK_ROWS", 100)
    packs = samples_frame(_samples(250), W + 5)
    assert len(packs) == 3  # 100 + 100 + 50
    rows = samples_frame(_samples(2), W + 5, FINAL)
    # as Spark hands the sink one batch of the stage's rows (OUTPUT_SCHEMA's types)
    schema = sample_arrow().append(pa.field(PACK_COLUMN, pa.binary()))
    table = pa.concat_tables([pa.Table.from_pandas(f, schema=schema, preserve_index=False)
                              for f in (rows, packs)])
    got = [r for b in unpacked_samples(table.combine_chunks().to_batches())
           for r in b.to_pylist()]
    assert [(r["key"], r["value"], r["time"], r["mark"]) for r in got] == \
        _expected(2, FINAL) + _expected(250, None)


def test_a_frame_without_a_pack_column_passes_as_it_is():
    batch = pa.RecordBatch.from_pydict({"key": ["k"], "value": ["v"]})
    assert list(unpacked_samples([batch])) == [batch]


def test_the_pack_threshold_is_the_module_s(monkeypatch):
    monkeypatch.setattr(samples_module, "PACK_SAMPLES", 2)
    assert samples_frame(_samples(2), W)["pack"].notna().all()


@pytest.mark.parametrize("n", [3, PACK_SAMPLES])
def test_the_frame_rows_and_packs_have_the_stage_schema_columns_in_order(n):
    """samples_frame, the pack's Arrow schema and the stage's DDL name the same columns."""
    frame = samples_frame(_samples(n), W + 5)
    ddl = [part.split()[0] for part in SAMPLE_SCHEMA.split(", ")]
    assert OUTPUT_SCHEMA == SAMPLE_SCHEMA
    assert list(frame.columns) == ddl == [name for name, _ in SAMPLE_COLUMNS] + [PACK_COLUMN]
    assert sample_arrow().names == ddl[:-1]
    assert [str(t) for t in frame.dtypes] == ["object", "object", "int64", "object", "object"]
