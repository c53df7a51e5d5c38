"""Rule loader: one test per error class, asserting the code and the position."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from l2m.errors import RuleValidationError
from l2m.rules.loader import is_rule_file, load_rules, load_text

ROOT = Path(__file__).resolve().parents[3]

GOOD = """\
rules:
  - id: r1
    name: m1
    kind: counter
    query: "status:500"
    aggregation: count
"""


def problems(text: str) -> list[tuple[str, int, int, str | None]]:
    _, found = load_text(textwrap.dedent(text), "f.yaml")
    return [(p.code, p.line, p.column, p.rule_id) for p in found if p.severity == "error"]


def rule_yaml(**overrides: object) -> str:
    base = {"id": "r1", "name": "m1", "kind": "counter", "query": '"status:500"',
            "aggregation": "count"}
    base.update(overrides)
    lines = ["rules:", "  - " + "\n    ".join(f"{k}: {v}" for k, v in base.items()
                                                if v is not None)]
    return "\n".join(lines) + "\n"


def test_good_rule_loads_as_typed_immutable_record():
    rules, found = load_text(GOOD, "f.yaml")
    assert found == []
    (rule,) = rules
    assert (rule.id, rule.name, rule.kind, rule.aggregation, rule.line) == (
        "r1", "m1", "counter", "count", 2)
    with pytest.raises(AttributeError):
        rule.id = "x"  # type: ignore[misc]


def test_yaml_syntax_error():
    assert problems("rules:\n  - id: [unclosed\n") == [("YAML_SYNTAX", 3, 1, None)]


def test_invalid_document():
    assert problems("- a\n- b\n") == [("INVALID_DOCUMENT", 1, 1, None)]
    assert problems("rules: 5\n") == [("INVALID_DOCUMENT", 1, 8, None)]


def test_rule_not_a_mapping():
    assert problems("rules:\n  - just a string\n") == [("INVALID_RULE", 2, 5, None)]


def test_unknown_key():
    text = GOOD + "    colour: red\n"
    assert problems(text) == [("UNKNOWN_KEY", 7, 5, "r1")]


def test_unknown_key_suggests_close_name():
    _, found = load_text(GOOD + "    groupby: [a]\n", "f.yaml")
    assert "did you mean 'group_by'" in found[0].message


def test_duplicate_key():
    assert problems(GOOD + "    kind: gauge\n") == [("DUPLICATE_KEY", 7, 5, "r1")]


def test_missing_key():
    text = "rules:\n  - id: r1\n    name: m\n    kind: counter\n    aggregation: count\n"
    assert problems(text) == [("MISSING_KEY", 2, 5, "r1")]


def test_invalid_type():
    assert problems(rule_yaml(name="[a, b]")) == [("INVALID_TYPE", 3, 11, "r1")]
    assert problems(rule_yaml(enabled="maybe")) == [("INVALID_TYPE", 7, 14, "r1")]
    assert problems(rule_yaml(group_by="{a: 1}")) == [("INVALID_TYPE", 7, 15, "r1")]


def test_invalid_id():
    assert problems(rule_yaml(id="Web_5xx")) == [("INVALID_ID", 2, 9, "Web_5xx")]
    assert problems(rule_yaml(id="-x")) == [("INVALID_ID", 2, 9, "-x")]


def test_numeric_id_is_accepted_as_its_string_form():
    rules, _ = load_text(rule_yaml(id="404"), "f.yaml")
    assert rules[0].id == "404"


def test_invalid_name():
    assert problems(rule_yaml(name="http-errors")) == [("INVALID_NAME", 3, 11, "r1")]


def test_invalid_kind_and_aggregation():
    assert problems(rule_yaml(kind="summary")) == [("INVALID_KIND", 4, 11, "r1")]
    assert problems(rule_yaml(aggregation="p99")) == [("INVALID_AGGREGATION", 6, 18, "r1")]


def test_aggregation_kind_mismatch():
    found = problems(rule_yaml(aggregation="avg", field="latency"))
    assert found == [("AGGREGATION_KIND_MISMATCH", 6, 18, "r1")]


def test_missing_field_and_buckets():
    assert problems(rule_yaml(kind="gauge", aggregation="max")) == [("MISSING_FIELD", 2, 5, "r1")]
    found = problems(rule_yaml(aggregation="histogram", field="latency"))
    assert found == [("MISSING_BUCKETS", 2, 5, "r1")]


def test_invalid_buckets():
    base = {"aggregation": "histogram", "field": "latency"}
    assert problems(rule_yaml(**base, buckets="[1, 5, 5]")) == [("INVALID_BUCKETS", 8, 21, "r1")]
    assert problems(rule_yaml(**base, buckets="[2, 1]")) == [("INVALID_BUCKETS", 8, 18, "r1")]
    assert problems(rule_yaml(**base, buckets="[1, fast]")) == [("INVALID_BUCKETS", 8, 18, "r1")]
    assert problems(rule_yaml(**base, buckets="[]")) == [("INVALID_BUCKETS", 8, 14, "r1")]


def test_buckets_keep_their_string_form_for_le():
    rules, _ = load_text(rule_yaml(aggregation="histogram", field="x",
                                   buckets="[0.5, 1, 2.5, 10]"), "f.yaml")
    assert rules[0].buckets == (0.5, 1.0, 2.5, 10.0)
    assert rules[0].bucket_labels == ("0.5", "1", "2.5", "10")


def test_field_name_and_group_by_problems():
    assert problems(rule_yaml(kind="gauge", aggregation="max", field='""')) == [
        ("INVALID_FIELD_NAME", 7, 12, "r1")]
    assert problems(rule_yaml(group_by="[a, '']")) == [("INVALID_FIELD_NAME", 7, 19, "r1")]
    assert problems(rule_yaml(group_by="[a, b, a]")) == [("DUPLICATE_GROUP_BY", 7, 22, "r1")]


def test_labels_problems():
    assert problems(rule_yaml(labels="{9x: a}")) == [("INVALID_LABEL_NAME", 7, 14, "r1")]
    assert problems(rule_yaml(labels="{__name__: a}")) == [("INVALID_LABEL_NAME", 7, 14, "r1")]
    assert problems(rule_yaml(labels="{a: [1]}")) == [("INVALID_TYPE", 7, 17, "r1")]


def test_label_clashes():
    assert problems(rule_yaml(group_by="[service]", labels="{service: x}")) == [
        ("LABEL_CLASH", 8, 13, "r1")]
    # two group-by fields sanitised to the same label name
    assert problems(rule_yaml(group_by="[a.b, a_b]")) == [("LABEL_CLASH", 7, 15, "r1")]
    assert problems(rule_yaml(aggregation="histogram", field="x", buckets="[1]",
                              group_by="[le]")) == [("LABEL_CLASH", 9, 15, "r1")]


def test_static_label_values_are_string_forms():
    rules, _ = load_text(rule_yaml(labels="{tier: 1, canary: true, team: web}"), "f.yaml")
    assert rules[0].labels == (("canary", "true"), ("team", "web"), ("tier", "1"))


def test_query_errors_point_inside_the_query():
    # column of the offending character inside the double-quoted scalar
    found = problems(rule_yaml(query='"status:500 AND (a OR b"'))
    assert found == [("QUERY_SYNTAX", 5, 28, "r1")]
    found = problems(rule_yaml(query="status:500 && a"))
    assert found == [("QUERY_UNSUPPORTED_OPERATOR", 5, 23, "r1")]
    found = problems(rule_yaml(query="''"))
    assert found == [("QUERY_EMPTY", 5, 13, "r1")]


def test_query_error_in_block_scalar_points_at_its_line():
    text = GOOD.replace('    query: "status:500"\n',
                        "    query: |\n      status:500 AND\n      message:oops~\n")
    assert problems(text) == [("QUERY_UNSUPPORTED", 7, 19, "r1")]


def test_all_errors_of_all_files_are_reported(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(rule_yaml(name="bad-name", kind="nope"))
    sub = tmp_path / "sub"
    sub.mkdir()
    (sub / "b.yml").write_text(rule_yaml(query='"a || b"'))
    (tmp_path / "notes.txt").write_text("ignored")
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    found = [(Path(p.file).name, p.code, p.line, p.column) for p in info.value.problems]
    assert found == [
        ("a.yaml", "INVALID_NAME", 3, 11),
        ("a.yaml", "INVALID_KIND", 4, 11),
        ("b.yml", "QUERY_UNSUPPORTED_OPERATOR", 5, 15),
        ("b.yml", "DUPLICATE_ID", 2, 9),
    ]


def test_duplicate_id_across_files_names_the_first(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(GOOD)
    (tmp_path / "b.yaml").write_text(GOOD)
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    (problem,) = info.value.problems
    assert (problem.code, Path(problem.file).name, problem.line) == ("DUPLICATE_ID", "b.yaml", 2)
    assert f"{tmp_path / 'a.yaml'}:2" in problem.message


def test_missing_path_and_empty_directory(tmp_path: Path):
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path / "nope.yaml", tmp_path])
    assert [p.code for p in info.value.problems] == ["FILE_NOT_FOUND", "NO_RULE_FILES"]


def test_unused_keys_are_warnings_not_errors():
    rules, found = load_text(rule_yaml(field="latency", buckets="[1]"), "f.yaml")
    assert len(rules) == 1 and rules[0].field is None
    assert [(p.code, p.severity) for p in found] == [
        ("UNUSED_KEY", "warning"), ("UNUSED_KEY", "warning")]


def test_disabled_rules_are_validated():
    assert problems(rule_yaml(enabled="false", query='"a && b"')) == [
        ("QUERY_UNSUPPORTED_OPERATOR", 5, 15, "r1")]
    rules, _ = load_text(rule_yaml(enabled="false"), "f.yaml")
    assert rules[0].enabled is False


def test_every_example_rule_file_is_valid():
    ruleset = load_rules([ROOT / "rules"])
    assert len(ruleset.rules) >= 12
    assert ruleset.warnings == ()
    aggregations = {r.aggregation for r in ruleset.rules}
    assert aggregations == {"count", "sum", "avg", "min", "max", "histogram", "quantiles"}
    histograms = {(r.id, r.native_schema, bool(r.buckets)) for r in ruleset.rules
                  if r.aggregation == "histogram" and r.native_schema is not None}
    assert histograms == {("http-latency-native", 3, False), ("http-response-size", 2, False)}
    for path in sorted((ROOT / "rules").rglob("*.y*ml")):
        if is_rule_file(path.name):  # not the unit tests beside them (l2m test)
            load_rules([path])  # each file also stands on its own


def test_yaml_1_1_booleans_stay_strings():
    rules, found = load_text(rule_yaml(id="off", labels="{canary: no}"), "f.yaml")
    assert found == []
    assert rules[0].id == "off" and rules[0].labels == (("canary", "no"),)
    assert problems(rule_yaml(enabled="yes")) == [("INVALID_TYPE", 7, 14, "r1")]


def test_description_and_unit_are_the_metric_s_metadata_and_are_checked():
    rules, errors = load_text(textwrap.dedent("""\
        rules:
          - {id: a, name: a_seconds, kind: gauge, query: "*", aggregation: max, field: x,
             description: Worst latency per minute., unit: seconds}
          - {id: b, name: b_total, kind: counter, query: "*", aggregation: count}
          - {id: c, name: c_total, kind: counter, query: "*", aggregation: count, unit: Sec}
          - {id: d, name: d_total, kind: counter, query: "*", aggregation: count,
             description: "two\\tparts"}
          - {id: e, name: e_total, kind: counter, query: "*", aggregation: count,
             description: [a list]}
        """))
    assert [(r.id, r.description, r.unit) for r in rules] == [
        ("a", "Worst latency per minute.", "seconds"), ("b", "", "")]
    assert [(e.rule_id, e.code) for e in errors] == [
        ("c", "INVALID_UNIT"), ("d", "INVALID_DESCRIPTION"), ("e", "INVALID_TYPE")]
