"""Rule unit test files (l2m.authoring.testfile): what they say, resolved; every problem
with its file:line:column and exact text."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from l2m.authoring.testfile import (
    CountExpectation,
    SeriesExpectation,
    Where,
    find_test_files,
    load_test_file,
    parse_series,
    relative_ms,
)
from l2m.errors import ConfigError
from l2m.rules.loader import rule_files

RULES = """\
rules:
  - id: errors
    name: errors_total
    kind: counter
    query: "level:error"
    aggregation: count
    group_by: [service]
"""
START = 1795341600000  # 2026-11-22T10:00:00Z


def write(tmp_path: Path, body: str, name: str = "t.test.yaml") -> str:
    (tmp_path / "r.yaml").write_text(RULES)
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return str(path)


def error(tmp_path: Path, body: str) -> str:
    path = write(tmp_path, body)
    with pytest.raises(ConfigError) as caught:
        load_test_file(path)
    return caught.value.message.replace(str(tmp_path) + "/", "")


def case_of(tmp_path: Path, case: str, top: str = "start: 2026-11-22T10:00:00Z\n"):
    body = "rules: r.yaml\n" + top + "tests:\n" + textwrap.indent(textwrap.dedent(case), "  ")
    return load_test_file(write(tmp_path, body)).cases[0]


def test_a_file_with_rules_settings_and_cases(tmp_path):
    loaded = load_test_file(write(tmp_path, """\
        rules: [r.yaml]
        start: 2026-11-22T10:00:00Z
        text_fields: [message, detail]
        timestamp_field: time
        limits: {max_series_per_rule: 2, max_label_value_length: 20}
        tests:
          - name: one
            logs:
              - {time: +90s, level: error, service: cart}
              - 'not json'
            expect:
              - series: 'errors_total{service="cart"}'
                value: 1
                timestamp: +90s
              - {malformed: 1}
        """))
    assert loaded.rules == (str(tmp_path / "r.yaml"),)
    assert loaded.config.text_fields == ("message", "detail")
    assert loaded.config.default_fields == ("message",)  # the job's default
    assert loaded.config.timestamp_field == "time"
    assert loaded.config.limits.max_series_per_rule == 2
    assert loaded.config.limits.max_series_per_metric == 20_000  # not given: the default
    assert loaded.config.limits.max_label_value_length == 20
    case = loaded.cases[0]
    assert case.name == "one"
    assert case.lines == (b'{"time":1795341690000,"level":"error","service":"cart"}',
                          b"not json")
    path = str(tmp_path / "t.test.yaml")
    assert case.expectations == (
        SeriesExpectation(Where(path, 12), "errors_total", (("service", "cart"),),
                          timestamp=START + 90_000, value=1.0),
        CountExpectation(Where(path, 15), "malformed", 1))


def test_config_file_settings_with_the_test_files_keys_on_top(tmp_path):
    (tmp_path / "job.yaml").write_text(textwrap.dedent("""\
        kafka: {bootstrap.servers: "localhost:9092"}
        timestamp_field: ts
        text_fields: [message, body]
        limits: {max_series_per_rule: 5, max_series_per_metric: 50}
        """))
    loaded = load_test_file(write(tmp_path, """\
        rules: r.yaml
        config: job.yaml
        limits: {max_series_per_metric: 7}
        tests:
          - {name: a, logs: [x], expect: [{logs: 1}]}
        """))
    assert loaded.config.timestamp_field == "ts"
    assert loaded.config.text_fields == ("message", "body")
    assert (loaded.config.limits.max_series_per_rule,
            loaded.config.limits.max_series_per_metric) == (5, 7)


@pytest.mark.parametrize(("text", "ms"), [
    ("+90s", 90_000), ("-1h", -3_600_000), ("+1m30s", 90_000), ("+250ms", 250),
    ("+2d", 172_800_000), ("+0s", 0), ("90s", None), ("+90", None), ("+1.5s", None),
    ("+s", None), ("+1m 30s", None), ("+1M", None)])
def test_relative_times(text, ms):
    assert relative_ms(text) == ms


def test_relative_times_in_logs_and_expectations_against_the_cases_start(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          start: 2026-11-22T11:00:00+01:00
          logs:
            - {"@timestamp": -1m, level: error}
            - {"@timestamp": "+2m", level: error}
            - {"@timestamp": 1795341600123, level: error}
            - {"@timestamp": 2026-11-22T10:00:00.5Z, level: error}
          expect:
            - {series: errors_total, value: 4, window: +61s}
        """)
    assert [json.loads(line)["@timestamp"] for line in case.lines] == [
        START - 60_000, START + 120_000, 1795341600123, "2026-11-22T10:00:00.5Z"]
    assert case.expectations[0].window == START + 60_000  # the window's start


def test_a_cases_start_relative_to_the_files(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          start: +1h
          logs: [{"@timestamp": +1s}]
          expect: [{series: m, value: 1, timestamp: -1s}]
        """)
    assert case.lines == (b'{"@timestamp":1795345201000}',)
    assert case.expectations[0].timestamp == START + 3_599_000


def test_a_nested_timestamp_field_is_resolved_where_the_engine_reads_it(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          logs: [{meta: {time: +1s}, level: error}]
          expect: [{logs: 1}]
        """, top="start: 2026-11-22T10:00:00Z\ntimestamp_field: meta.time\n")
    assert case.lines == (b'{"meta":{"time":1795341601000},"level":"error"}',)


def test_log_values_keep_their_json_types_and_unicode(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          logs:
            - {"@timestamp": +0s, n: 1, f: 0.1, b: true, z: null, s: "東京", l: [1, "a"],
               d: 2026-11-22, 1: k, true: k, 0.10: k}
          expect: [{logs: 1}]
        """)
    # keys as written (JSON's keys are strings); an unquoted date stays its text
    assert json.loads(case.lines[0]) == {"@timestamp": START, "n": 1, "f": 0.1, "b": True,
                                         "z": None, "s": "東京", "l": [1, "a"],
                                         "d": "2026-11-22", "1": "k", "true": "k",
                                         "0.10": "k"}


def test_input_files_relative_to_the_test_file(tmp_path):
    (tmp_path / "logs.jsonl").write_bytes(b'{"a": 1}\n\n{"b": 2}\n')
    case = case_of(tmp_path, """\
        - name: c
          input: logs.jsonl
          logs: ['{"c": 3}']
          expect: [{logs: 3}]
        """)
    assert case.lines == (b'{"c": 3}', b'{"a": 1}', b"", b'{"b": 2}')


def test_expectation_values_as_written(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          logs: [x]
          expect:
            - {name: m, labels: {a: 1, b: x}, value: .inf}
            - {series: 'm{a="q\\"uote"}', value: NaN}
            - {series: m, value: -.inf, account: null}
            - {series: h, buckets: {0.5: 1, 10: 2, +Inf: 3}, sum: 0.30000000000000004}
            - {series: m, absent: true, account: acme}
            - {refused: 2, rule: errors, limit: metric}
        """)
    first, second, third, histogram, absent, refused = case.expectations
    assert (first.labels, first.value) == ((("a", "1"), ("b", "x")), "+Inf")
    assert (second.labels, second.value) == ((("a", 'q"uote'),), "NaN")
    assert (third.value, third.account, third.account_given) == ("-Inf", None, True)
    assert histogram.buckets == ((0.5, "0.5", 1.0), (10.0, "10", 2.0),
                                 (float("inf"), "+Inf", 3.0))
    assert (histogram.sum, histogram.count) == (0.30000000000000004, None)
    assert (absent.absent, absent.account) == (True, "acme")
    assert (refused.what, refused.want, refused.rule, refused.limit) == \
        ("refused", 2, "errors", "metric")


def test_series_notation():
    assert parse_series('m{b="2", a="x\\ny\\\\"}') == ("m", (("a", "x\ny\\"), ("b", "2")))
    assert parse_series("m") == ("m", ())
    assert parse_series("ns:m{ }") == ("ns:m", ())
    for bad, problem in [
            ('m{a=1}', "expected label=\"value\" at character 3 of 'm{a=1}'"),
            ('m{a="1', "unterminated label value in 'm{a=\"1'"),
            ('m{a="1" b="2"}', "expected , or } at character 8 of 'm{a=\"1\" b=\"2\"}'"),
            ('m{a="1",a="2"}', "label 'a' appears twice in 'm{a=\"1\",a=\"2\"}'"),
            ('m{a=""}', "label 'a' is empty in 'm{a=\"\"}' (a sample has no empty label: "
                        "leave it out)"),
            ("1m", "'1m' is not a series: name{label=\"value\", …}"),
            ('m{a="1"} x', "unexpected text after the series at character 10 of "
                           "'m{a=\"1\"} x'")]:
        with pytest.raises(ValueError) as caught:
            parse_series(bad)
        assert str(caught.value) == problem


@pytest.mark.parametrize(("body", "message"), [
    ("rules: r.yaml\ntestz: []\n",
     "t.test.yaml:2:1: unknown key 'testz' (did you mean 'tests'?)"),
    ("rules: r.yaml\n", "t.test.yaml:1:1: missing required key 'tests'"),
    ("", "t.test.yaml:1:1: the file is empty (expected rules: and tests:)"),
    ("rules: r.yaml\ntests: []\n", "t.test.yaml:2:8: tests: expected at least one test case"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1}], exhaustiv: true}\n",
     "t.test.yaml:3:47: tests[0]: unknown key 'exhaustiv' (did you mean 'exhaustive'?)"),
    ("rules: r.yaml\ntests:\n  - name: a\n    logs: [x]\n    expect:\n"
     "      - {series: m, valeu: 1}\n",
     "t.test.yaml:6:21: tests[0].expect[0]: unknown key 'valeu' (did you mean 'value'?)"),
    ("rules: r.yaml\ntests:\n"
     "  - {name: a, logs: [x], expect: [{series: m, value: 1, absent: true}]}\n",
     "t.test.yaml:3:35: tests[0].expect[0]: give one of value:, buckets: (and/or count:, sum:), "
     "native: or absent: true"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{series: 'm{a=1}', value: 1}]}\n",
     "t.test.yaml:3:44: tests[0].expect[0].series: expected label=\"value\" at character 3 "
     "of 'm{a=1}'"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{series: m, value: lots}]}\n",
     "t.test.yaml:3:54: tests[0].expect[0].value: expected a number, +Inf, -Inf or NaN, got "
     "string 'lots'"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [{'@timestamp': +90s}], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:37: tests[0].logs[0].@timestamp: a relative time (+90s) needs a start: "
     "give start: at the top of the file or in the case"),
    ("rules: r.yaml\nstart: 0\ntests:\n"
     "  - {name: a, logs: [{'@timestamp': +90}], expect: [{logs: 1}]}\n",
     "t.test.yaml:4:37: tests[0].logs[0].@timestamp: '+90' is not a relative time: a sign, "
     "then numbers with units ms, s, m, h, d (+90s, -1h, +1m30s)"),
    ("rules: r.yaml\nstart: 10:00\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:2:8: start: expected a time: ISO-8601 with Z or an offset "
     "(2026-11-22T10:00:00Z) or epoch milliseconds, got string '10:00'"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x]}\n",
     "t.test.yaml:3:5: tests[0]: expected at least one expectation (expect:), or exhaustive: "
     "true for a case that must give no sample"),
    ("rules: r.yaml\ntests:\n  - {name: a, expect: [{logs: 1}]}\n",
     "t.test.yaml:3:5: tests[0]: give the case's input: logs (a list) and/or input "
     "(JSON-lines files)"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1}]}\n"
     "  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:4: name: 'a' is already the name of the case at line 3"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{matches: 1}]}\n",
     "t.test.yaml:3:35: tests[0].expect[0]: matches: counts per rule: give rule: (its id)"),
    ("rules: r.yaml\ntests:\n"
     "  - {name: a, logs: [x], expect: [{refused: 1, rule: r, limit: cap}]}\n",
     "t.test.yaml:3:64: tests[0].expect[0].limit: expected rule, metric, account, got 'cap'"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1, malformed: 1}]}\n",
     "t.test.yaml:3:35: tests[0].expect[0]: one count per expectation, got logs, malformed"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [{f: 1e400}], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].logs[0]: holds a number beyond a double's range, which JSON "
     "cannot write; give the line as a string"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [1], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].logs[0]: expected a log (a mapping) or a line (a string), got "
     "integer 1"),
    ("rules: r.yaml\ntests:\n  - {name: a, input: nope.jsonl, expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].input: nope.jsonl: no such file or directory"),
    ("rules: r.yaml\nlimits: {max_series_per_rule: -1}\ntests:\n"
     "  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:2: limits.max_series_per_rule: must be at least 0, got -1"),
    ("rules: r.yaml\nlimits: {max_series_per_rul: 1}\ntests:\n"
     "  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:2: limits: unknown key(s): max_series_per_rul (did you mean "
     "'max_series_per_rule'?)"),
    ("rules: r.yaml\ntext_fields: []\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:2: text_fields: expected a list of strings (at least one, none empty), got "
     "an empty list"),
    ("rules: r.yaml\nconfig: job.yaml\ntests:\n  - {name: a, logs: [x], expect: [{logs: 1}]}\n",
     "t.test.yaml:2:9: config: job.yaml: cannot read: No such file or directory"),
    ("rules: r.yaml\ntests: [\n", "t.test.yaml:3:1: invalid YAML: expected the node content, "
     "but found '<stream end>'"),
    ("rules: r.yaml\nrules: r.yaml\ntests: []\n",
     "t.test.yaml:2:1: rules: appears twice (first at line 1)"),
    ("a: &x [1]\nb: {<<: *x}\n",
     "t.test.yaml:2:5: an explicit tag or merge key l2m does not read (only plain YAML values)"),
    ("rules: !!python/object:os.system x\n",
     "t.test.yaml:1:8: an explicit tag or merge key l2m does not read (only plain YAML values)"),
])
def test_problems_are_positioned(tmp_path, body, message):
    assert error(tmp_path, body) == message


def test_the_config_files_own_problems_are_named(tmp_path):
    (tmp_path / "job.yaml").write_text("limitz: {}\n")
    message = error(tmp_path, "rules: r.yaml\nconfig: job.yaml\ntests: [{name: a, logs: [x], "
                              "expect: [{logs: 1}]}]\n")
    assert message.startswith("t.test.yaml:2:9: config: ")
    assert "job.yaml:1: unknown key(s): limitz (did you mean 'limits'?)" in message


def test_directories_are_searched_for_test_files_and_rule_scans_leave_them_out(tmp_path):
    (tmp_path / "a" / "b").mkdir(parents=True)
    for name in ("a/x.test.yaml", "a/b/y.test.yml", "a/r.yaml", "a/b/s.yml", "a/notes.txt"):
        (tmp_path / name).write_text("")
    assert find_test_files([str(tmp_path)]) == [str(tmp_path / "a/b/y.test.yml"),
                                                str(tmp_path / "a/x.test.yaml")]
    files, problems = rule_files([tmp_path])
    assert (files, problems) == ([tmp_path / "a/b/s.yml", tmp_path / "a/r.yaml"], [])
    (tmp_path / "empty").mkdir()
    for paths, message in [([tmp_path / "empty"], f"{tmp_path}/empty: no *.test.yaml or "
                            "*.test.yml files under this directory"),
                           ([tmp_path / "c"], f"{tmp_path}/c: no such file or directory")]:
        with pytest.raises(ConfigError) as caught:
            find_test_files([str(p) for p in paths])
        assert caught.value.message == message
    # a file named is taken whatever its name
    assert find_test_files([str(tmp_path / "a/r.yaml")]) == [str(tmp_path / "a/r.yaml")]


def test_log_scalars_mean_the_json_a_reader_sees_not_yaml_1_1(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          logs:
            - {"@timestamp": +0s, hex: 0x1F4, octal: 010, under: 1_000, sexa: 10:00, on: on,
               off: off, yes: yes, no: no, True: True, int: -12, float: 1.5e3, plus: +5,
               frac: 0.10, null: null, tilde: ~, empty: , quoted: "500", single: 'true',
               dot: .5, inf: .inf, nan: .NaN, date: 2026-11-22, nested: {a: [010, 1, on]}}
          expect: [{logs: 1}]
        """)
    assert json.loads(case.lines[0]) == {
        "@timestamp": START, "hex": "0x1F4", "octal": "010", "under": "1_000", "sexa": "10:00",
        "on": "on", "off": "off", "yes": "yes", "no": "no", "True": "True", "int": -12,
        "float": 1500.0, "plus": 5, "frac": 0.1, "null": None, "tilde": None, "empty": None,
        "quoted": "500", "single": "true", "dot": ".5", "inf": ".inf", "nan": ".NaN",
        "date": "2026-11-22", "nested": {"a": ["010", 1, "on"]}}


def test_a_sexagesimal_event_time_stays_text_the_engine_cannot_use(tmp_path, capsys):
    from l2m.cli import main

    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: r.yaml
        tests:
          - name: c
            logs: [{"@timestamp": 10:00, level: error, service: 010}]
            expect: [{no_timestamp: 1}, {series: 'errors_total{service="010"}', absent: true}]
        """))
    assert main(["test", str(tmp_path)]) == 0, capsys.readouterr().out


def test_expected_label_values_are_read_as_logs_are(tmp_path):
    case = case_of(tmp_path, """\
        - name: c
          logs: [x]
          expect: [{name: errors_total, labels: {service: 010, code: 0x1F, n: 500}, value: 1}]
        """)
    (exp,) = case.expectations
    assert isinstance(exp, SeriesExpectation)
    assert exp.labels == (("code", "0x1F"), ("n", "500"), ("service", "010"))


@pytest.mark.parametrize(("body", "message"), [
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [\"x\\ny\"], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].logs[0]: one line per log: split it into several strings"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [\"x\\ry\"], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].logs[0]: one line per log: split it into several strings"),
    ("rules: r.yaml\ntests:\n  - {name: a, logs: [null], expect: [{logs: 1}]}\n",
     "t.test.yaml:3:22: tests[0].logs[0]: expected a log (a mapping) or a line (a string), "
     "got null"),
    ("rules: r.yaml\nstart: 0\ntests:\n  - {name: a, logs: [{'@timestamp': "
     "+99999999999999999999999d}], expect: [{logs: 1}]}\n",
     "t.test.yaml:4:37: tests[0].logs[0].@timestamp: '+99999999999999999999999d' from the "
     "start is outside years 1-9999"),
    ("rules: r.yaml\nstart: 0\ntests:\n  - {name: a, start: -62135596800001ms, logs: [x], "
     "expect: [{logs: 1}]}\n",
     "t.test.yaml:4:22: tests[0].start: '-62135596800001ms' from the start is outside years "
     "1-9999"),
])
def test_lines_null_and_relative_times_out_of_range_are_refused(tmp_path, body, message):
    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "t.test.yaml").write_text(body)
    with pytest.raises(ConfigError) as caught:
        load_test_file(str(tmp_path / "t.test.yaml"))
    assert caught.value.message.replace(str(tmp_path) + "/", "") == message


def test_a_file_named_twice_is_found_once(tmp_path, monkeypatch):
    path = write(tmp_path, "rules: r.yaml\ntests: []\n")
    monkeypatch.chdir(tmp_path)
    assert find_test_files(["t.test.yaml", "./t.test.yaml", ".", path]) == ["t.test.yaml"]
