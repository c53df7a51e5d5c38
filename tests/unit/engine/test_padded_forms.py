"""Text forms built a column at a time (:func:`l2m.engine.parse.padded_forms`, issue 58) are
:func:`l2m.semantics.values.padded_tokens` of each value, ASCII or not; text patterns read
from one split of the column (each token, or each distinct token once) match as each pattern
splitting it again did."""

from __future__ import annotations

import random
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.parse import _TOKEN_BYTES, padded_forms
from l2m.query.patterns import anchored, match_any_token, token_lists
from l2m.semantics.values import padded_tokens

# ASCII, and characters where Unicode's and ASCII's rules part: letters past ASCII, a
# non-breaking space, a line separator, a title-case digraph, a ligature, a dotted capital I
CHARS = [chr(c) for c in range(128)] + ["é", "İ", "ß", "日", "\u00a0", "\u2028", "ǅ", "ﬁ"]


def test_each_ascii_byte_maps_as_the_token_regex_reads_it() -> None:
    for c in range(128):
        want = chr(c).lower() if re.fullmatch(r"\w", chr(c)) else " "
        assert chr(_TOKEN_BYTES[c]) == want, c


def test_padded_forms_equal_padded_tokens_per_value() -> None:
    rng = random.Random(4)
    for _ in range(1_500):
        values = ["".join(rng.choice(CHARS) for _ in range(rng.randint(0, 30)))
                  for _ in range(rng.randint(0, 20))]
        column = pa.array(values, pa.string())
        for part in (column, column.slice(rng.randint(0, len(values)))):
            assert padded_forms(part).to_pylist() == [padded_tokens(v)
                                                      for v in part.to_pylist()]
    assert padded_forms(pa.array(["Connection REFUSED: db-1", "  "])).to_pylist() == [
        " connection refused db 1 ", "  "]


def test_text_patterns_on_one_split_match_as_before() -> None:
    rng = random.Random(5)
    words = ["oom", "oomkilled", "timeout", "time", "x1", "é", "a_b"]
    padded = pa.array([padded_tokens(" ".join(rng.choice(words) for _ in range(rng.randint(0, 6))))
                       for _ in range(300)], pa.string())
    tokens, distinct = token_lists(padded), token_lists(padded, distinct=True)
    assert len(distinct[0]) == len(set(distinct[0].to_pylist())) < len(tokens[0])
    for regex in ["oom.*", "time?out", "[a-z]+[0-9]", "é", "zzz"]:
        split = pc.split_pattern(padded, " ")
        flat = pc.list_flatten(split)
        hit = pc.and_(pc.match_substring_regex(flat, anchored(regex)),
                      pc.greater(pc.utf8_length(flat), 0))
        rows = pc.filter(pc.list_parent_indices(split), hit).to_numpy(zero_copy_only=False)
        want = np.zeros(len(padded), dtype=bool)
        want[rows] = True
        assert match_any_token(padded, regex, tokens).to_pylist() == want.tolist()
        assert match_any_token(padded, regex, distinct).to_pylist() == want.tolist()
        assert match_any_token(padded, regex).to_pylist() == want.tolist()
