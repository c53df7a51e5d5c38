"""The vectorised native-histogram bucket index equals the scalar definition
(:mod:`l2m.semantics.exphist`) value for value: random doubles, every table bound and the
doubles one ulp either side, subnormals, huge values, zero, NaN and ±Inf. So do the bucket
keys partial rows carry (``le``), read back by parse_key; a series' partials by key re-keyed
to a bounded resolution (reduced_parts) and read as a histogram (native_histogram) equal
exphist's histogram of the values, limited to the bucket count."""

from __future__ import annotations

import dataclasses
import math
from decimal import Decimal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine.nativebuckets import (
    NAN_KEY,
    NO_BUCKET,
    ZERO_KEY,
    bucket_indexes,
    bucket_key_codes,
    counts_logs,
    is_native_key,
    logs_twice,
    magnitude_indexes,
    native_histogram,
    parse_key,
    reduced_parts,
)
from l2m.engine.partials import Partial
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics import exphist

SCHEMAS = list(range(exphist.SCHEMA_MIN, exphist.SCHEMA_MAX + 1))
MAX = 1.7976931348623157e308


def scalar(values, schema, zero_threshold=exphist.DEFAULT_ZERO_THRESHOLD):
    out = [exphist.bucket_of(v, schema, zero_threshold) for v in values]
    return ([NO_BUCKET if w is None else w[0] for w in out],
            [0 if w is None else w[1] for w in out])


def check(values, schema, zero_threshold=exphist.DEFAULT_ZERO_THRESHOLD):
    array = np.array(values, dtype=np.float64)
    sides, indexes = bucket_indexes(array, schema, zero_threshold)
    assert sides.dtype == np.int8 and indexes.dtype == np.int64
    assert (sides.tolist(), indexes.tolist()) == scalar(values, schema, zero_threshold)


def boundary_values(schema):
    values = [0.0, -0.0, math.nan, math.inf, -math.inf, MAX, -MAX, 5e-324, -5e-324, 1e-310,
              2.2250738585072014e-308, math.nextafter(2.2250738585072014e-308, 0),
              exphist.DEFAULT_ZERO_THRESHOLD,
              math.nextafter(exphist.DEFAULT_ZERO_THRESHOLD, 1), 1.0, 2.0, 0.5]
    for e in (-1021, -1, 0, 1, 1023, 1024):
        for fraction in exphist.fraction_bounds()[max(schema, 0)]:
            v = math.ldexp(fraction, e)
            values += [v, -v, math.nextafter(v, 0), math.nextafter(v, math.inf)]
    return values


@pytest.mark.parametrize("schema", SCHEMAS)
def test_boundaries_match_the_scalar_definition(schema):
    values = boundary_values(schema)
    check(values, schema)
    check(values, schema, 0.0)
    check(values, schema, 1.0)
    check(values, schema, MAX)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(), max_size=50), st.sampled_from(SCHEMAS),
       st.sampled_from([0.0, exphist.DEFAULT_ZERO_THRESHOLD, 1e-9, 3.5]))
def test_random_values_match_the_scalar_definition(values, schema, zero_threshold):
    check(values, schema, zero_threshold)


def test_magnitudes_and_empty_input():
    assert magnitude_indexes(np.array([1.5, -1.5, 0.0, math.nan, math.inf]), 0).tolist() == \
        [1, 1, 0, 0, 1025]
    sides, indexes = bucket_indexes(np.array([], dtype=np.float64), 3)
    assert sides.tolist() == [] and indexes.tolist() == []
    with pytest.raises(ValueError, match="schema must be an integer"):
        bucket_indexes(np.array([1.0]), 9)


def key_of(value, schema):
    """A value's bucket key written from exphist's definition: p/n<schema>/<index>, z/, x/."""
    where = exphist.bucket_of(value, schema)
    if where is None:
        return "x/"
    side, index = where
    if side == exphist.ZERO:
        return "z/"
    return f"{'p' if side == exphist.POSITIVE else 'n'}{schema}/{index}"


@pytest.mark.parametrize("schema", SCHEMAS)
def test_bucket_keys_match_the_scalar_definition(schema):
    values = boundary_values(schema)
    codes, keys = bucket_key_codes(np.array(values, dtype=np.float64), schema)
    assert codes.dtype == np.int32 and len(keys) == len(set(keys))
    assert [keys[c] for c in codes.tolist()] == [key_of(v, schema) for v in values]
    for key in keys:
        side, s, index = parse_key(key)
        assert is_native_key(key)
        if key in (ZERO_KEY, NAN_KEY):
            assert (s, index) == (0, 0)
        else:
            assert s == schema and key == f"{'p' if side == exphist.POSITIVE else 'n'}" \
                f"{schema}/{index}"


def test_edge_keys_and_parse_errors():
    values = [0.0, -0.0, 5e-324, -5e-324, math.inf, -math.inf, math.nan, 1.0, -1.0,
              math.nextafter(1.0, 2), exphist.DEFAULT_ZERO_THRESHOLD,
              math.nextafter(exphist.DEFAULT_ZERO_THRESHOLD, 1)]
    codes, keys = bucket_key_codes(np.array(values), 0)
    assert [keys[c] for c in codes.tolist()] == [
        "z/", "z/", "z/", "z/", "p0/1025", "n0/1025", "x/", "p0/0", "n0/0", "p0/1", "z/",
        "p0/-127"]
    codes, keys = bucket_key_codes(np.array([], dtype=np.float64), 3)
    assert codes.tolist() == [] and keys == []
    assert parse_key("n-4/-67") == (exphist.NEGATIVE, -4, -67)
    assert parse_key("p8/0") == (exphist.POSITIVE, 8, 0)
    assert (parse_key("z/"), parse_key("x/")) == ((exphist.ZERO, 0, 0), (NO_BUCKET, 0, 0))
    for bad in ("", "+Inf", "10", "q3/1", "p3", "p/1", "px/1", "p3/x"):
        with pytest.raises(ValueError):
            parse_key(bad)
    assert not is_native_key("+Inf") and not is_native_key("0.25") and not is_native_key("")


def parts_of(values, schema):
    """A series' partials by bucket key, as pre-aggregation makes them (exact sums)."""
    parts = {}
    for v in values:
        key = key_of(v, schema)
        number = not math.isnan(v)
        part = Partial(1, 1, v, None if not math.isfinite(v) else Decimal(repr(v)),
                       v if number else None, v if number else None, 7)
        parts[key] = part if key not in parts else parts[key].merge(part)
    return parts


def histogram_of(parts, schema, max_buckets):
    found = native_histogram(parts, schema, max_buckets)
    assert found is not None
    return found[0]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(allow_nan=True), min_size=1, max_size=80),
       st.sampled_from(SCHEMAS), st.integers(0, 12), st.integers(1, 6))
def test_reduced_parts_keep_the_histogram_and_bound_the_buckets(values, schema, max_buckets,
                                                                 pieces):
    expected = exphist.limit_buckets(exphist.from_values(values, schema), max_buckets)
    one_shot = histogram_of(parts_of(values, schema), schema, max_buckets)
    assert (one_shot.schema, one_shot.zero_count, one_shot.count, one_shot.positive,
            one_shot.negative) == (expected.schema, expected.zero_count, expected.count,
                                   expected.positive, expected.negative)
    # In pieces, re-keyed after each merge, as the state does batch by batch.
    kept: dict[str, Partial] = {"+Inf": Partial(3, 3, 1.0)}  # a classic bound: left alone
    size = math.ceil(len(values) / pieces)
    for at in range(0, len(values), size):
        for key, part in parts_of(values[at:at + size], schema).items():
            kept[key] = part if key not in kept else kept[key].merge(part)
        reduced = reduced_parts(kept, max_buckets)
        if reduced is not None:
            kept = reduced
        buckets = [k for k in kept if k[0] in "pn"]
        assert len({parse_key(k)[1] for k in buckets}) <= 1
        assert not max_buckets or len(buckets) <= max_buckets or \
            parse_key(buckets[0])[1] == exphist.SCHEMA_MIN
    assert kept["+Inf"] == Partial(3, 3, 1.0)
    again = histogram_of(kept, schema, max_buckets)
    assert dataclasses.replace(again, sum=0.0) == dataclasses.replace(one_shot, sum=0.0)
    # The sum is exact below ±1e20; past that a double sum, in another order here.
    if all(abs(v) < 1e20 for v in values):
        assert again.sum == one_shot.sum
    assert reduced_parts(kept, max_buckets) is None  # nothing left to rewrite


def test_reduced_parts_merge_the_partials_of_merged_buckets():
    parts = {"p3/8": Partial(1, 1, 2.0, Decimal(2), 2.0, 2.0, 5),
             "p3/7": Partial(2, 2, 3.6, Decimal("3.6"), 1.8, 1.8, 9),
             "p3/1": Partial(1, 1, 1.05, Decimal("1.05"), 1.05, 1.05, 1),
             "z/": Partial(4, 4, 0.0, Decimal(0), 0.0, 0.0, 2), "x/": Partial(3, 0)}
    assert reduced_parts(parts, 0) is None and reduced_parts(parts, 3) is None
    # bucket 7 and 8 of schema 3 are (2^(6/8), 2]: bucket 1 of schema 0; bucket 1: (1, 2^(1/8)]
    assert reduced_parts(parts, 2) == {
        "z/": parts["z/"], "x/": parts["x/"],
        "p2/4": parts["p3/8"].merge(parts["p3/7"]), "p2/1": parts["p3/1"]}
    assert reduced_parts(parts, 1) == {
        "z/": parts["z/"], "x/": parts["x/"],
        "p0/1": parts["p3/8"].merge(parts["p3/7"]).merge(parts["p3/1"])}
    # keys of two schemas: the coarser one
    assert reduced_parts({"p3/8": parts["p3/8"], "p2/1": parts["p3/1"]}, 0) == {
        "p2/4": parts["p3/8"], "p2/1": parts["p3/1"]}
    assert reduced_parts({"z/": parts["z/"], "10": parts["x/"]}, 1) is None
    histogram, total = native_histogram(parts, 3, 0)
    assert (histogram.schema, histogram.zero_count, histogram.count, histogram.positive,
            histogram.negative, histogram.sum) == (3, 4, 8, {8: 1, 7: 2, 1: 1}, {}, 6.65)
    assert total.matches == 11 and total.ts == 9
    assert native_histogram({"x/": Partial(3, 0), "10": Partial(1, 1, 5.0)}, 3, 0) is None


def test_a_histogram_with_classic_and_native_buckets_counts_its_logs_from_one_kind():
    both = Rule(id="b", name="b", kind=Kind.COUNTER, query="*",
                aggregation=Aggregation.HISTOGRAM, field="v", buckets=(1.0,),
                bucket_labels=("1",), native_schema=3)
    native = Rule(id="n", name="n", kind=Kind.COUNTER, query="*",
                  aggregation=Aggregation.HISTOGRAM, field="v", native_schema=3)
    classic = Rule(id="c", name="c", kind=Kind.COUNTER, query="*",
                   aggregation=Aggregation.HISTOGRAM, field="v", buckets=(1.0,),
                   bucket_labels=("1",))
    quantiles = Rule(id="q", name="q", kind=Kind.GAUGE, query="*",
                     aggregation=Aggregation.QUANTILES, field="v", native_schema=5,
                     quantiles=(0.5,), quantile_labels=("0.5",))
    assert [logs_twice(r) for r in (both, native, classic, quantiles)] == \
        [True, False, False, False]
    assert [counts_logs(le, True) for le in ("1", "+Inf", "p3/2", "z/", "x/")] == \
        [True, True, False, False, False]
    assert all(counts_logs(le, False) for le in ("1", "+Inf", "p3/2", "z/", "x/", ""))
