"""Phrases on text fields found through the column's data buffer
(:func:`l2m.engine.match.contains_phrase`) match exactly the rows Arrow's ``match_substring``
matches: nulls, rows without tokens, sliced and large-string columns, repeated hits."""

from __future__ import annotations

import random

import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.match import contains_phrase
from l2m.semantics.values import padded_tokens

WORDS = ["a", "ab", "b", "error", "timed", "out", "é", "x_1", "connection", "refused"]


def _column(rng: random.Random, rows: int) -> list[str | None]:
    out: list[str | None] = []
    for _ in range(rows):
        roll = rng.random()
        if roll < 0.1:
            out.append(None)
        elif roll < 0.2:
            out.append(padded_tokens(rng.choice(["", "--", "!!"])))  # no tokens: "  "
        else:
            out.append(padded_tokens(" ".join(rng.choice(WORDS)
                                              for _ in range(rng.randint(1, 12)))))
    return out


def test_the_same_rows_as_match_substring() -> None:
    rng = random.Random(3)
    needles = [" a ", " ab ", " b a ", " error ", " timed out ", " é ", " x_1 a ",
               " connection refused ", " missing ", " a a a "]
    for _ in range(60):
        values = _column(rng, rng.randint(0, 80))
        for kind in (pa.string(), pa.large_string()):
            column = pa.array(values, kind)
            cut = rng.randint(0, len(values))
            for part in (column, column.slice(cut), column.slice(0, cut)):
                for needle in needles:
                    want = pc.fill_null(pc.match_substring(part, needle), False)
                    assert contains_phrase(part, needle).equals(want), (needle, part)


def test_bytes_under_a_null_row_never_match() -> None:
    # A null slot holding bytes: legal in Arrow, and what the data buffer search would see.
    data = pa.py_buffer(b" a  a  b ")
    offsets = pa.array([0, 3, 6, 9], pa.int32()).buffers()[1]
    validity = pa.array([True, False, True]).buffers()[1]
    column = pa.Array.from_buffers(pa.string(), 3, [validity, offsets, data], null_count=1)
    assert contains_phrase(column, " a ").to_pylist() == [True, False, False]
    assert contains_phrase(column, " b ").to_pylist() == [False, False, True]
