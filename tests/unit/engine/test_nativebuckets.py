"""The vectorised native-histogram bucket index equals the scalar definition
(:mod:`l2m.semantics.exphist`) value for value: random doubles, every table bound and the
doubles one ulp either side, subnormals, huge values, zero, NaN and ±Inf."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine.nativebuckets import NO_BUCKET, bucket_indexes, magnitude_indexes
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
