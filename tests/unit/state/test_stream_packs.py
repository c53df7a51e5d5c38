"""A read task's partials gathered per state key (l2m.engine.streamtask.packed) and read back
by the state stage (l2m.state.rows.unpacked), and the tally a task sends."""

from __future__ import annotations

import collections
import pickle
import random
from decimal import Decimal

import pandas as pd
import pyarrow as pa
import pytest
from pyspark import cloudpickle

from l2m.engine import ipc, streamtask
from l2m.engine.columns import PACK_COLUMN, PACK_RULE
from l2m.engine.ipc import table_of
from l2m.engine.partials import PARTIAL_ARROW, frame_partials
from l2m.engine.streamtask import STREAM_PARTIAL_ARROW, packed
from l2m.state.rows import by_rule, counted, unpacked
from l2m.state.tally import (
    InputCount,
    LateCount,
    Latest,
    MatchCount,
    Packed,
    SampleCount,
    SeriesCount,
    Sums,
)


def _rows(seed: int, n: int) -> list[dict]:
    rnd = random.Random(seed)
    rows = []
    for i in range(n):
        own = rnd.random() < 0.1
        window = rnd.choice([None, 1_795_000_020_000, 1_795_000_080_000])
        ts = rnd.choice([None, 1_795_000_000_000 + rnd.randrange(200_000)])
        exact = rnd.choice([None, Decimal("1.500000000000000000")])
        rows.append({
            "rule": "__cut__" if own else f"r{rnd.randrange(30)}", "series": f"s{i}",
            "le": rnd.choice([None, "", "0.5"]), "window": window,
            "matches": rnd.randrange(1, 9), "n": 2 if exact is not None else rnd.randrange(3),
            "sum": rnd.random(), "exact_sum": exact, "exact_n": 2 if exact is not None else 0,
            "min": rnd.choice([None, 0.25]), "max": rnd.choice([None, 7.0]), "ts": ts,
            "ruleset": "v1", "place": None if own else rnd.randrange(4), "pack": None})
    return rows


def _event_time(row: dict) -> int:
    # the job's watermark column: coalesce(ts, greatest(window, 0))
    if row["ts"] is not None:
        return row["ts"]
    return max(row["window"], 0) if row["window"] is not None else 0


def _key(row: dict) -> tuple:
    return row["place"], row["window"]


@pytest.mark.parametrize("least, most, batch_bytes", [(1, 50_000, 1 << 30), (32, 50_000, 1 << 30),
                                                    (1, 7, 3_000)])
def test_a_task_s_rows_come_back_per_state_key_as_they_were(monkeypatch, least, most,
                                                           batch_bytes):
    # least: rows a key needs to be packed; most: rows per pack; batch_bytes: packs per batch
    monkeypatch.setattr(streamtask, "MIN_PACK_ROWS", least)
    monkeypatch.setattr(ipc, "PACK_ROWS", most)
    monkeypatch.setattr(ipc, "BATCH_BYTES", batch_bytes)
    for seed in range(5):
        rows = _rows(seed, 400)
        batches = [pa.RecordBatch.from_pylist(rows[:150], schema=STREAM_PARTIAL_ARROW),
                   pa.RecordBatch.from_pylist(rows[150:], schema=STREAM_PARTIAL_ARROW)]
        out_batches = list(packed(batches))
        out = pa.Table.from_batches(out_batches).to_pylist()
        loose = [r for r in out if r[PACK_COLUMN] is None]
        packs = [r for r in out if r[PACK_COLUMN] is not None]
        placed = [r for r in rows if r["place"] is not None]
        sizes = collections.Counter(_key(r) for r in placed)
        # l2m's own rows (Spark places them by hash) and small keys' rows pass as they were
        assert sorted(map(_order, loose)) == sorted(
            map(_order, [r for r in rows if r["place"] is None or sizes[_key(r)] < least]))
        for key, size in sizes.items():
            mine = [r for r in placed if _key(r) == key]
            its = [p for p in packs if _key(p) == key]
            if size < least:
                assert not its
                continue
            assert len(its) == -(-size // most)
            inner = [x for p in its for x in table_of(p[PACK_COLUMN]).to_pylist()]
            assert inner == [{k: r[k] for k in PARTIAL_ARROW.names} for r in mine]
            for pack in its:
                assert pack["rule"] == PACK_RULE and pack["ruleset"] == "v1"
                # the watermark sees the latest event time of the rows themselves
                assert pack["ts"] == max(_event_time(r) for r in mine)
        if batch_bytes < 1 << 30:  # several batches of packs, none past the bound but alone
            pack_batches = [b for b in out_batches if b.column(PACK_COLUMN).null_count == 0]
            assert len(pack_batches) > 1
            assert all(b.num_rows == 1 or sum(len(v.as_py()) for v in b.column(PACK_COLUMN))
                       <= batch_bytes for b in pack_batches)


def _order(row: dict) -> tuple:
    return tuple((k, str(v)) for k, v in sorted(row.items()))


def test_the_state_function_reads_a_pack_as_the_rows_it_holds(monkeypatch):
    monkeypatch.setattr(streamtask, "MIN_PACK_ROWS", 1)  # every key packed
    rows = _rows(7, 300)
    batch = pa.RecordBatch.from_pylist(rows, schema=STREAM_PARTIAL_ARROW)
    plain = pa.Table.from_batches([batch]).to_pandas()
    frame = pa.Table.from_batches(list(packed([batch]))).to_pandas()
    assert frame[PACK_COLUMN].notna().any() and frame[PACK_COLUMN].isna().any()
    # as the state stage gets one key: here every row, packs and own rows together
    got = by_rule(unpacked(iter([frame])))
    want = by_rule(iter([plain]))
    assert {r: sorted(v, key=lambda x: x[0]) for r, v in got.items()} == \
        {r: sorted(v, key=lambda x: x[0]) for r, v in want.items()}
    # pandas' NaN and Arrow's None read alike
    arrow = pa.Table.from_batches([batch]).select(PARTIAL_ARROW.names)
    assert list(frame_partials(arrow)) == list(frame_partials(plain))


class _Acc:
    def __init__(self, param):
        self.param, self.value = param, param.zero({})

    def add(self, term):
        self.value = self.param.addInPlace(self.value, term)


class _Reduction:
    def __init__(self):
        self.rows_in, self.rows_out, self.matches = _Acc(Sums()), _Acc(Sums()), _Acc(Sums())


def test_unpacked_rows_are_counted_like_rows(monkeypatch):
    monkeypatch.setattr(streamtask, "MIN_PACK_ROWS", 1)
    rows = _rows(3, 200)
    batch = pa.RecordBatch.from_pylist(rows, schema=STREAM_PARTIAL_ARROW)

    class Num:
        def __init__(self):
            self.value = 0

        def add(self, n):
            self.value += n

    counts = []
    for frames in (iter([pa.Table.from_batches([batch]).to_pandas()]),
                   unpacked(iter([pa.Table.from_batches(list(packed([batch]))).to_pandas()]))):
        reduction = _Reduction()
        reduction.rows_in, reduction.rows_out = Num(), Num()
        list(counted(frames, reduction))
        counts.append((reduction.rows_in.value, reduction.rows_out.value,
                       dict(reduction.matches.value)))
    assert counts[0] == counts[1]
    assert counts[0][1] == 200 and counts[0][0] == sum(r["matches"] for r in rows)


def test_a_task_of_own_rows_only_or_of_none_passes_them_as_they_are():
    rows = [r for r in _rows(5, 100) if r["place"] is None]
    batch = pa.RecordBatch.from_pylist(rows, schema=STREAM_PARTIAL_ARROW)
    assert pa.Table.from_batches(list(packed([batch])), schema=STREAM_PARTIAL_ARROW
                                 ).to_pylist() == rows
    empty = pa.RecordBatch.from_pylist([], schema=STREAM_PARTIAL_ARROW)
    assert sum(b.num_rows for b in packed([empty])) == 0
    assert sum(b.num_rows for b in packed([])) == 0


def test_a_frame_without_packs_passes_as_it_is():
    frame = pd.DataFrame({"rule": ["a"], "pack": [None]})
    assert list(unpacked(iter([frame]))) == [frame]


def test_a_task_s_tally_travels_as_columns_and_arrives_whole():
    tally = Packed({SeriesCount(f"r{i}", i % 4, -1): i for i in range(1000)})
    tally.update({SampleCount("r1"): 3, MatchCount("r2"): 4, InputCount("ok"): 5,
                  LateCount(): 6})
    back = pickle.loads(cloudpickle.dumps(tally))
    assert back == tally and isinstance(back, Packed)
    # every task starts from one: its updates are what is pickled
    for param in (Sums(), Latest(), Latest(drops_closed_windows=True)):
        value = param.addInPlace(param.zero({}), {SampleCount("x"): 1})
        assert isinstance(value, Packed)
        # the driver's plain dict takes it as any mapping
        assert param.addInPlace({}, pickle.loads(cloudpickle.dumps(value))) == \
            {SampleCount("x"): 1}


def test_packs_are_asked_for_with_the_current_format_only_and_reach_the_kafka_source():
    from l2m.config.job import JobConfig
    from l2m.engine.rulesets import Versions
    from l2m.kafka.options import RUNTIME
    from l2m.state.format import STATE_FORMAT
    from l2m.streaming.job import rule_options

    options = rule_options(JobConfig(), Versions("v", "o"), "/tmp/current",
                           state_format=STATE_FORMAT)
    assert options["pack"] == "1"
    # source_frame hands the Kafka source every one of them by its field
    assert set(options) <= set(RUNTIME)
    assert "pack" not in rule_options(JobConfig(), Versions("v", "o"), None, state_format=2)
