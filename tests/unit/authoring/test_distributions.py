"""``l2m test``, ``validate --estimate`` and ``l2m test -v`` on native histograms and quantile
gauges (issue 56): the ``native:`` expectation passing and failing with its exact failure
lines, value ranges exact on bucket bounds and bounded where a bucket straddles them, quantile
values within the schema's relative error bound, samples without ``value`` in every path.

The expected numbers are worked out from the definitions (docs/rules.md "Distributions",
l2m.semantics.exphist): at schema 3 a bucket's bounds are 2^((i-1)/8) and 2^(i/8), so 3 lies
in bucket 13, (2^(12/8), 2^(13/8)] = (2.83, 3.08], and 7 in bucket 23, (6.73, 7.34]; at schema
0 the bounds are powers of two: 3 in bucket 2 (2, 4], 7 in 3 (4, 8], 1000 in 10 (512, 1024]."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from l2m.authoring.explain import explain_log, render_text
from l2m.authoring.ruletest import _Checker, range_count, run_test_files
from l2m.authoring.testfile import (
    SeriesExpectation,
    TestCase,
    ValueRange,
    Where,
    value_range,
)
from l2m.batch.local import RunSettings, run_local
from l2m.batch.summary import BackfillSummary
from l2m.cli import main
from l2m.config.job import JobConfig
from tests.unit.authoring.test_explain import rules_of

RULES = """\
rules:
  - id: lat
    name: lat_ms
    kind: counter
    query: "_exists_:ms"
    aggregation: histogram
    field: ms
    native: true
    group_by: [service]
  - id: both
    name: both_ms
    kind: counter
    query: "_exists_:ms"
    aggregation: histogram
    field: ms
    buckets: [5, 10]
    native: {schema: 0}
  - id: q
    name: q_ms
    kind: gauge
    query: "_exists_:ms"
    aggregation: quantiles
    field: ms
    quantiles: [0.5, 0.9]
    group_by: [service]
  - id: gn
    name: gn_ms
    kind: gauge
    query: "_exists_:ms"
    aggregation: histogram
    field: ms
    native: {schema: 1, max_buckets: 2}
"""

LOGS = """\
    logs:
      - {"@timestamp": +0s, service: a, ms: 3}
      - {"@timestamp": +1s, service: a, ms: 7}
      - {"@timestamp": +2s, service: a, ms: 0}
      - {"@timestamp": +3s, service: a, ms: -3}
      - {"@timestamp": +4s, service: a, ms: x}
      - {"@timestamp": +70s, service: b, ms: 1000}
"""
FIRST = 13  # the line of the first expectation


def run(tmp_path: Path, expect: str, *args: str, exhaustive: bool = False) -> tuple[int, str]:
    """Exit code and output of ``l2m test`` on one case of ``LOGS`` with ``expect``."""
    (tmp_path / "r.yaml").write_text(RULES)
    body = "rules: r.yaml\nstart: 2026-11-22T10:00:00Z\ntests:\n  - name: c\n" + \
        ("    exhaustive: true\n" if exhaustive else "") + LOGS + "    expect:\n" + \
        textwrap.indent(textwrap.dedent(expect), "      ")
    path = tmp_path / "t.test.yaml"
    path.write_text(body)
    out = io.StringIO()
    code = run_test_files([str(path)], junit=None, only=None, verbose="-v" in args, out=out)
    text = out.getvalue().replace(str(tmp_path) + "/", "")
    return code, re.sub(r" in [0-9.]+ s$", " in X s", text.rstrip("\n"), flags=re.M)


@pytest.mark.parametrize("expect", [
    # 3, 7, 0, -3 (the log with ms "x" matches without a value: in no count)
    "- {series: 'lat_ms{service=\"a\"}', native: {count: 4, sum: 7, zero_count: 1, schema: 3,"
    " positive: {13: 1, 23: 1}, negative: {13: 1}}}",
    "- {series: 'lat_ms{service=\"a\"}', native: {buckets: {8: 4, '<= 2': 2, '(2, 4]': 1,"
    " '> 4': 1, '(-4, -2]': 1, '> 8': 0, +Inf: 4}}}",
    # the zero bucket [-2^-128, 2^-128] straddles 0: 0 is in it, so 1 or 2 are right
    "- {series: 'lat_ms{service=\"a\"}', native: {buckets: {'<= 0': 2}}}",
    "- {series: 'lat_ms{service=\"a\"}', native: {buckets: {'<= 0': 1}}}",
    "- {series: 'lat_ms{service=\"b\"}', native: {count: 1, sum: 1000, zero_count: 0}}",
    "- {name: lat_ms, labels: {service: b}, native: {negative: {}}, timestamp: +70s}",
    # classic and native side by side under one name
    "- {series: both_ms, buckets: {5: 3, 10: 4, +Inf: 5}, count: 5, sum: 1007}",
    "- {series: both_ms, native: {count: 5, sum: 1007, schema: 0, positive: {2: 1, 3: 1, 10: 1},"
    " negative: {2: 1}, buckets: {4: 3, 5: 3, 8: 4, '(512, 1024]': 1}}}",
    # quantiles: the exact nearest-rank quantile, within 1.08% (schema 5) of the estimate
    "- {series: 'q_ms{service=\"a\", quantile=\"0.5\"}', value: 0}",
    "- {series: 'q_ms{service=\"a\", quantile=\"0.9\"}', value: 7}",
    "- {series: 'q_ms{service=\"a\", quantile=\"0.9\"}', value: 6.948927789100865}",
    "- {series: 'q_ms{service=\"b\", quantile=\"0.5\"}', value: 1000, window: +60s}",
    # a gauge histogram per window, lowered to schema -2 to keep at most 2 buckets
    "- {series: gn_ms, window: +0s, native: {schema: -2, positive: {1: 2}, negative: {1: 1},"
    " zero_count: 1, buckets: {16: 4, '<= 1': 2}}}",
    "- {series: gn_ms, window: +0s, native: {buckets: {'<= 8': 3}}}",
])
def test_native_and_quantile_expectations_that_hold(tmp_path, expect):
    assert run(tmp_path, expect) == (0, "1 passed, 0 failed in X s")


@pytest.mark.parametrize(("expect", "failure"), [
    ("- {series: 'lat_ms{service=\"a\"}', native: {count: 5, sum: 7.5, zero_count: 0, "
     "schema: 2}}",
     "lat_ms{service=\"a\"} native schema: want 2, got 3\n"
     "t.test.yaml:13: 'c': lat_ms{service=\"a\"} native count: want 5, got 4\n"
     "t.test.yaml:13: 'c': lat_ms{service=\"a\"} native sum: want 7.5, got 7\n"
     "t.test.yaml:13: 'c': lat_ms{service=\"a\"} native zero_count: want 0, got 1"),
    ("- {series: 'lat_ms{service=\"a\"}', native: {positive: {13: 1}, negative: {12: 1}}}",
     "lat_ms{service=\"a\"} native positive: want {13: 1}, got {13: 1, 23: 1}\n"
     "t.test.yaml:13: 'c': lat_ms{service=\"a\"} native negative: want {12: 1}, got {13: 1}"),
    ("- {series: 'lat_ms{service=\"a\"}', native: {buckets: {'<= 3': 4, 8: 3}}}",
     "lat_ms{service=\"a\"} native buckets[<= 3]: want 4, got 2 to 3 ((2.82842712474619, "
     "3.0844216508158815] holds 1; a bucket bound as the range's end is exact)\n"
     "t.test.yaml:13: 'c': lat_ms{service=\"a\"} native buckets[8]: want 3, got 4"),
    ("- {series: 'lat_ms{service=\"a\"}', native: {buckets: {'<= 0': 3}}}",
     "lat_ms{service=\"a\"} native buckets[<= 0]: want 3, got 1 to 2 (the zero bucket "
     "[-2.938735877055719e-39, 2.938735877055719e-39] holds 1; a bucket bound as the range's "
     "end is exact)"),
    ("- {series: 'lat_ms{service=\"c\"}', native: {count: 1}}",
     "lat_ms{service=\"c\"}: want a native histogram, got no such series; nearest "
     "lat_ms{service=\"a\"} (service=\"a\", not \"c\")"),
    ("- {series: 'lat_ms{service=\"b\"}', native: {count: 1}, timestamp: +1s}",
     "lat_ms{service=\"b\"} timestamp: want 2026-11-22T10:00:01Z, got 2026-11-22T10:01:10Z"),
    ("- {series: 'lat_ms{service=\"a\"}', value: 4}",
     "lat_ms{service=\"a\"}: want 4, got a native histogram (count 4, sum 7): give native: "
     "(count:, sum:, buckets:, …)"),
    ("- {series: 'lat_ms{service=\"a\"}', count: 4}",
     "lat_ms{service=\"a\"}: want a histogram, got a native histogram only: give native: "
     "(count:, sum:, buckets:, …)"),
    ("- {series: 'q_ms{service=\"a\", quantile=\"0.5\"}', native: {count: 4}}",
     "q_ms{quantile=\"0.5\",service=\"a\"}: want a native histogram, got a float sample 0"),
    ("- {series: size_ms, native: {count: 4}}",
     "size_ms: want a native histogram, got no series of that name"),
    ("- {series: gn_ms, native: {count: 4}}",
     "gn_ms: want a native histogram, got 2 samples (windows 2026-11-22T10:00:00Z, "
     "2026-11-22T10:01:00Z): give window:"),
    ("- {series: 'q_ms{service=\"a\", quantile=\"0.9\"}', value: 7.1}",
     "q_ms{quantile=\"0.9\",service=\"a\"}: want 7.1 (within ±1.08%: the estimate of a schema "
     "5 histogram), got 6.948927789100865"),
    ("- {series: 'q_ms{service=\"b\", quantile=\"0.5\"}', value: 1010}",
     "q_ms{quantile=\"0.5\",service=\"b\"}: want 1010 (within ±1.08%: the estimate of a "
     "schema 5 histogram), got 991.2055044390644"),
    ("- {series: 'lat_ms{service=\"a\"}', absent: true}",
     "lat_ms{service=\"a\"}: want absent, got 1 sample(s): lat_ms{service=\"a\"} = a native "
     "histogram (count 4, sum 7)"),
])
def test_native_and_quantile_failures_say_what_and_got(tmp_path, expect, failure):
    assert run(tmp_path, expect) == (
        1, f"t.test.yaml:{FIRST}: 'c': {failure}\n0 passed, 1 failed in X s")


def test_exhaustive_covers_native_samples_and_names_the_others(tmp_path):
    code, out = run(tmp_path, """\
        - {series: 'lat_ms{service="a"}', native: {count: 4}}
        - {series: 'lat_ms{service="b"}', native: {count: 1}}
        - {series: both_ms, count: 5}
        - {series: both_ms, native: {count: 5}}
        - {series: 'q_ms{service="a", quantile="0.5"}', value: 0}
        - {series: 'q_ms{service="a", quantile="0.9"}', value: 7}
        - {series: 'q_ms{service="b", quantile="0.5"}', value: 1000}
        - {series: 'q_ms{service="b", quantile="0.9"}', value: 1000}
        - {series: gn_ms, window: +0s, native: {count: 4}}
        """, exhaustive=True)
    assert (code, out) == (1, "t.test.yaml:4: 'c': gn_ms @ 2026-11-22T10:01:00Z: not expected "
                              "(exhaustive), got a native histogram (count 1, sum 1000)\n"
                              "0 passed, 1 failed in X s")


@pytest.mark.parametrize(("expect", "problem"), [
    ("{series: m, native: {cont: 1}}",
     "13:30: tests[0].expect[0].native: unknown key 'cont' (did you mean 'count'?)"),
    ("{series: m, native: {}}",
     "13:29: tests[0].expect[0].native: expected at least one of count, sum, zero_count, "
     "schema, buckets, positive, negative"),
    ("{series: m, native: {schema: 9}}",
     "13:38: tests[0].expect[0].native.schema: expected a whole number from -4 to 8, got "
     "integer 9"),
    ("{series: m, native: {buckets: {'< 3': 1}}}",
     "13:40: tests[0].expect[0].native.buckets: '< 3' is not a value range: 10 or '<= 10', "
     "'> 10', '(5, 10]'"),
    ("{series: m, native: {buckets: {'(3, 2]': 1}}}",
     "13:40: tests[0].expect[0].native.buckets: '(3, 2]' is not a value range: 10 or '<= 10', "
     "'> 10', '(5, 10]'"),
    ("{series: m, native: {positive: {a: 1}}}",
     "13:41: tests[0].expect[0].native.positive: 'a' is not a bucket index (a whole number)"),
    ("{series: m, native: {positive: {3: 0}}}",
     "13:44: tests[0].expect[0].native.positive.3: list populated buckets only (count 1 or "
     "more)"),
    # counts are whole numbers of observations: no fraction, no infinity, none below 0
    ("{series: m, native: {count: 1.5}}",
     "13:37: tests[0].expect[0].native.count: expected a whole number (0 or more), got "
     "number 1.5"),
    ("{series: m, native: {count: +Inf}}",
     "13:37: tests[0].expect[0].native.count: expected a whole number (0 or more), got "
     "string '+Inf'"),
    ("{series: m, native: {count: .inf}}",
     "13:37: tests[0].expect[0].native.count: expected a whole number (0 or more), got "
     "number inf"),
    ("{series: m, native: {count: -1}}",
     "13:37: tests[0].expect[0].native.count: expected a whole number (0 or more), got "
     "integer -1"),
    ("{series: m, native: {count: 4, zero_count: 0.5}}",
     "13:52: tests[0].expect[0].native.zero_count: expected a whole number (0 or more), got "
     "number 0.5"),
    ("{series: m, native: {zero_count: NaN}}",
     "13:42: tests[0].expect[0].native.zero_count: expected a whole number (0 or more), got "
     "string 'NaN'"),
    ("{series: m, native: {count: 1}, value: 1}",
     "13:9: tests[0].expect[0]: give one of value:, buckets: (and/or count:, sum:), native: or "
     "absent: true"),
])
def test_native_expectations_are_checked_when_the_file_loads(tmp_path, expect, problem):
    code, out = run(tmp_path, "- " + expect)
    assert (code, out) == (1, f"error [CONFIG]: t.test.yaml:{problem}\n"
                              "0 passed, 0 failed, 1 error(s) in X s")


def test_value_ranges_as_written():
    assert value_range("10") == ValueRange("10", None, 10.0)
    assert value_range("<= 2.5") == ValueRange("<= 2.5", None, 2.5)
    assert value_range(">-1") == ValueRange(">-1", -1.0, None)
    assert value_range("(-Inf, 0]") == ValueRange("(-Inf, 0]", float("-inf"), 0.0)
    assert value_range("+Inf") == ValueRange("+Inf", None, float("inf"))
    assert [value_range(t) for t in ("< 3", "(2, 2]", "[1, 2]", "x", "<= x", "")] == [None] * 6


def test_range_counts_are_exact_on_bounds_and_bounded_inside_a_bucket():
    # schema 0: bucket 2 is (2, 4], 3 is (4, 8]; negative bucket 1 is [-2, -1)
    histogram = {"schema": 0, "zero_threshold": 0.0, "zero_count": 0,
                 "positive": [[2, 5], [3, 1]], "negative": [[1, 2]]}
    assert range_count(histogram, ValueRange("4", None, 4.0)) == (7, 7, "")
    assert range_count(histogram, ValueRange("> 4", 4.0, None)) == (1, 1, "")
    assert range_count(histogram, ValueRange("(2, 8]", 2.0, 8.0)) == (6, 6, "")
    assert range_count(histogram, ValueRange("(-2, 8]", -2.0, 8.0)) == (6, 8, "[-2, -1) holds 2")
    assert range_count(histogram, ValueRange("3", None, 3.0)) == (2, 7, "(2, 4] holds 5")
    assert range_count(histogram, ValueRange("(3, 3.5]", 3.0, 3.5)) == (0, 5, "(2, 4] holds 5")


def test_a_native_sample_named_like_a_family_part_is_not_read_as_one():
    """Samples of another account's rule may be named like a classic family's ``_count``:
    the histogram expectation skips them instead of reading a ``value`` they lack."""
    at = Where("t.test.yaml", 3)
    samples = [
        {"name": "h_count", "kind": "counter", "labels": {}, "timestamp": 1, "account": None,
         "rule": "x", "histogram": {"schema": 0, "zero_threshold": 0.0, "zero_count": 0,
                                    "count": 2, "sum": 3.0, "positive": [[1, 2]],
                                    "negative": []}, "format": 2},
        {"name": "h_count", "kind": "counter", "labels": {}, "value": 5.0, "timestamp": 1,
         "account": None, "rule": "y"},
    ]
    case = TestCase("c", at, (), ())
    checker = _Checker(case, samples, {"h_count": [0, 1]}, BackfillSummary(), {})
    checker.histogram(SeriesExpectation(at, "h", count=5.0))
    assert checker.failures == []
    checker.histogram(SeriesExpectation(at, "h", count=2.0))
    assert checker.failures == ["t.test.yaml:3: 'c': h_count: want 2, got 5"]


def test_verbose_shows_the_native_buckets_of_each_distribution_rule(tmp_path):
    code, out = run(tmp_path, "- {series: both_ms, count: 5}", "-v")
    assert code == 0
    lines = out.splitlines()
    at = lines.index("  per rule, the logs of all its cases in one run:")
    assert [line.split()[:4] for line in lines[at + 2:at + 6]] == [
        ["lat", "6", "2", "2"], ["both", "6", "6", "1"], ["q", "6", "4", "2"],
        ["gn", "6", "2", "1"]]
    assert lines[at + 6:at + 12] == [
        "    distributions (exact; populated native buckets are the rows the state keeps per "
        "series, per series and window for gauges):",
        "      rule  aggregation  TSDB series per label set  populated buckets (most)  (mean)  "
        "max_buckets  schema",
        "      lat   histogram                            1                         4     2.5  "
        "        160  3",
        "      both  histogram                            6                         5     5.0  "
        "        160  0",
        "      q     quantiles                            2                         4     2.5  "
        "        320  5",
        "      gn    histogram                            1                         3     2.0  "
        "          2  1 → -2",
    ]


def test_estimate_counts_native_buckets_and_series_per_label_set(tmp_path, capsys):
    (tmp_path / "r.yaml").write_text(RULES)
    sample = tmp_path / "s.jsonl"
    # 0.5 s apart: 3 (bucket 13 at schema 3), 7 (23), 0 (zero bucket), -3 (negative 13), …
    values = [3, 7, 0, -3] * 50
    sample.write_text("".join(
        f'{{"@timestamp": {1795341600000 + 500 * i}, "service": "a", "ms": {v}}}\n'
        for i, v in enumerate(values)))
    assert main(["validate", str(tmp_path / "r.yaml"), "--estimate", str(sample)]) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("distributions (exact; populated native buckets are the rows the state keeps "
                   "per series, per series and window for gauges):")
    assert out[at + 1:] == [
        "  rule  aggregation  TSDB series per label set  populated buckets (most)  (mean)  "
        "max_buckets  schema",
        "  lat   histogram                            1                         4     4.0  "
        "        160  3",
        "  both  histogram                            6                         4     4.0  "
        "        160  0",
        "  q     quantiles                            2                         4     4.0  "
        "        320  5",
        "  gn    histogram                            1                         3     3.0  "
        "          2  1 → -2",
    ]


# --- l2m explain ----------------------------------------------------------------------------

EXPLAIN_RULES = rules_of(
    "id: lat, name: lat_ms, kind: counter, query: '*', aggregation: histogram, field: ms, "
    "native: true",
    "id: both, name: both_ms, kind: counter, query: '*', aggregation: histogram, field: ms, "
    "buckets: [5, 10], native: {schema: 0}",
    "id: q, name: q_ms, kind: gauge, query: '*', aggregation: quantiles, field: ms, "
    "quantiles: [0.5, 0.99]",
    "id: gn, name: gn_ms, kind: gauge, query: '*', aggregation: histogram, field: ms, "
    "native: {schema: -1, max_buckets: 2}",
)


def explained(rule_id: str, value: object) -> dict[str, Any]:
    line = json.dumps({"@timestamp": "2026-11-22T10:00:07Z", "ms": value})
    (said,) = explain_log([r for r in EXPLAIN_RULES if r.id == rule_id], line,
                          JobConfig())["rules"]
    return dict(said)


def explained_lines(rule_id: str, value: object) -> list[str]:
    line = json.dumps({"@timestamp": "2026-11-22T10:00:07Z", "ms": value})
    text = render_text(explain_log([r for r in EXPLAIN_RULES if r.id == rule_id], line,
                                   JobConfig()))
    return [x for x in text.splitlines() if x.startswith(("  value:", "  native", "  quantiles",
                                                          "  time:"))]


def test_explain_names_the_native_bucket_of_the_value():
    # 3 at schema 3: frexp(3) = 0.75·2^2, 0.75 between the table's 2^(-3/8) and 2^(-2/8):
    # bucket 5 + 8·(2 - 1) = 13, (2^(12/8), 2^(13/8)]
    assert explained_lines("lat", 3) == [
        '  value: histogram of ms: ms = 3 (top-level key "ms") → 3',
        "  native bucket: schema 3: positive bucket 13 (2.82842712474619, 3.0844216508158815]; "
        "in a coarser schema's bucket that holds it once the series has more than 160 "
        "populated buckets",
        "  time: counter: the sample's timestamp is the newest event time counted into the "
        "series, at least 1795341607000 (2026-11-22T10:00:07Z)"]
    # classic and native: both buckets; a power of two is the upper bound of its bucket
    assert explained_lines("both", -4)[:2] == [
        '  value: histogram of ms: ms = -4 (top-level key "ms") → -4, counted in the buckets '
        "le=5, 10, +Inf",
        "  native bucket: schema 0: negative bucket 2 [-4, -2); in a coarser schema's bucket "
        "that holds it once the series has more than 160 populated buckets"]
    assert explained_lines("gn", 0)[1] == (
        "  native bucket: schema -1: the zero bucket [-2.938735877055719e-39, "
        "2.938735877055719e-39] (|value| at most the zero threshold), at every schema")
    # lowered or not, the zero bucket stays: -0.0 and 1e-40 too
    assert explained_lines("lat", -0.0)[1] == explained_lines("lat", 1e-40)[1] == (
        "  native bucket: schema 3: the zero bucket [-2.938735877055719e-39, "
        "2.938735877055719e-39] (|value| at most the zero threshold), at every schema")


def test_explain_says_a_quantile_sample_is_the_window_s_estimate():
    # 1000 = 2^9.966: at schema 5 bucket ceil(9.966·32) = 319, (2^(318/32), 2^(319/32)]
    assert explained_lines("q", 1000) == [
        '  value: quantiles of ms: ms = 1000 (top-level key "ms") → 1000',
        "  native bucket: schema 5: positive bucket 319 (980.5857594353392, 1002.0577915778047]; "
        "in a coarser schema's bucket that holds it once its window has more than 320 "
        "populated buckets",
        "  quantiles: the log is one observation of its window's native histogram (schema 5); "
        "each sample (quantile=0.5, 0.99) is the window's estimate of that quantile from it, "
        "within 1.08% of the exact one — not this value",
        "  time: window [2026-11-22T10:00:00Z, 2026-11-22T10:01:00Z); the sample's timestamp "
        "is the window start 1795341600000"]
    result = explained("q", 1000)["result"]
    assert result["metrics"] == ["q_ms"]
    assert result["value"]["native"] == {
        "schema": 5, "key": "p5/319", "index": 319, "side": "positive",
        "lower": 980.5857594353392, "upper": 1002.0577915778047,
        "text": result["value"]["native"]["text"]}
    assert result["value"]["quantiles"] == {
        "quantiles": ["0.5", "0.99"], "schema": 5, "relative_error": 0.010830001253373618,
        "text": result["value"]["quantiles"]["text"]}


@pytest.mark.parametrize("value", [3, -3, 0, 1e-300, 1.7976931348623157e308, -0.5, 0.5, 1,
                                   1000, 2 ** 0.5, 123456.789])
@pytest.mark.parametrize("rule_id", ["lat", "both", "q", "gn"])
def test_the_native_bucket_stated_is_the_one_run_local_counts_the_value_in(rule_id, value):
    said = explained(rule_id, value)["result"]
    rule = next(r for r in EXPLAIN_RULES if r.id == rule_id)
    line = json.dumps({"@timestamp": "2026-11-22T10:00:07Z", "ms": value})
    check_rule = rule if rule.aggregation != "quantiles" else dataclasses.replace(
        rule, aggregation="histogram", quantiles=(), quantile_labels=())
    samples = [json.loads(s) for s in run_local(RunSettings().routing([check_rule]),
                                                [line]).lines]
    (native,) = [s["histogram"] for s in samples if "histogram" in s]
    bucket = said["value"]["native"]
    assert native["schema"] == bucket["schema"]
    where = {"positive": native["positive"], "negative": native["negative"],
             "zero": [[None, native["zero_count"]]] if native["zero_count"] else []}
    assert where[bucket["side"]] == [[bucket["index"], 1]]
    assert set(said["metrics"]) == {s["name"] for s in samples} | (
        {"q_ms"} if rule_id == "q" else set())


def test_tenant_rules_quantiles_are_judged_by_their_own_schema(tmp_path, capsys):
    """In tenant mode a sample's rule is ``account/id``: its schema (here 0, a bound of
    33.33%) is still the one the quantile is judged by."""
    (tmp_path / "rules" / "acme").mkdir(parents=True)
    (tmp_path / "rules" / "acme" / "r.yaml").write_text(textwrap.dedent("""\
        rules:
          - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: quantiles, field: ms,
             quantiles: [0.5], native: {schema: 0}}
        """))
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: rules
        tenancy: {mode: accounts}
        start: 0
        tests:
          - name: within a third
            logs:
              - {"@timestamp": +1s, account: acme, ms: 3}
            expect:
              # 3 is in (2, 4]: estimated as 2·2·4/(2+4) = 2.67, 11% off
              - {series: 'q_ms{quantile="0.5"}', value: 3}
          - name: beyond a third
            logs:
              - {"@timestamp": +1s, account: acme, ms: 3}
            expect:
              - {series: 'q_ms{quantile="0.5"}', value: 4.1}
        """))
    junit = tmp_path / "junit.xml"
    assert main(["test", str(tmp_path / "t.test.yaml"), "--junit", str(junit)]) == 1
    out = capsys.readouterr().out.replace(str(tmp_path) + "/", "")
    assert out.splitlines()[0] == (
        "t.test.yaml:15: 'beyond a third': q_ms{quantile=\"0.5\"}: want 4.1 (within ±33.33%: "
        "the estimate of a schema 0 histogram), got "
        "2.6666666666666665")
    xml = junit.read_text()
    assert 'tests="2" failures="1" errors="0"' in xml
    assert "want 4.1 (within ±33.33%: the estimate of a schema 0 histogram)" in xml


def test_a_quantile_is_judged_by_the_schema_its_window_was_kept_at(tmp_path):
    """Past ``max_buckets`` the window's histogram is lowered, and its estimate judged by the
    bound of the schema kept, which the failure names. 3, 3.5, 7 and 100 populate 4 buckets
    at schema 5; at schema 1 (bounds 2^(k/2)) 3 and 3.5 share (2.83, 4]: 3 buckets, kept.
    The median 3.5 is estimated 2·2.83·4/(2.83+4) = 3.31, 5.3% off: beyond schema 5's 1.08%,
    within schema 1's 17.16%. The next window (one value) keeps schema 5."""
    (tmp_path / "r.yaml").write_text(textwrap.dedent("""\
        rules:
          - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: quantiles, field: ms,
             quantiles: [0.5], native: {schema: 5, max_buckets: 3}, group_by: [service]}
        """))
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: r.yaml
        start: 2026-11-22T10:00:00Z
        tests:
          - name: lowered
            logs:
              - {"@timestamp": +1s, service: a, ms: 3}
              - {"@timestamp": +2s, service: a, ms: 3.5}
              - {"@timestamp": +3s, service: a, ms: 7}
              - {"@timestamp": +4s, service: a, ms: 100}
              - {"@timestamp": +61s, service: a, ms: 3.5}
            expect:
              - {series: 'q_ms{service="a", quantile="0.5"}', window: +0s, value: 3.5}
              - {series: 'q_ms{service="a", quantile="0.5"}', window: +0s, value: 4.5}
              - {series: 'q_ms{service="a", quantile="0.5"}', window: +1m, value: 3.5}
              - {series: 'q_ms{service="a", quantile="0.5"}', window: +1m, value: 3.6}
        """))
    out = io.StringIO()
    assert run_test_files([str(tmp_path / "t.test.yaml")], junit=None, only=None,
                          verbose=False, out=out) == 1
    assert out.getvalue().replace(str(tmp_path) + "/", "").splitlines()[:2] == [
        "t.test.yaml:13: 'lowered': q_ms{quantile=\"0.5\",service=\"a\"} @ "
        "2026-11-22T10:00:00Z: want 4.5 (within ±17.16%: the estimate of a schema 1 histogram, "
        "the rule's schema 5 lowered past max_buckets 3), got 3.3137084989847603",
        "t.test.yaml:15: 'lowered': q_ms{quantile=\"0.5\",service=\"a\"} @ "
        "2026-11-22T10:01:00Z: want 3.6 (within ±1.08%: the estimate of a schema 5 "
        "histogram), got 3.4744638945504325"]


def test_junit_carries_native_failures(tmp_path):
    run(tmp_path, "- {series: 'lat_ms{service=\"a\"}', native: {count: 5}}")
    junit = tmp_path / "j.xml"
    assert run_test_files([str(tmp_path / "t.test.yaml")], junit=str(junit), only=None,
                          verbose=False, out=io.StringIO()) == 1
    assert "lat_ms{service=&quot;a&quot;} native count: want 5, got 4" in junit.read_text()
