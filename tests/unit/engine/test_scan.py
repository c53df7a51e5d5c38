"""The C scanner (l2m/engine/_scan.c) may refuse any line, but a line it accepts must be a log
orjson accepts, with every referenced value exactly what orjson + the SPEC's lookup give:
the same type, the same value (``-0.0`` is not ``0.0``), objects and arrays only present."""

from __future__ import annotations

import json
import random
from typing import Any

import numpy as np
import orjson
import pytest

from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine import _scan  # type: ignore[attr-defined]
from l2m.engine.decoding import COMPOSITE, decode, field_decoder
from l2m.semantics.values import lookup
from tests.unit.engine.test_decoding import HOSTILE

PATHS = ("a", "a.b", "a.b.c", "n", "s", "@timestamp", "x.y")
DECODER = field_decoder(PATHS)


def _scan_one(line: Any) -> Any:
    """The scanner's reading of one line, or None where it is not sure of it."""
    out = _scan.scan([line], DECODER.tree, len(PATHS), -1)
    if isinstance(out, int):
        assert out == 0  # the row it is not sure of
        return None
    return out


def _form(value: Any) -> Any:
    """What a rule can tell of a value: its type and exact text; objects and arrays alike."""
    if isinstance(value, dict | list) or value is COMPOSITE or hasattr(value, "__struct_fields__"):
        return "composite"
    return None if value is None else (type(value).__name__, repr(value))


def _reference(line: bytes) -> dict[str, Any]:
    doc = orjson.loads(line)
    assert isinstance(doc, dict)
    return {p: _form(lookup(doc, p)) for p in PATHS}


def _scanned(line: bytes) -> dict[str, Any]:
    values = DECODER.read([line]).values
    return {p: _form(values[p].to_list()[0]) for p in PATHS}


def test_the_generators_logs_are_all_scanned():
    gen = LogGenerator(GeneratorConfig(seed=5))
    lines = [gen.next_line() for _ in range(2_000)]
    decoder = field_decoder(("http.status", "message", "@timestamp", "kubernetes.namespace"))
    assert not isinstance(_scan.scan(lines, decoder.tree, len(decoder.paths), -1), int)


@pytest.mark.parametrize("line", [
    None, "{}", b"", b"  ", b"[]", b"1", b'{"n": 1} x', b'\xef\xbb\xbf{}',
    b'{"n": 1, "n": 2}', b'{"n": 1, "n": null}', b'{"a": {"b": 1}, "a": 5}',  # duplicates
    b'{"n": 1, "\\u006e": 2}',  # the same key, once escaped
    b'{"n": 12345678901234567890}', b'{"n": 1234567890123456789}',  # past 18 digits
    b'{"x": 1e400}', b'{"x": 1e100}', b'{"x": 1e-100}', b'{"x": ' + b"1" * 101 + b'}',
    b'{"x": "\xff"}', b'{"x": "\xed\xa0\x80"}', b'{"x": "\xc0\xaf"}', b'{"x": "\xf4\x90\x80\x80"}',
    b'{"x": "\\ud800"}', b'{"x": "\\udc00\\ud800"}', b'{"x": "a\tb"}', b'{"x": "\\x"}',
    b'{"x": ' + b"[" * 64 + b"]" * 64 + b'}', b'{"n": 01}', b'{"n": 1.}', b'{"n": -}',
    b'{"n": NaN}', b'{"n": tru}', b'{"n": 1,}', b'{"n" 1}', b'{n: 1}', b'{"n": 1',
])
def test_what_the_scanner_is_not_sure_of_goes_the_exact_way(line):
    assert _scan_one(line) is None


@pytest.mark.parametrize("line", [
    b'{}', b' {"n": 4} \r\n', b'{"x": 12345678901234567890}', b'{"x": {"n": 1, "n": 2}}',
    b'{"s": "caf\\u00e9 \\ud83d\\ude00 \\"q\\" \\\\ \\/ \\b\\f\\n\\r\\t"}',
    b'{"s": "\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xf4\x8f\xbf\xbf"}', b'{"n": -0}',
    b'{"n": -0.0, "s": 1E+2, "a": [1, {"b": 2}], "x.y": true, "x": {"y": false}}',
    b'{"n": 123456789012345678, "s": 1e99, "@timestamp": 5e-99}',
    b'{"a.b": null, "a": {"b": "nested"}}', b'{"a.b": 0, "a": {"b": 1}}',
    b'{"a": {"b": {"c": {"d": 1}}}, "a.b.c": null}', b'{"x": ' + b"[" * 63 + b"]" * 63 + b'}',
    b'{"s": "a\\u0000b"}', b'{"\\u006e": 7, "\\u0061": {"b": 1}}', b'{"\\u00e9": 1}',
])
def test_what_the_scanner_reads_is_what_orjson_reads(line):
    assert _scan_one(line) is not None
    assert _scanned(line) == _reference(line)


def test_hostile_lines_scanned_or_not_read_as_orjson_reads_them():
    for line in HOSTILE:
        if isinstance(line, bytes) and _scan_one(line) is not None:
            assert _scanned(line) == _reference(line), line


SEEDS = [
    b'{"a": {"b": {"c": 1.25}}, "n": -17, "s": "caf\\u00e9", "@timestamp": "2026-11-22T10:00:00Z"}',
    b'{"a.b": "flat", "a": {"b": [1, 2.5e3, {"c": null}]}, "x": {"y": true}, "n": 0.1}',
    b'{"s": "\xc3\xa9\\ud83d\\ude00", "n": 18446744073709551615, "x.y": false, "q": [[], {}]}',
    b' {"a": {"b": "2"}, "a.b.c": 3, "n": 1e-7, "s": null, "m": "\\"\\\\\\/"} ',
]
# Bytes a mutation puts in: the grammar's own, and the ones that break UTF-8 and escapes.
ALPHABET = b'{}[]:,"\\/ \t\r\n0123456789-+.eEtrufalsn\x00\x1f\x7f\x80\xbf\xc0\xc3\xed\xf0\xf4\xffu'


def _mutate(rng: random.Random, line: bytes) -> bytes:
    data = bytearray(line)
    for _ in range(rng.randint(1, 3)):
        op, at = rng.random(), rng.randrange(len(data) + 1)
        byte = ALPHABET[rng.randrange(len(ALPHABET))]
        if op < 0.4 and at < len(data):
            data[at] = byte
        elif op < 0.7:
            data.insert(at, byte)
        elif at < len(data):
            del data[at]
    return bytes(data)


def test_mutated_lines_the_scanner_accepts_are_logs_orjson_reads_the_same():
    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    accepted = 0
    for _ in range(20_000):
        line = _mutate(rng, rng.choice(SEEDS))
        if _scan_one(line) is None:
            continue
        accepted += 1
        try:
            reference = _reference(line)
        except (orjson.JSONDecodeError, AssertionError):
            pytest.fail(f"seed {seed}: scanned a line orjson refuses: {line!r}")
        assert _scanned(line) == reference, (seed, line)
    assert accepted > 1_000  # the mutations leave many lines valid: the property is exercised


def test_random_documents_scan_as_orjson_reads_them():
    rng = random.Random(7)
    keys = ["a", "a.b", "b", "c", "n", "s", "x", "y", "x.y", "@timestamp", "é"]

    def value(depth: int) -> Any:
        roll = rng.random()
        if depth < 3 and roll < 0.25:
            return {rng.choice(keys): value(depth + 1) for _ in range(rng.randint(0, 3))}
        if depth < 3 and roll < 0.35:
            return [value(depth + 1) for _ in range(rng.randint(0, 3))]
        return rng.choice([None, True, False, rng.randint(-10**18, 10**18), rng.random() * 1e6,
                           -0.0, rng.choice(["", "é", "\u2028", "a\"b", "\\", "\U0001F600"])])

    for _ in range(3_000):
        doc = {rng.choice(keys): value(0) for _ in range(rng.randint(0, 6))}
        line = json.dumps(doc, ensure_ascii=rng.random() < 0.5).encode()
        assert _scan_one(line) is not None, line
        assert _scanned(line) == _reference(line), line


def _time_string(rng: random.Random) -> str:
    """An ISO-like time: mostly the scanner's shape, with every field at and past its
    bounds, other fraction lengths and zones the scanner leaves to Python."""
    year = rng.choice([0, 1, 2, 1969, 1970, 2024, 2026, 2100, 9999, rng.randint(0, 9999)])
    parts = [f"{year:04d}-{rng.randint(0, 13):02d}-{rng.randint(0, 32):02d}",
             rng.choice(["T", "T", "T", " ", "t"]),
             f"{rng.randint(0, 24):02d}:{rng.randint(0, 60):02d}:{rng.randint(0, 60):02d}"]
    digits = rng.choice([0, 0, 3, 3, 6, 1, 2, 4, 7, 9])
    if digits:
        parts.append(rng.choice([".", ".", ","]) + "".join(rng.choice("0123456789")
                                                           for _ in range(digits)))
    zone = rng.choice(["Z", "Z", "+HH:MM", "-HH:MM", "+HHMM", "+HH", "", "z", "+HH:MM:SS"])
    zone = (zone.replace("HH", f"{rng.randint(0, 24):02d}", 1)
            .replace("MM", f"{rng.randint(0, 60):02d}").replace("SS", "30"))
    return "".join(parts) + zone


def test_event_times_read_in_c_are_what_parse_timestamp_reads():
    from l2m.engine.parse import event_time_column
    from l2m.semantics.values import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, parse_timestamp

    seed = random.randrange(2**32)
    print(f"seed {seed}")
    rng = random.Random(seed)
    values: list[Any] = [_time_string(rng) for _ in range(20_000)]
    values += ["0001-01-01T00:00:00.000Z", "0001-01-01T00:30:00+01:00",
               "9999-12-31T23:59:59.999999Z", "9999-12-31T23:00:00-01:00",
               "2024-02-29T00:00:00Z", "2023-02-29T00:00:00Z", "2000-02-29T12:00:00.5Z",
               "1900-02-29T00:00:00Z", "1969-12-31T23:59:59.999999-00:30",
               "2026-11-22T10:00:00.060Z", "2026-11-22T10:00:00.060\\u005a"]
    values += [MIN_TIMESTAMP_MS - 1, MIN_TIMESTAMP_MS, 0, -1, MAX_TIMESTAMP_MS,
               MAX_TIMESTAMP_MS + 1, 1_795_341_600_000, 1.5, True, None, [1], {"t": 1}]
    decoder = field_decoder(("@timestamp", "n"), "@timestamp")
    lines = [orjson.dumps({"@timestamp": v, "n": 1}) for v in values]
    lines[values.index("2026-11-22T10:00:00.060\\u005a")] = \
        b'{"@timestamp": "2026-11-22T10:00:00.060\\u005a"}'
    column = decoder.read(lines).values["@timestamp"]
    assert column.times is not None, "scanned"
    got = event_time_column(column).to_pylist()
    expected = [parse_timestamp(orjson.loads(line)["@timestamp"]) for line in lines]
    for value, g, e in zip(values, got, expected, strict=True):
        assert g == e, (seed, value)
    assert column.timed is not None and column.timed.sum() > 1_000  # many read in C
    # and event_time_column takes the scanner's times where it read them
    column.times = np.full(len(lines), 7, np.int64)
    read = event_time_column(column).to_pylist()
    assert {t for t, ok in zip(read, column.timed.tolist(), strict=True) if ok} == {7}


def test_a_tree_naming_a_slot_or_level_that_does_not_exist_is_refused():
    for tree in ([[(b"a", 1, 2, -1)]], [[(b"a", 0, 2, 1)]], [[(b"a", 0, 2, -2)]],
                 [[(b"a", -2, 2, -1)]]):
        with pytest.raises(ValueError, match="out of range"):
            _scan.scan([b'{"a": {"b": 1}}'], tree, 1, -1)


def test_the_scanner_names_the_first_line_it_is_not_sure_of():
    good = b'{"n": 1}'
    assert _scan.scan([good, good, b"{", good, b"["], DECODER.tree, len(PATHS), -1) == 2
    assert _scan.scan([None], DECODER.tree, len(PATHS), -1) == 0


def test_skipping_leaves_the_lines_it_is_not_sure_of_missing_and_lists_them():
    good = b'{"n": 1, "@timestamp": 1795000000000}'
    decoder = field_decoder(("n", "@timestamp"), "@timestamp")
    lines = [good, b"{", good, None, b'{"n": 1, "n": 2}', good]
    (n, _ts), times, timed, refused = _scan.scan(lines, decoder.tree, 2, 1, True)
    assert refused == [1, 3, 4]
    assert list(n[0]) == [_scan.INT, _scan.MISSING, _scan.INT, _scan.MISSING, _scan.MISSING,
                          _scan.INT]
    assert np.frombuffer(timed, np.bool_).tolist() == [True, False, True, False, False, True]
    assert np.frombuffer(times, np.int64).tolist() == [1795000000000, 0, 1795000000000, 0, 0,
                                                       1795000000000]
    assert _scan.scan([good], decoder.tree, 2, 1, True)[3] == []


def test_a_slice_with_lines_the_scanner_refuses_parses_as_the_exact_path(monkeypatch):
    """Lines that are not logs stay missing in the scanned slice; logs the scanner leaves to
    the exact path are decoded each on its own, their neighbours still scanned, and past
    EXACT_PIECES of them the rest of the slice goes the exact way. Either way the batch — and
    the record times that go with its rows — is the exact path's."""
    from l2m.engine import decoding, parse
    from l2m.engine.parse import ParsePlan, parse_lines
    from l2m.query.nodes import FieldUse

    plan = ParsePlan.merge([FieldUse("n", string=True, number=True, exists=True),
                            FieldUse("s", string=True, text=True), FieldUse("a.b", number=True)])
    rng = random.Random(3)
    clean = [orjson.dumps({"n": i, "s": f"v{i % 7}", "a": {"b": i / 4},
                           "@timestamp": 1_795_000_000_000 + i}) for i in range(60)]
    bad = [line for line in HOSTILE if _scan_one(line) is None]
    not_logs = [line for line in bad if decode(line)[0] is None]
    assert 0 < len(not_logs) < len(bad)
    now = 1_795_000_000_000
    for refused, among in [(n, bad) for n in (1, 2, 7, 8, 9, 25)] + \
            [(n, not_logs) for n in (1, 3, 30)]:
        lines: list[Any] = list(clean)
        for line in rng.sample(among, min(refused, len(among))):
            lines.insert(rng.randrange(len(lines) + 1), line)
        record_ts = [now + 13 * row for row in range(len(lines))]
        scanned = parse_lines(lines, plan, fallback_ts=record_ts, now_ms=now).to_pydict()
        with monkeypatch.context() as m:
            m.setattr(decoding.FieldDecoder, "scan", lambda self, lines: 0)
            m.setattr(decoding.FieldDecoder, "scan_around", lambda self, lines: 0)
            m.setattr(parse, "EXACT_PIECES", 0)
            exact = parse_lines(lines, plan, fallback_ts=record_ts, now_ms=now).to_pydict()
        assert scanned == exact, refused
