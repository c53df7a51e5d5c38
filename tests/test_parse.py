"""Parse stage without Spark: statuses, the generated extractor against the reference
semantics of l2m.values (property test), fallback timestamps."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.parse import BLANK, KAFKA_TIME, MALFORMED, NO_TIMESTAMP, OK, ParsePlan, parse_lines
from l2m.query import FieldUse
from l2m.values import lookup, number, padded_tokens, string_form

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
def test_generated_extractor_matches_reference_semantics(batch_docs):
    lines = [json.dumps(d).encode() for d in batch_docs]
    out = parse_lines(lines, PLAN).to_pydict()
    for row, doc in enumerate(batch_docs):
        for use in PLAN.fields:
            value = lookup(doc, use.path)
            if use.string:
                assert out[PLAN.column(use.path, "s")][row] == string_form(value)
            if use.number:
                assert out[PLAN.column(use.path, "n")][row] == number(value)
            if use.exists:
                assert out[PLAN.column(use.path, "x")][row] == (value is not None)
            if use.text:
                text = string_form(value)
                expected = None if text is None else padded_tokens(text)
                assert out[PLAN.column(use.path, "t")][row] == expected
