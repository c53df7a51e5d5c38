"""Native-histogram bucket indexes of a whole column at once (issue 56).

Input: a float64 array of observed values, a schema and a zero threshold. Output: per value,
its side (:data:`POSITIVE`, :data:`NEGATIVE`, :data:`ZERO`, or :data:`NO_BUCKET` for NaN) and
bucket index — element for element what :func:`l2m.semantics.exphist.bucket_of` says (the
definition, with its Prometheus sources); this module only vectorises it with numpy."""

from __future__ import annotations

import numpy as np

from l2m.semantics import exphist
from l2m.semantics.exphist import NEGATIVE, POSITIVE, ZERO

__all__ = ["NEGATIVE", "NO_BUCKET", "POSITIVE", "ZERO", "bucket_indexes", "magnitude_indexes"]

NO_BUCKET = 2  # NaN: counted in the count and the sum, in no bucket

_BOUNDS = [np.array(row, dtype=np.float64) for row in exphist.fraction_bounds()]
_MAX_FLOAT = np.finfo(np.float64).max


def magnitude_indexes(values: np.ndarray, schema: int) -> np.ndarray:
    """The bucket index of each |value| (int64), as
    :func:`l2m.semantics.exphist.magnitude_index`; 0 for zero and NaN, which have none."""
    exphist.check_schema(schema)
    magnitudes = np.abs(np.asarray(values, dtype=np.float64))
    infinite = np.isinf(magnitudes)
    fractions, exponents = np.frexp(np.where(infinite, _MAX_FLOAT, magnitudes))
    exponents = exponents.astype(np.int64)
    if schema > 0:
        bounds = _BOUNDS[schema]
        # side="left" is bisect_left (Go's sort.SearchFloat64s): upper bounds are inclusive.
        keys = np.searchsorted(bounds, fractions, side="left").astype(np.int64) \
            + (exponents - 1) * len(bounds)
    else:
        keys = exponents - (fractions == 0.5)
        shift = -schema
        keys = (keys + ((1 << shift) - 1)) >> shift  # arithmetic shift: ceil below zero too
    keys += infinite
    keys[(magnitudes == 0) | np.isnan(magnitudes)] = 0
    return keys


def bucket_indexes(values: np.ndarray, schema: int,
                   zero_threshold: float = exphist.DEFAULT_ZERO_THRESHOLD,
                   ) -> tuple[np.ndarray, np.ndarray]:
    """(sides int8, indexes int64) of ``values``: where each is counted, as
    :func:`l2m.semantics.exphist.bucket_of` (index 0 for the zero bucket and NaN)."""
    exphist.check_zero_threshold(zero_threshold)
    array = np.asarray(values, dtype=np.float64)
    indexes = magnitude_indexes(array, schema)
    # ±Inf compare as ±MaxFloat64 with the threshold, as in client_golang
    clipped = np.clip(array, -_MAX_FLOAT, _MAX_FLOAT)
    sides = np.full(array.shape, ZERO, dtype=np.int8)
    sides[clipped > zero_threshold] = POSITIVE
    sides[clipped < -zero_threshold] = NEGATIVE
    sides[np.isnan(array)] = NO_BUCKET
    indexes[sides == ZERO] = 0
    return sides, indexes
