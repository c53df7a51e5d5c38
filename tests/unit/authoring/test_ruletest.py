"""``l2m test`` (l2m.authoring.ruletest): each kind of expectation passing and failing with
its exact failure line, the nearest series, JUnit XML, exit codes, the shipped tests."""

from __future__ import annotations

import io
import re
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from l2m.authoring.ruletest import run_test_files
from l2m.cli import main

ROOT = Path(__file__).resolve().parents[3]

RULES = """\
rules:
  - id: errors
    name: errors_total
    kind: counter
    query: "level:error"
    aggregation: count
    group_by: [service, region]
  - id: latency
    name: latency_ms
    kind: gauge
    query: "_exists_:ms"
    aggregation: avg
    field: ms
    group_by: [service]
  - id: sizes
    name: size_bytes
    kind: counter
    query: "_exists_:size"
    aggregation: histogram
    field: size
    buckets: [0.5, 10]
  - id: total
    name: bytes_total
    kind: counter
    query: "_exists_:size"
    aggregation: sum
    field: size
    target_account: acme
"""

LOGS = """\
    logs:
      - {"@timestamp": +0s, level: error, service: cart, region: eu}
      - {"@timestamp": +5s, level: error, service: cart, region: eu}
      - {"@timestamp": +1s, level: error, service: web}
      - {"@timestamp": +10s, service: cart, ms: 0.1}
      - {"@timestamp": +20s, service: cart, ms: 0.2}
      - {"@timestamp": +70s, service: cart, ms: 4}
      - {"@timestamp": +1s, size: 0.5}
      - {"@timestamp": +2s, size: 3}
      - {"@timestamp": +3s, size: 1e308}
      - {"@timestamp": +4s, size: 1e308}
      - 'not json'
      - {level: error, service: cart}
"""


def run(tmp_path: Path, expect: str, *args: str, exhaustive: bool = False) -> tuple[int, str]:
    """The exit code and output of ``l2m test`` on one case of ``LOGS`` with ``expect``;
    the summary's time left out."""
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


# Line of the first expectation in the file `run` writes.
FIRST = 19


@pytest.mark.parametrize("expect", [
    "- {series: 'errors_total{service=\"cart\", region=\"eu\"}', value: 2, timestamp: +5s}",
    "- {name: errors_total, labels: {service: web}, value: 1}",
    "- {series: 'latency_ms{service=\"cart\"}', window: +0s, value: 0.15}",
    "- {series: 'latency_ms{service=\"cart\"}', window: 2026-11-22T10:01:59Z, value: 4}",
    "- {series: size_bytes, buckets: {0.5: 1, 10: 2, +Inf: 4}, count: 4, sum: +Inf}",
    "- {series: size_bytes_sum, value: +Inf}",
    "- {series: bytes_total, value: .inf, account: acme}",
    "- {series: 'errors_total{service=\"cart\"}', absent: true}",
    "- {series: 'latency_ms{service=\"cart\"}', window: +120s, absent: true}",
    "- {malformed: 1}",
    "- {no_timestamp: 1}",
    "- {logs: 12}",
    "- {samples: 10}",
    "- {matches: 3, rule: errors}",
    "- {refused: 0, rule: errors}",
    "- {cut: 0, rule: errors}",
])
def test_expectations_that_hold(tmp_path, expect):
    assert run(tmp_path, expect) == (0, "1 passed, 0 failed in X s")


@pytest.mark.parametrize(("expect", "failure"), [
    ("- {series: 'errors_total{service=\"cart\", region=\"eu\"}', value: 3}",
     "errors_total{region=\"eu\",service=\"cart\"}: want 3, got 2"),
    ("- {series: 'errors_total{service=\"cart\", region=\"eu\"}', value: 2, timestamp: +4s}",
     "errors_total{region=\"eu\",service=\"cart\"} timestamp: want 2026-11-22T10:00:04Z, "
     "got 2026-11-22T10:00:05Z"),
    ("- {series: 'errors_total{service=\"cart\", region=\"us\"}', value: 2}",
     "errors_total{region=\"us\",service=\"cart\"}: want 2, got no such series; nearest "
     "errors_total{region=\"eu\",service=\"cart\"} (region=\"eu\", not \"us\")"),
    ("- {series: 'errors_total{service=\"cart\"}', value: 2}",
     "errors_total{service=\"cart\"}: want 2, got no such series; nearest "
     "errors_total{region=\"eu\",service=\"cart\"} (with region=\"eu\")"),
    ("- {series: 'errors_total{service=\"web\", region=\"us\"}', value: 1}",
     "errors_total{region=\"us\",service=\"web\"}: want 1, got no such series; nearest "
     "errors_total{service=\"web\"} (without region=\"us\")"),
    ("- {series: 'error_total{service=\"web\"}', value: 1}",
     "error_total{service=\"web\"}: want 1, got no series of that name"),
    ("- {series: 'latency_ms{service=\"cart\"}', value: 0.15}",
     "latency_ms{service=\"cart\"}: want 0.15, got 2 samples (windows 2026-11-22T10:00:00Z, "
     "2026-11-22T10:01:00Z): give window:"),
    ("- {series: 'latency_ms{service=\"cart\"}', window: +0s, value: 0.30000000000000004}",
     "latency_ms{service=\"cart\"} @ 2026-11-22T10:00:00Z: want 0.30000000000000004, got 0.15"),
    ("- {series: 'latency_ms{service=\"cart\"}', window: +120s, value: 1}",
     "latency_ms{service=\"cart\"} @ 2026-11-22T10:02:00Z: want 1, got no sample in that window"),
    ("- {series: size_bytes, buckets: {0.5: 0, 10: 2, 20: 1}, count: 3, sum: 3.5}",
     "size_bytes_bucket{le=\"0.5\"}: want 0, got 1\n"
     "t.test.yaml:19: 'c': size_bytes_bucket{le=\"20\"}: want 1, got no bucket le=\"20\"; "
     "the rule's bounds: 0.5, 10, +Inf\n"
     "t.test.yaml:19: 'c': size_bytes_count: want 3, got 4\n"
     "t.test.yaml:19: 'c': size_bytes_sum: want 3.5, got +Inf"),
    ("- {series: 'size_bytes{service=\"x\"}', buckets: {0.5: 1}}",
     "size_bytes{service=\"x\"}: want a histogram, got no such series; nearest "
     "size_bytes (without service=\"x\")"),
    ("- {series: bytes_total, value: +Inf, account: null}",
     "bytes_total: want +Inf, got no sample for that account"),
    ("- {series: 'errors_total{service=\"web\"}', absent: true}",
     "errors_total{service=\"web\"}: want absent, got 1 sample(s): errors_total{service=\"web\"}"
     " = 1"),
    ("- {series: 'latency_ms{service=\"cart\"}', absent: true}",
     "latency_ms{service=\"cart\"}: want absent, got 2 sample(s): "
     "latency_ms{service=\"cart\"} @ 2026-11-22T10:00:00Z = 0.15"),
    ("- {malformed: 2}", "malformed lines: want 2, got 1"),
    ("- {no_timestamp: 0}", "logs without timestamp: want 0, got 1"),
    ("- {blank_lines: 1}", "blank lines: want 1, got 0"),
    ("- {matches: 2, rule: errors}", "logs matched by rule 'errors': want 2, got 3"),
    ("- {refused: 1, rule: errors, limit: account}",
     "logs refused by rule 'errors' (account cap): want 1, got 0"),
    ("- {cut: 1, rule: errors}", "label values cut by rule 'errors': want 1, got 0"),
    ("- {matches: 1, rule: nope}", "matches of rule 'nope': want 1, got no enabled rule of "
                                   "that id"),
    ("- {matches: 3, rule: eror}", "matches of rule 'eror': want 3, got no enabled rule of "
                                   "that id (did you mean 'errors'?)"),
    ("- {series: size_bytes, value: 4}",
     "size_bytes: want 4, got no series of that name; size_bytes is a histogram: give "
     "buckets:, count: or sum:"),
    ("- {series: size_bytes, buckets: {7: 1}}",
     "size_bytes_bucket{le=\"7\"}: want 1, got no bucket le=\"7\"; the rule's bounds: 0.5, "
     "10, +Inf"),
])
def test_expectations_that_fail_say_where_what_want_and_got(tmp_path, expect, failure):
    assert run(tmp_path, expect) == (
        1, f"t.test.yaml:{FIRST}: 'c': {failure}\n0 passed, 1 failed in X s")


def test_exhaustive_cases_refuse_every_sample_not_expected(tmp_path):
    code, out = run(tmp_path, """\
        - {series: 'errors_total{service="cart", region="eu"}', value: 2}
        - {series: 'errors_total{service="web"}', value: 1}
        - {series: size_bytes, buckets: {10: 2}}
        - {series: bytes_total, value: +Inf}
        - {series: 'latency_ms{service="cart"}', window: +0s, value: 0.15}
        """, exhaustive=True)
    assert (code, out) == (1, "t.test.yaml:4: 'c': latency_ms{service=\"cart\"} @ "
                              "2026-11-22T10:01:00Z: not expected (exhaustive), got 4\n"
                              "0 passed, 1 failed in X s")


def test_verbose_lists_cases_and_each_rules_cost(tmp_path):
    code, out = run(tmp_path, "- {malformed: 1}", "-v")
    lines = out.splitlines()
    assert code == 0
    assert re.fullmatch(r"t\.test\.yaml: 1 case\(s\) in X s", lines[0])
    assert re.fullmatch(r"  ok   c \([0-9.]+ ms\)", lines[1])
    assert lines[2] == "  per rule, the logs of all its cases in one run:"
    assert lines[3].split()[:3] == ["rule", "logs", "matched"]
    assert [line.split()[:3] for line in lines[4:8]] == [
        ["errors", "3", "2"], ["latency", "3", "2"], ["sizes", "4", "5"], ["total", "4", "1"]]
    assert lines[-1] == "1 passed, 0 failed in X s"


def write_suite(tmp_path: Path) -> Path:
    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "a.test.yaml").write_text(textwrap.dedent("""\
        rules: r.yaml
        tests:
          - name: passes
            logs: ['{"@timestamp": 0, "level": "error"}']
            expect: [{series: errors_total, value: 1}]
          - name: fails
            logs: ['{"@timestamp": 0, "level": "error"}']
            expect: [{series: errors_total, value: 2}]
        """))
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.test.yml").write_text("rules: ../r.yaml\ntests:\n  - nam: x\n")
    return tmp_path


def test_junit_xml_has_a_suite_per_file_and_a_case_per_case(tmp_path):
    suite = write_suite(tmp_path)
    out = io.StringIO()
    junit = tmp_path / "junit.xml"
    assert run_test_files([str(suite)], junit=str(junit), only=None, verbose=False,
                          out=out) == 1
    root = ET.parse(junit).getroot()
    assert (root.tag, root.get("tests"), root.get("failures"), root.get("errors")) == \
        ("testsuites", "3", "1", "1")
    first, second = root.findall("testsuite")
    assert (first.get("name"), first.get("tests"), first.get("failures")) == \
        (str(suite / "a.test.yaml"), "2", "1")
    passes, fails = first.findall("testcase")
    assert (passes.get("name"), passes.findall("*")) == ("passes", [])
    failure = fails.find("failure")
    assert failure is not None
    assert failure.get("message") == failure.text == \
        f"{suite}/a.test.yaml:8: 'fails': errors_total: want 2, got 1"
    (load,) = second.findall("testcase")
    error = load.find("error")
    assert error is not None
    assert (second.get("errors"), load.get("name"), error.get("message")) == (
        "1", "(load)", f"{suite}/sub/b.test.yml:3:5: tests[0]: unknown key 'nam' (did you "
                       "mean 'name'?)")


def test_a_file_that_does_not_load_is_an_error_and_run_filters_cases(tmp_path, capsys):
    suite = write_suite(tmp_path)
    assert main(["test", str(suite)]) == 1
    out = capsys.readouterr().out.replace(str(suite) + "/", "")
    assert re.sub(r" in [0-9.]+ s", "", out) == (
        "a.test.yaml:8: 'fails': errors_total: want 2, got 1\n"
        "error [CONFIG]: sub/b.test.yml:3:5: tests[0]: unknown key 'nam' (did you mean "
        "'name'?)\n"
        "1 passed, 1 failed, 1 error(s)\n")
    assert main(["test", str(suite / "a.test.yaml"), "--run", "^pass"]) == 0
    assert re.sub(r" in [0-9.]+ s", "", capsys.readouterr().out) == "1 passed, 0 failed\n"


def test_rule_problems_of_a_test_file_are_its_error(tmp_path, capsys):
    (tmp_path / "r.yaml").write_text("rules:\n  - id: x\n")
    (tmp_path / "t.test.yaml").write_text("rules: r.yaml\ntests: [{name: a, logs: [x], "
                                          "expect: [{logs: 1}]}]\n")
    assert main(["test", str(tmp_path)]) == 1
    out = capsys.readouterr().out.replace(str(tmp_path) + "/", "")
    assert out.splitlines()[0] == "error [RULES]: t.test.yaml:1:8: rules: r.yaml:2:5: rule " \
                                  "'x': missing required key 'name' [MISSING_KEY]"


def test_bad_arguments_are_one_error_line(tmp_path, capsys):
    assert main(["test", str(tmp_path / "none.test.yaml")]) == 1
    assert capsys.readouterr().err == \
        f"l2m: error [CONFIG]: {tmp_path}/none.test.yaml: no such file or directory\n"
    assert main(["test", str(tmp_path), "--run", "("]) == 1
    assert capsys.readouterr().err.startswith(
        "l2m: error [CONFIG]: --run: '(' is not a regular expression: ")


def test_the_shipped_rules_pass_their_tests(capsys):
    assert main(["test", str(ROOT / "rules")]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"19 passed, 0 failed in [0-9.]+ s\n", out)


def docs_section() -> str:
    text = (ROOT / "docs" / "rules.md").read_text()
    return text[text.index("## Testing rules"):text.index("## Why did my log not count?")]


def test_the_docs_example_runs_as_shown(tmp_path, monkeypatch):
    section = docs_section()
    example = section.split("```yaml\n")[1].split("```")[0]
    outputs = [block.split("```")[0] for block in section.split("```text\n")[1:3]]
    (tmp_path / "rules").mkdir()
    (tmp_path / "rules" / "web.yaml").write_bytes((ROOT / "rules" / "web.yaml").read_bytes())
    test = tmp_path / "rules" / "checkout.test.yaml"
    test.write_text(example)
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    assert run_test_files(["rules/checkout.test.yaml"], None, None, False, out) == 0
    shown = re.sub(r" in [0-9.]+ s", " in X s", outputs[0])
    assert shown == "$ l2m test rules/checkout.test.yaml\n" + \
        re.sub(r" in [0-9.]+ s", " in X s", out.getvalue())
    test.write_text(example.replace('service="checkout", http_method', 'service="chekout", '
                                    'http_method', 1))
    out = io.StringIO()
    assert run_test_files(["rules/checkout.test.yaml"], None, None, False, out) == 1
    assert re.sub(r" in [0-9.]+ s", " in X s", out.getvalue()) == \
        re.sub(r" in [0-9.]+ s", " in X s", outputs[1])


def test_tenant_mode_and_per_account_caps(tmp_path, capsys):
    (tmp_path / "rules" / "acme").mkdir(parents=True)
    (tmp_path / "rules" / "acme" / "r.yaml").write_text(RULES.split("  - id: latency")[0])
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: rules
        tenancy: {mode: accounts}
        limits: {accounts: {acme: {max_series_per_rule: 1}}}
        start: 0
        tests:
          - name: acme's logs only, one series
            logs:
              - {"@timestamp": +1s, account: acme, level: error, service: a}
              - {"@timestamp": +2s, account: acme, level: error, service: b}
              - {"@timestamp": +3s, account: globex, level: error, service: a}
            expect:
              - {series: 'errors_total{service="a"}', value: 1, account: acme}
              - {series: 'errors_total{l2m_overflow="true"}', value: 1}
              - {refused: 1, rule: acme/errors, limit: rule}
              - {matches: 2, rule: acme/errors}
        """))
    assert main(["test", str(tmp_path / "t.test.yaml")]) == 0, capsys.readouterr().out


@pytest.mark.parametrize("expect", [
    "- {series: 'errors_total{service=\"cart\", region=\"eu\"}', window: +0s, absent: true}",
    "- {series: 'errors_total{service=\"cart\", region=\"eu\"}', window: +0s, value: 2}",
    "- {series: size_bytes, window: +0s, count: 4}",
    "- {series: size_bytes_count, window: +0s, value: 4}",
])
def test_window_on_a_counter_is_refused_at_load_never_a_vacuous_pass(tmp_path, expect):
    assert run(tmp_path, expect) == (
        1, f"error [CONFIG]: t.test.yaml:{FIRST}: window: a counter has no window: use "
           "timestamp:\n0 passed, 0 failed, 1 error(s) in X s")


def test_window_on_a_counter_the_load_could_not_refuse_fails_in_the_run(tmp_path):
    from l2m.authoring.ruletest import check, file_routing
    from l2m.authoring.testfile import load_test_file
    from l2m.batch.local import run_local

    run(tmp_path, "- {series: 'errors_total{service=\"web\"}', window: +0s, absent: true}")
    loaded = load_test_file(str(tmp_path / "t.test.yaml"))  # not refused: as if both kinds
    routing = file_routing(loaded)
    (case,) = loaded.cases
    assert [line.replace(str(tmp_path) + "/", "")
            for line in check(case, run_local(routing, case.lines), routing)] == [
        f"t.test.yaml:{FIRST}: 'c': errors_total{{service=\"web\"}}: a counter has no window: "
        "use timestamp:"]


def test_junit_xml_is_well_formed_whatever_names_and_labels_hold(tmp_path):
    (tmp_path / "r.yaml").write_text(RULES)
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: r.yaml
        tests:
          - name: "bell \\x01 \\uFFFE \\uFFFF \\uD800 \\x1b tab\\t"
            logs: ['{"@timestamp": 0, "level": "error", "service": "a\\u0001b\\u001bc"}']
            expect: [{series: errors_total, value: 1}]
        """))
    junit = tmp_path / "junit.xml"
    out = io.StringIO()
    assert run_test_files([str(tmp_path)], str(junit), None, False, out) == 1
    assert out.getvalue().splitlines()[0] == (
        f"{tmp_path}/t.test.yaml:5: 'bell \\x01 \ufffe \uffff \\ud800 \\x1b tab\\x09': "
        "errors_total: want 1, got no such series; nearest "
        "errors_total{service=\"a\\x01b\\x1bc\"} (with service=\"a\\x01b\\x1bc\")")
    case = ET.parse(junit).getroot().find("testsuite/testcase")
    assert case is not None
    assert case.get("name") == "bell \\x01 \\ufffe \\uffff \\ud800 \\x1b tab\t"
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == failure.text == (
        f"{tmp_path}/t.test.yaml:5: 'bell \\x01 \\ufffe \\uffff \\ud800 \\x1b tab\\x09': "
        "errors_total: want 1, got no such series; nearest "
        "errors_total{service=\"a\\x01b\\x1bc\"} (with service=\"a\\x01b\\x1bc\")")


def test_control_characters_in_label_values_are_escaped_and_paste_back(tmp_path, capsys):
    (tmp_path / "r.yaml").write_text(RULES)
    body = textwrap.dedent("""\
        rules: r.yaml
        tests:
          - name: esc
            logs: ['{"@timestamp": 0, "level": "error", "service": "a\\u001b[31mb"}']
            expect: [{series: 'errors_total{service="SERVICE"}', value: VALUE}]
        """)
    test = tmp_path / "t.test.yaml"
    test.write_text(body.replace("SERVICE", "x").replace("VALUE", "1"))
    assert main(["test", str(test)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert out.splitlines()[0] == (
        f"{test}:5: 'esc': errors_total{{service=\"x\"}}: want 1, got no such series; nearest "
        "errors_total{service=\"a\\x1b[31mb\"} (service=\"a\\x1b[31mb\", not \"x\")")
    test.write_text(body.replace("SERVICE", "a\\x1b[31mb").replace("VALUE", "1"))
    assert main(["test", str(test)]) == 0, capsys.readouterr().out


def test_a_load_error_quoting_a_case_name_escapes_its_control_characters(tmp_path, capsys):
    (tmp_path / "r.yaml").write_text(RULES)
    test = tmp_path / "t.test.yaml"
    test.write_text("rules: r.yaml\ntests:\n"
                    + '  - {name: "a\\x1b[31mb", logs: [], exhaustive: true}\n' * 2)
    assert main(["test", str(test)]) == 1
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert out.splitlines()[0] == (
        f"error [CONFIG]: {test}:4: name: 'a\\x1b[31mb' is already the name of the case at "
        "line 3")


def test_run_selecting_no_case_is_an_error_and_a_file_named_twice_runs_once(tmp_path, capsys,
                                                                            monkeypatch):
    suite = write_suite(tmp_path)
    (suite / "sub" / "b.test.yml").unlink()
    assert main(["test", str(suite), "--run", "^nothing"]) == 1
    assert capsys.readouterr().err == \
        "l2m: error [CONFIG]: --run '^nothing': no case of the test files has a name it matches\n"
    monkeypatch.chdir(suite)
    assert main(["test", "a.test.yaml", "./a.test.yaml", ".", "--run", "^pass"]) == 0
    assert re.sub(r" in [0-9.]+ s", "", capsys.readouterr().out) == "1 passed, 0 failed\n"


def test_a_rule_file_problem_is_reported_at_the_test_file_s_rules_line(tmp_path, capsys):
    (tmp_path / "t.test.yaml").write_text("tests: [{name: a, logs: [x], expect: [{logs: 1}]}]\n"
                                          "rules: [r, nope.yaml]\n")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / "bad.yaml").write_text("rules:\n  - id: x\n")
    assert main(["test", str(tmp_path / "t.test.yaml")]) == 1
    out = capsys.readouterr().out.replace(str(tmp_path) + "/", "")
    assert out.splitlines()[:2] == [
        "error [RULES]: t.test.yaml:2:8: rules: nope.yaml: no such file or directory "
        "[FILE_NOT_FOUND]",
        "error [RULES]: t.test.yaml:2:8: rules: r/bad.yaml:2:5: rule 'x': missing required "
        "key 'name' [MISSING_KEY]"]


def test_a_count_of_a_tenant_rule_names_its_account_id(tmp_path):
    (tmp_path / "rules" / "acme").mkdir(parents=True)
    (tmp_path / "rules" / "acme" / "r.yaml").write_text(RULES.split("  - id: latency")[0])
    (tmp_path / "t.test.yaml").write_text(textwrap.dedent("""\
        rules: rules
        tenancy: {mode: accounts}
        tests:
          - name: c
            logs: ['{"@timestamp": 0, "account": "acme", "level": "error"}']
            expect: [{matches: 1, rule: errors}, {matches: 1, rule: acme/eror}]
        """))
    out = io.StringIO()
    assert run_test_files([str(tmp_path / "t.test.yaml")], None, None, False, out) == 1
    assert out.getvalue().replace(str(tmp_path) + "/", "").splitlines()[:2] == [
        "t.test.yaml:6: 'c': matches of rule 'errors': want 1, got no enabled rule of that id "
        "(did you mean 'acme/errors'?)",
        "t.test.yaml:6: 'c': matches of rule 'acme/eror': want 1, got no enabled rule of that "
        "id (did you mean 'acme/errors'?)"]
