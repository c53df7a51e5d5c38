"""Parse stage without Spark: statuses, the generated extractor against the reference
semantics of l2m.semantics.values (property test), fallback timestamps, and the pattern
columns (RE2):
deduplicated, null-safe, equal to RE2 per value, and linear on hostile patterns."""

from __future__ import annotations

import json
import random
import time

import orjson
import pyarrow as pa
import pyarrow.compute as pc
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.engine.parse import BLANK, KAFKA_TIME, MALFORMED, NO_TIMESTAMP, OK, ParsePlan, parse_lines
from l2m.query.nodes import FieldUse
from l2m.query.patterns import regex_problem, wildcard_regex
from l2m.semantics.values import text_tokens
from tests.support.reference import field_forms

PLAN = ParsePlan.merge([
    FieldUse("status", string=True, number=True, exists=True),
    FieldUse("a.b", string=True, number=True, exists=True, text=True),
    FieldUse("a.b.c", string=True),
    FieldUse("message", text=True),
])


def test_statuses_and_errors():
    batch = parse_lines([
        b'{"@timestamp": 1000, "status": 500}',
        b'{"status": 1}',
        b'{"status": ',
        b"[1, 2]",
        b"",
        b"   ",
        None,
        '{"@timestamp": "2026-11-22T10:00:00Z", "message": "Hello World"}',
    ], PLAN).to_pydict()
    assert batch["_status"] == [OK, NO_TIMESTAMP, MALFORMED, MALFORMED, BLANK, BLANK, BLANK, OK]
    assert batch["_ts"] == [1000, None, None, None, None, None, None, 1795341600000]
    assert batch["_error"][2].startswith("invalid JSON")
    assert batch["_error"][3] == "not a JSON object (a list)"
    assert batch["_error"][6] is None  # a Kafka tombstone is blank, not malformed
    col = PLAN.column
    assert batch[col("status", "s")] == ["500", "1", None, None, None, None, None, None]
    assert batch[col("status", "n")][:2] == [500.0, 1.0]
    assert batch[col("status", "x")][:3] == [True, True, False]
    assert batch[col("message", "t")][7] == " hello world "


def test_fallback_timestamp_replaces_missing_event_time():
    batch = parse_lines([b'{"a": 1}', b'{"@timestamp": "bad"}', b'{"@timestamp": 5}',
                         b"not json"], PLAN, fallback_ts=[111, 222, 333, 444]).to_pydict()
    assert batch["_ts"] == [111, 222, 5, 444]
    assert batch["_status"] == [KAFKA_TIME, KAFKA_TIME, OK, MALFORMED]


def test_custom_timestamp_field_nested():
    plan = ParsePlan.merge([FieldUse("x", string=True)], timestamp_field="event.time")
    batch = parse_lines([b'{"event": {"time": 42}}'], plan).to_pydict()
    assert batch["_ts"] == [42]


scalars = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.sampled_from(["", "500", "1.5", " 2", "abc", "Hello, World!", "1e3"]))
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=2), st.dictionaries(st.sampled_from(["b", "c", "b.c"]), inner,
                                                 max_size=3)), max_leaves=6)
docs = st.dictionaries(st.sampled_from(["status", "a", "a.b", "a.b.c", "message", "x"]),
                       values, max_size=5)


@settings(max_examples=300, deadline=None)
@given(st.lists(docs, min_size=1, max_size=8))
def test_field_columns_match_reference_semantics(batch_docs):
    lines = [json.dumps(d).encode() for d in batch_docs]
    out = parse_lines(lines, PLAN).to_pydict()
    for row, doc in enumerate(batch_docs):
        expected = field_forms(doc, PLAN)
        assert {name: out[name][row] for name in expected} == expected


# --- patterns: evaluated here with RE2, one column per distinct (field, pattern) ----------

PATTERNS = ParsePlan.merge([
    FieldUse("s", keyword_patterns=("w.b", "[[]")),
    FieldUse("s", string=True, keyword_patterns=("w.b",)),  # same pattern: one column
    FieldUse("message", text_patterns=("tim.*", "x")),
    FieldUse("n", keyword_patterns=("1.*",)),
])


def test_plan_dedupes_patterns_and_round_trips_through_json():
    assert PATTERNS.fields[2] == FieldUse("s", string=True, keyword_patterns=("[[]", "w.b"))
    plan = ParsePlan.merge(PATTERNS.fields, max_future_ms=1234)
    again = ParsePlan.from_json(plan.to_json())
    assert again == plan and hash(again) == hash(plan)
    assert again.max_future_ms == 1234
    names = plan.schema().names
    assert names.count(plan.pattern_column("s", False, "w.b")) == 1
    assert plan.pattern_column("message", True, "x") in names
    assert plan.spark_schema_ddl().count("BOOLEAN") == 5


def test_pattern_columns_are_whole_value_or_whole_token_and_never_null():
    docs = [{"s": "web", "message": "Timeout after 30s", "n": 12},
            {"s": "[", "message": "x y", "n": 2},
            {"s": "web\n", "message": "", "n": True},
            {"message": None},
            {"s": {"a": 1}, "message": ["timeout"]}]
    out = parse_lines([json.dumps(d) for d in docs], PATTERNS).to_pydict()
    col = PATTERNS.pattern_column
    assert out[col("s", False, "w.b")] == [True, False, False, False, False]
    assert out[col("s", False, "[[]")] == [False, True, False, False, False]
    assert out[col("message", True, "tim.*")] == [True, False, False, False, False]
    assert out[col("message", True, "x")] == [False, True, False, False, False]
    assert out[col("n", False, "1.*")] == [True, False, False, False, False]
    # the string form patterns need is not emitted where no rule reads it
    assert PATTERNS.column("n", "s") not in out and PATTERNS.column("s", "s") in out


def _timed(lines: list[str], plan: ParsePlan) -> tuple[dict[str, list], float]:
    start = time.perf_counter()
    out = parse_lines(lines, plan).to_pydict()
    return out, time.perf_counter() - start


def test_hostile_patterns_over_long_values_run_in_linear_time():
    """What backtracking engines (Python's re, Java's regex behind Spark's rlike) take minutes
    or more on, RE2 runs in one pass: measured, with a generous bound."""
    a100k = "a" * 100_000
    lines = [json.dumps({"f": a100k, "message": a100k}),
             json.dumps({"f": a100k + "c", "message": "x " + "ab" * 50_000}),
             json.dumps({"f": "ab" * 50_000, "message": ("a " * 50_000)})]
    stars = wildcard_regex(("*", "a", "*", "a", "*", "a", "*", "a", "*", "b"))
    plan = ParsePlan.merge([FieldUse("f", keyword_patterns=("((a+)+)+c", stars)),
                            FieldUse("message", text_patterns=("((a+)+)+c", stars))])
    out, elapsed = _timed(lines, plan)
    print(f"\nparse_lines, 3 logs of 100k characters, 4 hostile patterns: {elapsed * 1000:.0f} ms")
    assert out[plan.pattern_column("f", False, "((a+)+)+c")] == [False, True, False]
    assert out[plan.pattern_column("f", False, stars)] == [False, False, True]
    assert out[plan.pattern_column("message", True, "((a+)+)+c")] == [False, False, False]
    assert out[plan.pattern_column("message", True, stars)] == [False, True, False]
    assert elapsed < 5


def test_the_costliest_pattern_validate_accepts_stays_bounded():
    """At the expansion limit, with RE2's DFA defeated, the cost is still per character."""
    regex = ".*a.{996}c"
    assert regex_problem(regex) is None
    rng = random.Random(7)
    value = "".join(rng.choice("ab") for _ in range(100_000))
    plan = ParsePlan.merge([FieldUse("f", keyword_patterns=(regex,))])
    out, elapsed = _timed([json.dumps({"f": value})], plan)
    print(f"\nparse_lines, 1 log of 100k characters, {regex}: {elapsed * 1000:.0f} ms")
    assert out[plan.pattern_column("f", False, regex)] == [False]
    assert elapsed < 5


tokens = st.lists(st.sampled_from(["a", "ab", "B", "x_1", "é", "ß", "10", " ", "-", "\n"]),
                  max_size=6).map("".join)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), tokens), min_size=1, max_size=6),
       st.sampled_from(["a.*", "ab|b", ".", "[a-z_0-9]+", "\\w+", "(?i)b", ".*\\n.*", "é?ß*"]))
def test_pattern_columns_match_re2_per_value(values, regex):
    plan = ParsePlan.merge([FieldUse("f", keyword_patterns=(regex,), text_patterns=(regex,))])
    out = parse_lines([json.dumps({"f": v}) for v in values], plan).to_pydict()
    whole = f"(?s)\\A(?:{regex})\\z"

    def re2(text: str) -> bool:
        return bool(pc.match_substring_regex(pa.array([text]), whole)[0].as_py())

    for row, value in enumerate(values):
        assert out[plan.pattern_column("f", False, regex)][row] == (
            value is not None and re2(value))
        assert out[plan.pattern_column("f", True, regex)][row] == (
            value is not None and any(re2(t) for t in text_tokens(value)))


iso_part = st.sampled_from(["0", "1", "5", "9", "-", ":", "T", " ", ".", "Z", "+", "x", "6", "٣"])
iso = st.tuples(
    st.sampled_from(["2026-11-22T10:", "0001-01-01T00:", "9999-12-31T23:", "2026-02-30T10:",
                     "2026-11-22 10:", "2026-13-01T00:", "2026-11-22T24:", "20261122T1000:"]),
    st.sampled_from(["00", "59", "60", "5x", "07"]), st.sampled_from([":", "."]),
    st.sampled_from(["00.060", "59.999", "60.000", "00.06", "00.0601", "0a.123", "00:000"]),
    st.sampled_from(["Z", "+01:00", "-23:59", "+24:00", "+01:00:30", "z", "", "+0100", "Zx"]),
    st.lists(iso_part, max_size=2).map("".join)).map("".join)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(iso, st.integers(), st.floats(), st.none(), st.text(max_size=30)),
                max_size=12))
def test_event_times_equal_the_full_parse(values):
    from l2m.engine.parse import event_times
    from l2m.semantics.values import parse_timestamp

    assert event_times(values) == [parse_timestamp(v) for v in values]


# --- the column shapes converted whole in Arrow (integers among strings, strings only) -----

_BIG = [0, -1, 200, 2**53 + 1, 2**63 - 1, -(2**63), 2**63, 2**64 - 1, 2**64, -(2**63) - 1,
        10**30]


def _same_as_reference(docs: list[dict]) -> None:
    lines = [json.dumps(d).encode() for d in docs]
    out = parse_lines(lines, PLAN).to_pydict()
    for row, line in enumerate(lines):
        # As orjson reads the line (the definition of a log): an integer past 64 bits is a
        # double.
        doc = orjson.loads(line)
        expected = field_forms(doc, PLAN)
        assert {name: out[name][row] for name in expected} == expected, doc


def test_integer_columns_print_as_the_reference_prints_them():
    """A column of integers (status codes), of integers and strings, and of integers with a
    bool, a float or one past int64 among them: each shape the same forms as the reference
    (an integer past 64 bits is a double, as orjson reads it)."""
    for column in (_BIG, [*_BIG, None], ["500", *_BIG, None, "x"], [*_BIG[:3], True, "1"],
                   [*_BIG[:3], 1.5, "1"], [None, None], [2**63, "a"], [False, 3]):
        _same_as_reference([{"status": v} for v in column])
        _same_as_reference([{"a": {"b": v}} for v in column])


def test_text_forms_of_repeated_and_mixed_messages():
    """Messages repeat: each distinct one is tokenised once and shared, whatever else is in
    the column (numbers, missing values, an object)."""
    messages = ["Timeout reaching db", "timeout reaching DB", None, "Timeout reaching db", ""]
    _same_as_reference([{"message": m} for m in messages * 3])
    _same_as_reference([{"message": m} for m in [*messages, 12, 1.0, True, {"x": 1}]])


def test_epoch_millisecond_event_times_at_the_bounds():
    """Integers are epoch milliseconds in years 0001-9999, converted in Arrow: the bounds,
    one past them, bools (not integers here), past int64, beside ISO times."""
    from l2m.engine.parse import event_times
    from l2m.semantics.values import MAX_TIMESTAMP_MS, MIN_TIMESTAMP_MS, parse_timestamp

    values = [MIN_TIMESTAMP_MS - 1, MIN_TIMESTAMP_MS, MAX_TIMESTAMP_MS, MAX_TIMESTAMP_MS + 1,
              True, False, 0, -1, 1.5, "2026-11-22T10:00:00.060Z", None]
    assert event_times(values) == [parse_timestamp(v) for v in values]
    assert event_times([*values, 2**63]) == [parse_timestamp(v) for v in [*values, 2**63]]
    assert event_times([1_795_341_600_000] * 3) == [1_795_341_600_000] * 3


def test_numbers_among_numeric_strings_as_the_reference_reads_them():
    """A field written as a number in some logs and a string in others (an HTTP status):
    short integer strings are converted in Arrow, the rest as the reference does — signs,
    leading zeros, 15 and 16 digits, exponents, padding, integers past 2^53 among them."""
    column = [404, "404", "-0", "007", "999999999999999", "9999999999999999", "1.5", " 2",
              "1e3", "+5", "", "abc", "nan", "1e999", 2.5, 2**53 + 1, None, -12, "-12"]
    for values in (column, column[:10], [v for v in column if not isinstance(v, int)]):
        _same_as_reference([{"status": v} for v in values])
