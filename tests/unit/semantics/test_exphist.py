"""Native-histogram arithmetic (issue 56): bucket indexes against an exact rational reference
at every bound of every schema, Prometheus's table, schema reduction, merge, the bucket limit,
spans/deltas, and quantile estimates against the exact quantile of generated data."""

from __future__ import annotations

import hashlib
import itertools
import math
import random
import struct
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.semantics import exphist
from l2m.semantics.exphist import (
    NEGATIVE,
    POSITIVE,
    ZERO,
    NativeHistogram,
    bucket_of,
    decode_buckets,
    encode_buckets,
    from_values,
    limit_buckets,
    magnitude_index,
    merge,
    quantile,
    reduce_schema,
    relative_error_bound,
    representative,
    target_index,
    upper_bound,
)

SCHEMAS = range(exphist.SCHEMA_MIN, exphist.SCHEMA_MAX + 1)
TABLE = exphist.fraction_bounds()
MAX = 1.7976931348623157e308
MIN_NORMAL = 2.2250738585072014e-308
MIN_SUBNORMAL = 5e-324


def exact_bound(index: int, schema: int) -> Fraction:
    """The upper bound of bucket ``index`` as Prometheus's table defines it, as a rational."""
    if schema <= 0:
        return Fraction(2) ** (index << -schema)
    return Fraction(TABLE[schema][index & ((1 << schema) - 1)]) * Fraction(2) ** (
        (index >> schema) + 1)


def reference_index(value: float, schema: int) -> int:
    """The smallest index whose exact upper bound is >= |value|: no frexp, no floats."""
    x = Fraction(abs(value))
    index = math.floor(math.log2(abs(value)) * 2.0 ** schema)
    while exact_bound(index - 1, schema) >= x:
        index -= 1
    while exact_bound(index, schema) < x:
        index += 1
    return index


def test_prometheus_table_spot_values_and_shape():
    # literal values of prometheus model/histogram/generic.go (exponentialBounds)
    assert TABLE[0] == (0.5,)
    assert TABLE[1] == (0.5, 0.7071067811865475)
    assert TABLE[2] == (0.5, 0.5946035575013605, 0.7071067811865475, 0.8408964152537144)
    assert TABLE[5][3] == 0.5335702003384117
    assert TABLE[8][1] == 0.5013556375251013
    assert TABLE[8][255] == 0.9972960560854698
    assert [len(row) for row in TABLE] == [1 << s for s in range(9)]
    for s, row in enumerate(TABLE):
        assert row[0] == 0.5
        assert all(a < b for a, b in itertools.pairwise(row))
        # rows nest, so reducing a schema moves no observation across a bound
        if s:
            assert row[::2] == TABLE[s - 1]
        for j, bound in enumerate(row):
            exact = 2.0 ** (j / len(row)) / 2
            assert abs(bound - exact) <= 4 * math.ulp(exact), (s, j)
    # All 511 entries, bit for bit, as Prometheus lists them row by row (the rows of schemas
    # 0-7 are derived from schema 8's here; this holds them to the listed values).
    packed = b"".join(struct.pack(">d", bound) for row in TABLE for bound in row)
    assert hashlib.sha256(packed).hexdigest() == \
        "1c5fe4473fb24e335cd41237e1a9be990e001c1a5b72033f183aee5aee179963"


def test_known_indexes():
    assert [magnitude_index(v, 0) for v in (1.0, 1.5, 2.0, 2.5, 0.5, 0.3, 4.0)] == \
        [0, 1, 1, 2, -1, -1, 2]
    assert [magnitude_index(v, 3) for v in (1.0, 1.5, 2.0, 0.5)] == [0, 5, 8, -8]
    assert [magnitude_index(v, -1) for v in (1.0, 2.0, 4.0, 4.5, 0.25, 0.2, 0.0625, 0.015)] == \
        [0, 1, 1, 2, -1, -1, -2, -3]
    assert [magnitude_index(v, -4) for v in (1.0, 2.0, 65536.0, 65537.0)] == [0, 1, 1, 2]
    assert [magnitude_index(MAX, s) for s in (-4, 0, 3, 8)] == [64, 1024, 8192, 262144]
    assert [magnitude_index(math.inf, s) for s in (-4, 0, 3, 8)] == [65, 1025, 8193, 262145]
    assert [magnitude_index(MIN_SUBNORMAL, s) for s in (-4, 0, 3, 8)] == \
        [-67, -1074, -8592, -274944]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_every_bound_and_one_ulp_either_side(schema):
    exponents = (-1021, -500, -1, 0, 1, 2, 500, 1023, 1024)
    for e in exponents:
        for j in range(1 << max(schema, 0)):
            if schema > 0:
                value = math.ldexp(TABLE[schema][j], e)
                index = j + (e - 1) * (1 << schema)
            else:
                if (e - 1) % (1 << -schema):
                    continue
                value = math.ldexp(0.5, e)
                index = (e - 1) >> -schema
            assert magnitude_index(value, schema) == index, (value, schema)
            assert magnitude_index(-value, schema) == index
            assert magnitude_index(math.nextafter(value, 0), schema) == index
            above = math.nextafter(value, math.inf)
            if above != math.inf:
                assert magnitude_index(above, schema) == index + 1
            assert reference_index(value, schema) == index
            assert upper_bound(index, schema) == value


@pytest.mark.parametrize("schema", SCHEMAS)
def test_subnormal_huge_and_special_values(schema):
    values = [MIN_SUBNORMAL, 2 * MIN_SUBNORMAL, 3 * MIN_SUBNORMAL, 1e-310,
              math.nextafter(MIN_NORMAL, 0), MIN_NORMAL, math.nextafter(MIN_NORMAL, 1),
              1e300, math.nextafter(MAX, 0), MAX, 2.0 ** 1023, 3.0 * 2 ** 1022]
    for v in values:
        assert magnitude_index(v, schema) == reference_index(v, schema), v
    assert magnitude_index(math.inf, schema) == magnitude_index(MAX, schema) + 1
    assert upper_bound(magnitude_index(MAX, schema), schema) == MAX
    assert upper_bound(magnitude_index(math.inf, schema), schema) == math.inf


@settings(max_examples=300, deadline=None)
@given(st.floats(allow_nan=False, allow_infinity=False).filter(lambda v: v != 0),
       st.sampled_from(list(SCHEMAS)))
def test_index_equals_the_exact_reference(value, schema):
    index = magnitude_index(value, schema)
    assert index == reference_index(value, schema)
    if abs(value) >= MIN_NORMAL:
        assert upper_bound(index - 1, schema) < abs(value) <= upper_bound(index, schema)


def test_bucket_of_zero_threshold_nan_and_infinities():
    assert bucket_of(math.nan, 0) is None
    assert bucket_of(0.0, 0) == (ZERO, 0)
    assert bucket_of(-0.0, 0) == (ZERO, 0)
    assert bucket_of(exphist.DEFAULT_ZERO_THRESHOLD, 0) == (ZERO, 0)
    above = math.nextafter(exphist.DEFAULT_ZERO_THRESHOLD, 1)
    assert bucket_of(above, 0) == (POSITIVE, -127)  # (2^-128, 2^-127]
    assert bucket_of(-above, 0) == (NEGATIVE, -127)
    assert bucket_of(MIN_SUBNORMAL, 0) == (ZERO, 0)
    assert bucket_of(MIN_SUBNORMAL, 0, 0.0) == (POSITIVE, -1074)
    assert bucket_of(0.0, 0, 0.0) == (ZERO, 0)
    assert bucket_of(1.0, 0, 1.0) == (ZERO, 0)
    assert bucket_of(-1.5, 1, 1.0) == (NEGATIVE, 2)
    assert bucket_of(math.inf, 0) == (POSITIVE, 1025)
    assert bucket_of(-math.inf, 0) == (NEGATIVE, 1025)
    # client_golang compares ±Inf as ±MaxFloat64 with the threshold
    assert bucket_of(math.inf, 0, MAX) == (ZERO, 0)


@pytest.mark.parametrize("bad", [9, -5, 1.0, True, None])
def test_bad_schema_is_refused(bad):
    with pytest.raises(ValueError, match="schema must be an integer from -4 to 8"):
        NativeHistogram(bad)


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf, "1"])
def test_bad_zero_threshold_is_refused(bad):
    with pytest.raises(ValueError, match="zero threshold must be a finite number >= 0"):
        NativeHistogram(0, bad)


def test_observe():
    h = from_values([1.0, 1.5, 3.0, -0.3, 0.0, math.inf, math.nan, 2.0], 0)
    assert (h.count, h.zero_count, h.positive, h.negative) == \
        (8, 1, {0: 1, 1: 2, 2: 1, 1025: 1}, {-1: 1})
    assert math.isnan(h.sum)
    h = from_values([1.0, 2.5, -4.0], 1)
    assert (h.count, h.sum, h.positive, h.negative, h.bucket_count()) == \
        (3, -0.5, {0: 1, 3: 1}, {4: 1}, 3)


def test_target_index_is_client_golangs_double_bucket_width():
    def halve(key):  # doubleBucketWidth: key++ if key > 0, then Go's truncating key /= 2
        if key > 0:
            key += 1
        return int(key / 2)

    for i in range(-3000, 3000):
        assert target_index(i, 5, 4) == halve(i)
        assert target_index(i, 5, 2) == halve(halve(halve(i)))
        assert target_index(i, 8, 8 - 7) == -((-i) // (1 << 7))  # ceil(i / 2^7)


values_st = st.lists(st.one_of(st.floats(allow_nan=False), st.just(0.0), st.just(math.nan),
                               st.sampled_from([1.0, 2.0, 0.5, -1.0, 1.5, 1e-300, -3e200])),
                     max_size=40)
schema_st = st.sampled_from(list(SCHEMAS))


def fields(h):
    return (h.schema, h.zero_threshold, h.zero_count, h.count, h.positive, h.negative)


@settings(max_examples=200, deadline=None)
@given(values_st, schema_st, schema_st)
def test_reducing_the_schema_is_exact(values, s1, s2):
    high, low = max(s1, s2), min(s1, s2)
    reduced = reduce_schema(from_values(values, high), low)
    direct = from_values(values, low)
    assert fields(reduced) == fields(direct)


@settings(max_examples=200, deadline=None)
@given(values_st, values_st, values_st, schema_st, schema_st, schema_st)
def test_merge_is_the_histogram_of_all_values_and_associative(a, b, c, sa, sb, sc):
    ha, hb, hc = from_values(a, sa), from_values(b, sb), from_values(c, sc)
    assert fields(merge(ha, hb)) == fields(from_values(a + b, min(sa, sb)))
    assert fields(merge(ha, hb)) == fields(merge(hb, ha))
    assert fields(merge(ha, merge(hb, hc))) == fields(merge(merge(ha, hb), hc))
    assert ha.count == len(a)  # inputs are left alone


def test_merge_widens_the_zero_bucket_as_prometheus():
    a = from_values([0.3, 1.5, 3.0, -0.7], 0, 0.0)
    b = from_values([0.5, 5.0], 0, 1.0)
    m = merge(a, b)
    # (0.25, 0.5] and (0.5, 1] lie below 1.0: they join the zero bucket
    assert fields(m) == (0, 1.0, 3, 6, {1: 1, 2: 1, 3: 1}, {})
    # 1.5 lies in (1, 2], straddling 1.25: the threshold grows to 2
    m = merge(a, from_values([0.5], 0, 1.25))
    assert fields(m) == (0, 2.0, 4, 5, {2: 1}, {})
    assert fields(m) == fields(from_values([0.3, 1.5, 3.0, -0.7, 0.5], 0, 2.0))


@settings(max_examples=200, deadline=None)
@given(values_st, values_st, schema_st, schema_st,
       st.sampled_from([0.0, exphist.DEFAULT_ZERO_THRESHOLD, 0.001, 1.0, 1.3, 1e10]),
       st.sampled_from([0.0, exphist.DEFAULT_ZERO_THRESHOLD, 0.6, 7.0]))
def test_merge_with_zero_thresholds_is_the_histogram_of_all_values(a, b, sa, sb, za, zb):
    m = merge(from_values(a, sa, za), from_values(b, sb, zb))
    assert m.zero_threshold >= max(za, zb)
    assert fields(m) == fields(from_values(a + b, min(sa, sb), m.zero_threshold))


def test_limit_buckets_halves_until_within():
    h = from_values([1.0, 1.1, 1.2, 1.3, 1.5, 1.9, 3.0], 3)
    assert h.positive == {0: 1, 2: 1, 3: 1, 4: 1, 5: 1, 8: 1, 13: 1}
    assert fields(limit_buckets(h, 7)) == fields(h)
    assert fields(limit_buckets(h, 0)) == fields(h)  # no limit
    limited = {cap: limit_buckets(h, cap) for cap in (6, 5, 4, 3, 2, 1)}
    assert {cap: (h2.schema, h2.positive) for cap, h2 in limited.items()} == {
        6: (2, {0: 1, 1: 1, 2: 2, 3: 1, 4: 1, 7: 1}),
        5: (1, {0: 1, 1: 3, 2: 2, 4: 1}),
        4: (1, {0: 1, 1: 3, 2: 2, 4: 1}),
        3: (0, {0: 1, 1: 5, 2: 1}),
        2: (-1, {0: 1, 1: 6}),
        # 1.0 and 1.1 are never in one bucket: schema -4 is as low as it goes
        1: (-4, {0: 1, 1: 6})}
    assert all((h2.count, h2.sum, h2.zero_count) == (h.count, h.sum, 0)
               for h2 in limited.values())
    lowest = limit_buckets(from_values([2.0 ** k for k in range(-1000, 1000, 20)], 8), 1)
    assert lowest.schema == exphist.SCHEMA_MIN and lowest.bucket_count() > 1
    with pytest.raises(ValueError, match="max_buckets must be >= 0"):
        limit_buckets(h, -1)


@settings(max_examples=200, deadline=None)
@given(values_st, values_st, schema_st, st.integers(1, 12))
def test_limit_is_the_same_before_or_after_merging(a, b, schema, cap):
    ha, hb = from_values(a, schema), from_values(b, schema)
    whole = limit_buckets(merge(ha, hb), cap)
    assert fields(limit_buckets(merge(limit_buckets(ha, cap), limit_buckets(hb, cap)), cap)) \
        == fields(whole)
    if whole.schema < schema:
        assert reduce_schema(merge(ha, hb), whole.schema + 1).bucket_count() > cap


@settings(max_examples=200, deadline=None)
@given(values_st, schema_st, st.integers(1, 12))
def test_limit_matches_client_golangs_one_step_per_observation(values, schema, cap):
    # client_golang checks after each observation and halves once when over the limit
    h = NativeHistogram(schema)
    for v in values:
        h.observe(v)
        if h.bucket_count() > cap and h.schema > exphist.SCHEMA_MIN:
            h = reduce_schema(h, h.schema - 1)
    if h.bucket_count() <= cap:
        assert fields(limit_buckets(from_values(values, schema), cap)) == fields(h)


def test_encode_spans_and_deltas():
    assert encode_buckets({}) == ([], [])
    assert encode_buckets({0: 1, 1: 2, 3: 1, 7: 5}) == ([(0, 4), (3, 1)], [1, 1, -2, 1, 4])
    assert encode_buckets({-5: 3, -2: 1}) == ([(-5, 4)], [3, -3, 0, 1])
    assert encode_buckets({-5: 3, -1: 1}) == ([(-5, 1), (3, 1)], [3, -2])
    assert encode_buckets({4: 2, 5: 0}) == ([(4, 1)], [2])
    assert decode_buckets([(0, 4), (3, 1)], [1, 1, -2, 1, 4]) == {0: 1, 1: 2, 3: 1, 7: 5}


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.integers(-300000, 300000), st.integers(1, 2 ** 62), max_size=30))
def test_encode_decode_round_trip(buckets):
    spans, deltas = encode_buckets(buckets)
    assert decode_buckets(spans, deltas) == buckets
    assert sum(length for _, length in spans) == len(deltas)
    assert all(offset > 2 for offset, _ in spans[1:])


@pytest.mark.parametrize(("spans", "deltas", "message"), [
    ([(0, 2)], [1], "spans need more than the 1 counts given"),
    ([(0, 1)], [1, 2], "spans need 1 counts, 2 given"),
    ([(0, 1), (-1, 1)], [1, 1], "span 2 has a negative offset -1"),
    ([(0, -1)], [], "span 1 has a negative length -1"),
    ([(0, 2)], [1, -2], "bucket 1 has a negative count -1"),
])
def test_decode_refuses_inconsistent_input(spans, deltas, message):
    with pytest.raises(ValueError, match=message):
        decode_buckets(spans, deltas)


def exact_quantile(values, q):
    finite = sorted(v for v in values if not math.isnan(v))
    return finite[max(1, math.ceil(q * len(finite))) - 1]


def datasets():
    rng = random.Random(56)
    uniform = [rng.uniform(0.001, 1000.0) for _ in range(3000)]
    lognormal = [rng.lognormvariate(0.0, 3.0) for _ in range(3000)]
    mixed = [rng.choice((-1, 1)) * rng.lognormvariate(2.0, 2.0) for _ in range(3000)] + \
        [0.0] * 30
    spikes = [[42.0] * 500, [1.0] * 300, [math.nextafter(1.0, 2)] * 300,
              [math.nextafter(2.0 ** 0.5, 2)] * 50,
              [7.25] * 990 + [1e6, 3e9, 1e-6, 0.001, 5e12, 2e-3, 8e8, 4.4, 1e15, 1e-9],
              [-3.0] * 99 + [1e12]]
    return [("uniform", uniform), ("lognormal", lognormal), ("mixed", mixed)] + \
        [(f"spike{i}", s) for i, s in enumerate(spikes)]


QS = (0.0, 0.5, 0.9, 0.99, 1.0)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_quantile_error_never_exceeds_the_bound(schema):
    bound = relative_error_bound(schema)
    for name, values in datasets():
        h = from_values(values, schema)
        for q in QS:
            exact = exact_quantile(values, q)
            estimate = quantile(h, q)
            if exact == 0:
                assert estimate == 0.0
                continue
            error = abs(estimate - exact) / abs(exact)
            assert error <= bound + 1e-15, (name, q, error, bound)


@pytest.mark.parametrize("schema", SCHEMAS)
def test_the_bound_is_reached_at_both_ends_of_a_bucket(schema):
    bound = relative_error_bound(schema)
    for index in {magnitude_index(v, schema) for v in (1e-300, 0.01, 1.5, 3.0, 1e10, 1e200)}:
        low, high = upper_bound(index - 1, schema), upper_bound(index, schema)
        estimate = representative(index, schema)
        assert low < estimate < high
        for value in (math.nextafter(low, math.inf), high):
            assert magnitude_index(value, schema) == index
            assert abs(abs(estimate - value) / value - bound) <= 1e-12


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=1e-300, max_value=1e300), min_size=1, max_size=60),
       st.lists(st.booleans(), max_size=60), schema_st,
       st.one_of(st.sampled_from(QS), st.floats(0, 1)))
def test_quantile_bound_on_random_data(magnitudes, signs, schema, q):
    values = [-m if i < len(signs) and signs[i] else m for i, m in enumerate(magnitudes)]
    exact = exact_quantile(values, q)
    # zero threshold 0: with the default, |v| <= 2^-128 is in the zero bucket, estimated 0
    estimate = quantile(from_values(values, schema, 0.0), q)
    assert abs(estimate - exact) / abs(exact) <= relative_error_bound(schema) + 1e-15


def test_relative_error_bounds():
    assert [round(relative_error_bound(s), 6) for s in SCHEMAS] == [
        0.999969, 0.992218, 0.882353, 0.6, 0.333333, 0.171573, 0.086427, 0.043295, 0.021657,
        0.01083, 0.005415, 0.002708, 0.001354]


def test_quantile_special_cases():
    assert math.isnan(quantile(NativeHistogram(0), 0.5))
    assert math.isnan(quantile(from_values([math.nan, math.nan], 0), 0.5))
    assert quantile(from_values([math.nan, 1.0], 0), 1.0) == 2 / 3  # NaN is not ranked
    assert quantile(from_values([0.0, 0.0, 0.0, 5.0], 0), 0.5) == 0.0
    assert quantile(from_values([0.0, 0.0, 0.0, 5.0], 0), 1.0) == representative(3, 0)
    assert quantile(from_values([-5.0, 1.0], 0), 0.0) == -representative(3, 0)
    assert quantile(from_values([math.inf, 1.0], 2), 1.0) == math.inf
    assert quantile(from_values([-math.inf, 1.0], 2), 0.0) == -math.inf
    assert quantile(from_values([MAX], 0), 1.0) <= MAX
    assert quantile(from_values([MIN_SUBNORMAL], 0, 0.0), 1.0) == MIN_SUBNORMAL
    for bad in (-0.1, 1.5, math.nan):
        with pytest.raises(ValueError, match="quantile must be from 0 to 1"):
            quantile(NativeHistogram(0), bad)


# PromQL's histogram_quantile for native histograms, emulated for positive values above the
# zero threshold (prometheus promql/quantile.go): v2.42 interpolates linearly within the
# bucket, going up with rank q·count; v3.0 on interpolates exponentially and walks down from
# the top for q >= 0.5.
def promql_quantile(h, q, exponential):
    buckets = [(upper_bound(i - 1, h.schema), upper_bound(i, h.schema), c)
               for i, c in sorted(h.positive.items())]
    forward = not exponential or q < 0.5
    rank = q * h.count if forward else (1 - q) * h.count
    count = 0
    for bucket in (buckets if forward else reversed(buckets)):
        count += bucket[2]
        if count >= rank:
            break
    lower, upper, c = bucket
    rank = rank - (count - c) if forward else count - rank
    fraction = rank / c
    if not exponential:
        return lower + (upper - lower) * fraction
    return 2 ** (math.log2(lower) + (math.log2(upper) - math.log2(lower)) * fraction)


@pytest.mark.parametrize("exponential", [False, True])
@pytest.mark.parametrize("schema", SCHEMAS)
def test_promql_error_is_bounded_by_base_minus_one_only(schema, exponential):
    base = exphist.growth_factor(schema)
    worst = 0.0
    for _, values in datasets():
        if min(values) <= 0:
            continue
        h = from_values(values, schema)
        for q in QS[1:]:
            exact = exact_quantile(values, q)
            worst = max(worst, abs(promql_quantile(h, q, exponential) - exact) / exact)
    assert worst <= (base - 1) * (1 + 1e-9)
    # a spike just above a bucket's lower bound: PromQL answers near the upper bound
    spike = from_values([math.nextafter(1.0, 2)] * 100, schema)
    assert promql_quantile(spike, 1.0, exponential) == pytest.approx(base)
    assert quantile(spike, 1.0) <= 1.0 + relative_error_bound(schema) * (1 + 1e-9)


def test_the_nearest_rank_is_exact_for_the_quantile_as_written() -> None:
    # 0.0011 * 110_000 is 121.00000000000001 in doubles: the rank must stay 121
    assert 0.0011 * 110_000 > 121
    assert exphist.nearest_rank(0.0011, 110_000) == 121
    assert [exphist.nearest_rank(q, 10) for q in (0.0, 0.05, 0.1, 0.11, 0.5, 0.99, 1.0)] == \
        [1, 1, 1, 2, 5, 10, 10]
    histogram = exphist.from_values([1.0] * 121 + [1000.0] * (110_000 - 121), 3)
    assert exphist.quantile(histogram, 0.0011) == exphist.representative(
        exphist.bucket_of(1.0, 3)[1], 3)
