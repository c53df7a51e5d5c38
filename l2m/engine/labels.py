"""Label values from logs, bounded: a group-by value longer than the job's limit is cut to
the limit with a visible marker, and every cut is counted per rule (SPEC §7).

Input: a column of group-by values (strings, null when absent) and the limit in characters
(Unicode code points). Output: each value's series-key part (``<length>:<value>``, ``-`` when
absent or empty, the encoding :func:`l2m.engine.samples.series_labels` reads) with values over the
limit cut — the first ``limit - len(CUT_MARKER)`` characters followed by :data:`CUT_MARKER`,
exactly ``limit`` characters in all — and which rows were cut.

Cutting keeps every log counted: logs whose long values share the kept prefix count into one
series (the marker says its value is not the log's), so totals stay exact while no log can
put a megabyte into a label, the state, a Kafka key or a sample. The fan-out stage
(:mod:`l2m.engine.fanout`) emits one cut row per cut label value (rule :data:`CUT_RULE`,
series: the rule's id), which the pipeline counts like the input statuses: exactly, in the
checkpoint, as ``l2m_label_values_cut_total{rule}`` (:mod:`l2m.state.counters`) and in
backfill's summary.

An empty value is no label (SPEC §3), as in Prometheus, whose remote write drops empty label
values: its key part is the absent value's ``-``, so a log with ``"user": ""`` counts into the
same series as one without ``user``. Kept apart, the two series would reach the TSDB as one
series with two values per timestamp."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.defaults import MAX_LABEL_VALUE_LENGTH, MIN_LABEL_VALUE_LENGTH

# What ends a cut label value (6 characters).
CUT_MARKER = "…(cut)"
# The rule id of the cut rows (never a valid rule id: ids are [a-z0-9][a-z0-9_-]*).
CUT_RULE = "__cut__"

__all__ = ["CUT_MARKER", "CUT_RULE", "MAX_LABEL_VALUE_LENGTH", "MIN_LABEL_VALUE_LENGTH",
           "cut_value", "encoded", "encoded_codes", "one_value_series",
           "one_value_series_column"]


def cut_value(value: str, limit: int = MAX_LABEL_VALUE_LENGTH) -> str:
    """One value as a label carries it: itself up to ``limit`` characters, else its first
    ``limit - len(CUT_MARKER)`` characters and the marker (the Arrow path, :func:`encoded`,
    does the same to whole columns)."""
    if len(value) <= limit:
        return value
    return value[:limit - len(CUT_MARKER)] + CUT_MARKER


def encoded(values: pa.Array, limit: int = MAX_LABEL_VALUE_LENGTH
            ) -> tuple[pa.Array, np.ndarray | None]:
    """``<length in characters>:<value>`` per row, ``-`` for null and for the empty string
    (unambiguous whatever the values), values over ``limit`` cut (:func:`cut_value`); and
    which rows were cut (a bool array), None when none was."""
    codes, keys, cut = encoded_codes(values, limit)
    return keys.take(pa.array(codes)), cut


def encoded_codes(values: pa.Array, limit: int = MAX_LABEL_VALUE_LENGTH
                  ) -> tuple[np.ndarray, pa.Array, np.ndarray | None]:
    """:func:`encoded` as a code per row into the distinct keys, each key once: the fan-out
    combines several fields' codes without building a string per row."""
    # Group-by values repeat (services, levels, status codes): each distinct value is encoded
    # once, then taken for every row.
    codes = values.dictionary_encode()
    distinct = codes.dictionary
    length = pc.utf8_length(distinct)
    over = pc.greater(length, limit)
    cut: np.ndarray | None = None
    if pc.any(over).as_py():
        kept = pc.utf8_slice_codeunits(distinct, 0, limit - len(CUT_MARKER))
        distinct = pc.if_else(over, pc.binary_join_element_wise(kept, CUT_MARKER, ""),
                              distinct)
        length = pc.utf8_length(distinct)
        cut = np.asarray(pc.fill_null(over.take(codes.indices), False)
                         .to_numpy(zero_copy_only=False), bool)
    present = _prefixed(length, distinct).cast(pa.string())
    empty = pc.equal(length, 0)
    has_empty = pc.any(empty).as_py()
    if has_empty:  # no label: the absent value's key
        present = pc.if_else(empty, pa.scalar("-", pa.string()), present)
    keys = pa.concat_arrays([present, pa.array(["-"], pa.string())])
    rows = np.asarray(pc.fill_null(codes.indices, len(distinct)).to_numpy(zero_copy_only=False),
                      np.int64)
    # Long values sharing their kept prefix, an empty value and the absent one: one key, one
    # code.
    if cut is not None or has_empty:
        unique = keys.dictionary_encode()
        rows = np.asarray(unique.indices, np.int64)[rows]
        keys = unique.dictionary
    return rows, keys, cut


def one_value_series_column(values: pa.Array) -> pa.Array:
    """:func:`one_value_series` of each value of a string column, not cut (the cut rows'
    rule ids)."""
    return _prefixed(pc.utf8_length(values), values)


def _prefixed(length: pa.Array, values: pa.Array) -> pa.Array:
    """``<length>:<value>``: the series key encoding of one label value."""
    return pc.binary_join_element_wise(pc.cast(length, pa.string()), values, ":")


def one_value_series(value: str) -> str:
    """The series key of a one-label series (``2:ok``; the cut rows' rule id), in the
    encoding of :func:`encoded`."""
    return f"{len(value)}:{value}"
