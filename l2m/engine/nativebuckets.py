"""Native-histogram buckets in the engine: of a whole column at once, and as partials' keys.

Input: a float64 array of observed values, a schema and a zero threshold; or a series'
partials by ``le``. Output: per value, its side (:data:`POSITIVE`, :data:`NEGATIVE`,
:data:`ZERO`, or :data:`NO_BUCKET` for NaN) and bucket index — element for element what
:func:`l2m.semantics.exphist.bucket_of` says (the definition, with its Prometheus sources),
vectorised with numpy — and its bucket key, the ``le`` of its partial row
(:func:`bucket_key_codes`); back from a series' partials, its native histogram
(:func:`native_histogram`) and its keys at one bounded resolution (:func:`reduced_parts`)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from l2m.engine.partials import Partial
from l2m.rules.model import Rule
from l2m.semantics import exphist
from l2m.semantics.exphist import NEGATIVE, POSITIVE, ZERO

__all__ = ["NAN_KEY", "NEGATIVE", "NO_BUCKET", "POSITIVE", "ZERO", "ZERO_KEY", "bucket_indexes",
           "bucket_key", "bucket_key_codes", "counts_logs", "is_native_key", "logs_twice",
           "magnitude_indexes", "native_histogram", "parse_key", "reduced_parts"]

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


# --- bucket keys: a native bucket as the ``le`` of a partial ---------------------------------
#
# A native bucket travels as the ``le`` of its partial row, beside classic bounds (which never
# contain "/"): "p<schema>/<index>" a positive bucket, "n<schema>/<index>" a negative one,
# ZERO_KEY the zero bucket, NAN_KEY observations in no bucket (NaN; and a match without a
# value, n 0). The schema is in the key so that keys of a finer schema merge exactly into a
# coarser one (:func:`reduced_parts`): partials stay the one mergeable aggregate, with no
# schema change, and a series' histogram is its rows' bucket counts (``n``).
ZERO_KEY = "z/"
NAN_KEY = "x/"
_SIDE_PREFIX = {POSITIVE: "p", NEGATIVE: "n"}
_PREFIX_SIDE = {"p": POSITIVE, "n": NEGATIVE}


def is_native_key(le: str) -> bool:
    """Whether ``le`` is a native bucket key (not a classic bound's label)."""
    return "/" in le


def logs_twice(rule: Rule) -> bool:
    """Whether each log a rule matches has two match rows: a classic bound's and a native
    bucket key's (a histogram asking for both)."""
    return rule.classic and rule.native_schema is not None


def counts_logs(le: str, twice: bool) -> bool:
    """Whether a partial keyed ``le`` counts the logs it stands for (``matches``): every one
    does, but the native keys' of a rule with two rows per log (:func:`logs_twice`), whose
    logs its classic rows count already."""
    return not (twice and is_native_key(le))


def bucket_key(side: int, index: int, schema: int) -> str:
    """The key of bucket ``index`` of ``side`` at ``schema`` (ZERO_KEY, NAN_KEY for those)."""
    if side == ZERO:
        return ZERO_KEY
    if side == NO_BUCKET:
        return NAN_KEY
    return f"{_SIDE_PREFIX[side]}{schema}/{index}"


def parse_key(key: str) -> tuple[int, int, int]:
    """(side, schema, index) of a bucket key; (ZERO, 0, 0) and (NO_BUCKET, 0, 0) for those.
    A ValueError for a key no rule writes."""
    if key == ZERO_KEY:
        return ZERO, 0, 0
    if key == NAN_KEY:
        return NO_BUCKET, 0, 0
    side = _PREFIX_SIDE.get(key[:1])
    schema, slash, index = key[1:].partition("/")
    if side is None or not slash:
        raise ValueError(f"not a native bucket key: {key!r}")
    return side, int(schema), int(index)


def bucket_key_codes(values: np.ndarray, schema: int) -> tuple[np.ndarray, list[str]]:
    """Each value's bucket key as (int32 codes, the distinct keys): strings only for the
    distinct buckets of the column. NaN (a null value read through numpy) is NAN_KEY."""
    sides, indexes = bucket_indexes(values, schema)
    # side + 1 is 0..3: four codes per index keep (side, index) pairs apart
    unique, codes = np.unique(indexes * 4 + (sides.astype(np.int64) + 1), return_inverse=True)
    unique_sides = unique % 4 - 1
    unique_indexes = (unique - (unique_sides + 1)) // 4
    keys = [bucket_key(side, index, schema)
            for side, index in zip(unique_sides.tolist(), unique_indexes.tolist(), strict=True)]
    return codes.astype(np.int32).reshape(-1), keys


def _is_bucket_key(key: str) -> bool:
    """Whether ``key`` is a positive or negative bucket's (not the zero bucket's, NAN_KEY or
    a classic bound's)."""
    return is_native_key(key) and key[0] in _PREFIX_SIDE


def _bucket_keys(parts: Mapping[str, Partial]) -> list[tuple[str, int, int, int]]:
    """(key, side, schema, index) of the positive and negative bucket keys among ``parts``."""
    found = []
    for key in parts:
        if _is_bucket_key(key):
            side, schema, index = parse_key(key)
            found.append((key, side, schema, index))
    return found


def _coarsest(buckets: list[tuple[str, int, int, int]], max_buckets: int,
              schema: int) -> int:
    """The schema the buckets are kept at: the coarsest among them (``schema`` without any),
    lowered while more than ``max_buckets`` (0: no limit) would be populated."""
    target = min((s for _key, _side, s, _index in buckets), default=schema)
    while True:
        populated = {(side, exphist.target_index(index, s, target))
                     for _key, side, s, index in buckets}
        if not max_buckets or len(populated) <= max_buckets or target <= exphist.SCHEMA_MIN:
            return target
        target -= 1


def reduced_parts(parts: Mapping[str, Partial], max_buckets: int
                  ) -> dict[str, Partial] | None:
    """``parts`` (a series' partials by ``le``) with their native bucket keys at one schema:
    the coarsest among them, lowered while more than ``max_buckets`` buckets would be
    populated — the partials of buckets that become one merged, every other key as it is;
    None when they already are so (nothing to rewrite). Exact: a bucket of a schema lies
    whole in one bucket of every coarser schema. What the state keeps per series (and
    window) stays about ``max_buckets`` rows, whatever values hostile logs carry."""
    buckets = _bucket_keys(parts)
    if not buckets:
        return None
    target = _coarsest(buckets, max_buckets, buckets[0][2])
    if all(s == target for _key, _side, s, _index in buckets):
        return None
    out: dict[str, Partial] = {k: p for k, p in parts.items() if not _is_bucket_key(k)}
    for key, side, s, index in buckets:
        new = bucket_key(side, exphist.target_index(index, s, target), target)
        before = out.get(new)
        out[new] = parts[key] if before is None else before.merge(parts[key])
    return out


def native_histogram(parts: Mapping[str, Partial], schema: int, max_buckets: int
                     ) -> tuple[exphist.NativeHistogram, Partial] | None:
    """The native histogram of a series' (or window's) partials by ``le`` — classic bounds'
    partials ignored — and the merge of its partials (count ``n``, exact sum, newest event
    time); None when no value was counted. Bucket counts are the partials' ``n``; the
    histogram is at the coarsest schema among the keys (``schema`` without any), lowered
    until at most ``max_buckets`` (0: no limit) buckets are populated."""
    total = Partial()
    for key, part in parts.items():
        if is_native_key(key):
            total = total.merge(part)
    if total.n <= 0:
        return None
    buckets = _bucket_keys(parts)
    target = _coarsest(buckets, max_buckets, schema)
    histogram = exphist.NativeHistogram(target, count=total.n, sum=total.total)
    zero = parts.get(ZERO_KEY)
    histogram.zero_count = zero.n if zero is not None else 0
    for key, side, s, index in buckets:
        side_buckets = histogram.positive if side == POSITIVE else histogram.negative
        at = exphist.target_index(index, s, target)
        side_buckets[at] = side_buckets.get(at, 0) + parts[key].n
    return histogram, total
