"""The decoding stage reads only the referenced fields (msgspec), yet which lines are logs and
what every referenced value is must be exactly what orjson + ``lookup`` say: the definition
the reference evaluator uses. Hostile lines put every known difference between the two
decoders in referenced and in skipped fields."""

from __future__ import annotations

import json
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine import parse
from l2m.engine.decoding import decode, field_decoder, json_int
from l2m.engine.parse import BLANK, MALFORMED, OK, ParsePlan, parse_lines
from l2m.query.nodes import FieldUse
from l2m.semantics.values import lookup, parse_timestamp
from tests.support.reference import field_forms

PATHS = ("a", "a.b", "a.b.c", "n", "s", "@timestamp")
PLAN = ParsePlan.merge([FieldUse("a", string=True, exists=True),
                        FieldUse("a.b", string=True, number=True, exists=True, text=True),
                        FieldUse("a.b.c", string=True, number=True),
                        FieldUse("n", string=True, number=True, exists=True),
                        FieldUse("s", string=True, text=True)])

BIG = "1" + "0" * 300
HOSTILE = [
    # numbers orjson rejects (past the double range) - referenced, and where msgspec skips
    b'{"n": 1e400}', b'{"x": 1e400}', b'{"x": 1E+400}', b'{"x": -1e400}', b'{"x": 1e0400}',
    b'{"x": [1, 2e308]}', b'{"x": {"y": 1.5e309}}', b'{"x":\t1e400}',
    b'{"x": [3e308]}', b'{"x": [ \n-4E400]}', b'{"x": [1,\r\n 5e+0400], "n": 1}',
    b'{"x": ' + BIG.encode() + b'}', b'{"x": ' + b"9" * 250 + b'e99}',
    b'{"x": 1e308, "n": 2}', b'{"x": 1e-400, "n": 2}', b'{"x": "1e400", "n": 2}',
    b'{"x": ' + b"1" * 220 + b'.5e-300, "n": 1}',
    # integers past 64 bits: orjson reads doubles
    b'{"n": 123456789012345678901234567890}', b'{"n": 18446744073709551615}',
    b'{"n": 18446744073709551616}', b'{"n": -9223372036854775809}', b'{"n": 9007199254740993}',
    b'{"a": {"b": 123456789012345678901234567890}, "s": 99999999999999999999}',
    b'{"x": 123456789012345678901234567890, "n": 1}',
    # invalid UTF-8, surrogates, control characters - referenced and skipped
    b'{"s": "\xff"}', b'{"x": "\xff\xfe", "n": 1}', b'{"\xff": 1, "n": 1}',
    b'{"x": "\\ud800", "n": 1}', b'{"s": "\\ud83d\\ude00"}', b'{"x": "\\udc00"}',
    b'{"x": "a\tb"}', b'{"s": "a\\u0000b"}', b'{"x": "\xed\xa0\x80"}',
    # depth: msgspec's limit is lower than orjson's; orjson decides
    b'{"x": ' + b"[" * 600 + b"]" * 600 + b', "n": 3}',
    b'{"x": ' + b"[" * 1000 + b"]" * 1000 + b', "n": 3}',
    b'{"x": ' + b"[" * 1100 + b"]" * 1100 + b', "n": 3}',
    b'{"a": ' * 900 + b"1" + b"}" * 900,
    # keys: duplicates (last wins), escapes, flat dotted keys and their precedence
    b'{"n": 1, "n": 2}', b'{"n": 1, "n": null}', b'{"a": {"b": 1}, "a": 5}',
    b'{"\\u006e": 7}', b'{"a.b": null, "a": {"b": "nested"}}', b'{"a.b": 0, "a": {"b": 1}}',
    b'{"a.b.c": false, "a": {"b": {"c": 2}}}', b'{"a": {"b.c": 3}}',
    b'{"a": [{"b": 1}]}', b'{"a": "str", "a.b": [1]}', b'{"a": {"b": {"c": {"d": 1}}}}',
    # not logs
    b"", b"   ", b"\t\r\n", b"[]", b"null", b'"x"', b"1", b'{"n": 1} x', b"{", b'{"n": NaN}',
    b'\xef\xbb\xbf{"n": 1}', b'{"n": 01}', b'{"n": 1.}', b'{"n": .5}', None,
    # values of every type
    b'{"n": true, "s": false, "a": null}', b'{"n": -0.0, "s": 1.0}', b'{"n": "1e5", "s": 1e-7}',
    b'{"n": " 2", "a": {"b": [1, 2]}, "s": {"k": "v"}}', b'{"@timestamp": 5, "n": 1.5}',
    b'{"@timestamp": "2026-11-22T10:00:00Z", "s": "Hello, World"}', b'{"@timestamp": true}',
    '{"s": "caf\u00e9", "n": 3}', '{"s": "\ud800"}', b' {"n": 4} ',
]


def _reference(line: bytes | str | None) -> dict[str, object]:
    """One row as orjson + the SPEC's lookup and value forms make it."""
    doc, error = decode(line) if line else (None, None)
    row: dict[str, object] = {}
    if doc is None:
        blank = error is None or not line.strip()  # type: ignore[union-attr]
        row["_status"] = BLANK if blank else MALFORMED
        row["_error"] = None if blank else error
        doc = {}
    else:
        ts = parse_timestamp(lookup(doc, "@timestamp"))
        row["_status"] = OK if ts is not None else 2
        row["_ts"] = ts
    return row | field_forms(doc, PLAN)


def _check(lines: list) -> None:
    out = parse_lines(lines, PLAN).to_pydict()
    for i, line in enumerate(lines):
        expected = _reference(line)
        got = {k: out[k][i] for k in expected}
        assert got == expected, (i, line[:80] if line else line)


def test_hostile_lines_are_decoded_exactly_as_orjson_decodes_them():
    _check(HOSTILE)


def test_each_hostile_line_alone_and_among_clean_ones():
    """The pre-checks work on the whole batch: a suspect line must not change its
    neighbours, and a clean batch must not need them."""
    clean = [json.dumps({"n": i, "s": f"v{i}", "a": {"b": i * 1.5}}).encode() for i in range(5)]
    for line in HOSTILE:
        _check([line])
        _check([*clean[:2], line, *clean[2:]])


def test_a_batch_parsed_in_slices_equals_the_batch_parsed_whole(monkeypatch):
    """parse_lines works on slices of SLICE_LINES lines (cache-sized); the slices' rows, and
    the record times that go with them, must line up with the whole batch's."""
    lines = [*HOSTILE, *(json.dumps({"n": i, "@timestamp": 1_795_000_000_000 + i}).encode()
                         for i in range(20))]
    record_ts = [1_795_000_000_000 + 7 * row for row in range(len(lines))]
    whole = parse_lines(lines, PLAN, fallback_ts=record_ts, now_ms=1_795_000_000_000)
    monkeypatch.setattr(parse, "SLICE_LINES", 7)
    sliced = parse_lines(lines, PLAN, fallback_ts=record_ts, now_ms=1_795_000_000_000)
    assert sliced.num_rows == len(lines)
    assert sliced.to_pydict() == whole.to_pydict()
    _check(lines)


def test_big_integers_read_as_orjson_reads_them():
    assert json_int(2**64 - 1) == 2**64 - 1
    assert json_int(2**64) == float(2**64)
    assert json_int(-(2**63)) == -(2**63)
    assert isinstance(json_int(-(2**63) - 1), float)


def test_paths_with_odd_keys_decode():
    paths = ("", ".", "a..b", "a.", ".a", "é.ß", "k0", "__x", "a b.c d")
    decoder = field_decoder(paths)
    doc = {"": 1, ".": 2, "a": {"": {"b": 3}, "b": 4}, "é": {"ß": 5}, "k0": 6, "__x": 7,
           "a b": {"c d": 8}, "a.": 9}
    line = json.dumps(doc).encode()
    for out in (decoder.read([line]).values, decoder.read_exactly([line]).values):
        assert {p: out[p].to_list()[0] for p in paths} == {p: lookup(doc, p) for p in paths}


scalar = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=5), st.sampled_from(["1e3", " 2", "2026-11-22T10:00:00+01:00"]))
value = st.recursive(scalar, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.sampled_from(["b", "c", "b.c", "x"]), inner, max_size=3)), max_leaves=8)
key = st.sampled_from(["a", "a.b", "a.b.c", "n", "s", "@timestamp", "x", "y.z", "b"])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.dictionaries(key, value, max_size=6), min_size=1, max_size=6),
       st.randoms(use_true_random=False))
def test_random_logs_decode_exactly_as_orjson_decodes_them(docs, rng: random.Random):
    lines = []
    for doc in docs:
        text = json.dumps(doc, indent=rng.choice([None, 1]), ensure_ascii=rng.random() < 0.5)
        # Python writes integers of any size and doubles to 17 digits: some past the range
        # orjson accepts; a spliced exponent makes others overflow.
        if rng.random() < 0.2:
            text = text.replace("e+", "e+3", 1)
        lines.append(text.encode() if rng.random() < 0.8 else text)
    _check(lines)
