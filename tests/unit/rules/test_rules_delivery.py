"""Rules cannot produce what delivery cannot carry (issue 53, deliverable 2): an account and a
target account are Mimir tenant IDs (a tenant header and a label value), l2m's own metric
names are reserved, and a static label cannot be empty (remote write would drop it). Each is
refused by `l2m validate` with its position and code; the messages are asserted whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m.errors import RuleValidationError
from l2m.policy.tenancy import Tenancy, account_problem, invalid_account
from l2m.rules.loader import load_rules, load_text

RULE = "  - {{id: r1, name: m1, kind: counter, query: '*', aggregation: count, {extra}}}\n"
WHY = ("; an account is 1 to 150 characters of A-Z a-z 0-9 ! - _ . * ' ( ), not '.', '..' or "
       "'__mimir_cluster' (Mimir's tenant IDs: it becomes the tenant header X-Scope-OrgID "
       "and a label value) [INVALID_ACCOUNT]")
RESERVED = (": metric names starting with l2m_ are l2m's own (l2m_input_logs_total, "
            "l2m_late_logs_total, …), written to the same metrics topic [RESERVED_NAME]")


def errors(extra: str) -> list[str]:
    """Every error of a one-rule file (``extra``: its last keys), as `l2m validate` prints
    them."""
    _, found = load_text("rules:\n" + RULE.format(extra=extra), "f.yaml")
    return [str(p) for p in found if p.severity == "error"]


@pytest.mark.parametrize(("written", "message"), [
    ('"東京"', "'東京' holds '東' (U+6771) at character 1"),
    ('"ok\\nno"', "'ok\\nno' holds (U+000A) at character 3"),
    ('""', "'' is empty"),
    ('"a b"', "'a b' holds (U+0020) at character 2"),
    ('"a/b"', "'a/b' holds '/' (U+002F) at character 2"),
    ('"x" ', None),
    ("'.'", "'.' is reserved"),
    ("'..'", "'..' is reserved"),
    ("__mimir_cluster", "'__mimir_cluster' is reserved"),
    ("x" * 151, f"'{'x' * 40}'… is 151 characters long"),
])
def test_a_target_account_outside_the_tenant_id_alphabet_is_refused_where_it_is_written(
        written, message):
    found = errors(f"target_account: {written}")
    if message is None:
        assert found == []
        return
    assert found == [f"f.yaml:2:87: rule 'r1': target_account: {message}{WHY}"]


def test_the_account_key_is_held_to_the_same_alphabet():
    assert errors('account: "東京"') == [
        f"f.yaml:2:80: rule 'r1': account: '東京' holds '東' (U+6771) at character 1{WHY}"]
    assert errors("account: ''") == [f"f.yaml:2:80: rule 'r1': account: '' is empty{WHY}"]


def test_the_whole_alphabet_up_to_150_characters_and_numbers_are_accounts():
    rules, found = load_text("rules:\n" + RULE.format(
        extra="account: \"Az09!-_.*'()\", target_account: " + "y" * 150), "f.yaml")
    assert found == []
    assert (rules[0].account, rules[0].target_account) == ("Az09!-_.*'()", "y" * 150)
    rules, _ = load_text("rules:\n" + RULE.format(extra="account: 42, target_account: 7"))
    assert (rules[0].account, rules[0].target_account) == ("42", "7")


def test_the_alphabet_has_one_home_for_the_loaders():
    assert [account_problem(v) for v in ("acme", "a" * 150, "..", "a" * 151, "é", "a\tb")] == [
        None, None, "is reserved", "is 151 characters long", "holds 'é' (U+00E9) at character 1",
        "holds (U+0009) at character 2"]
    assert invalid_account("acme") is None
    assert invalid_account("a b", "account directory ") == {
        "what": "account directory ", "value": "'a b'", "reason": "holds (U+0020) at character 2",
        "limit": 150, "chars": "A-Z a-z 0-9 ! - _ . * ' ( )",
        "reserved": "'.', '..' or '__mimir_cluster'"}


def test_an_account_directory_outside_the_alphabet_is_refused(tmp_path: Path):
    for account in ("東京", "two words", "acme"):
        (tmp_path / account).mkdir()
        (tmp_path / account / "r.yaml").write_text(
            "rules:\n" + RULE.format(extra="group_by: [x]"))
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path], tenancy=Tenancy())
    assert [str(p) for p in info.value.errors] == [
        f"{tmp_path / 'two words'}:1:1: account directory 'two words' holds (U+0020) at "
        f"character 4{WHY}",
        f"{tmp_path / '東京'}:1:1: account directory '東京' holds '東' (U+6771) at character "
        f"1{WHY}"]


def test_validate_refuses_a_target_account_with_its_position_and_code(tmp_path: Path):
    from tests.support.tools import cli

    path = tmp_path / "r.yaml"
    path.write_text("rules:\n" + RULE.format(extra='target_account: "東京"'))
    res = cli("validate", str(path))
    assert res.returncode == 1
    assert f"{path}:2:87: rule 'r1': target_account: '東京' holds '東' (U+6771) at " \
           f"character 1{WHY}" in res.stderr


@pytest.mark.parametrize(("name", "extra", "reason"), [
    ("l2m_input_logs_total", "", "starts with l2m_"),
    ("l2m_mine", "", "starts with l2m_"),
    ("l2m", "aggregation: histogram, field: v, buckets: [1]",
     "is a histogram, whose series would be l2m_bucket, l2m_sum and l2m_count"),
])
def test_l2m_s_own_metric_names_are_reserved(name, extra, reason):
    text = f"  - {{id: r1, name: {name}, kind: counter, query: '*', " \
           f"{extra or 'aggregation: count'}}}\n"
    _, found = load_text("rules:\n" + text, "f.yaml")
    assert [str(p) for p in found] == [f"f.yaml:2:20: rule 'r1': name: '{name}' {reason}"
                                       f"{RESERVED}"]


def test_names_near_the_reserved_prefix_are_free():
    for name in ("l2m", "l2mx_total", "L2M_total", "my_l2m_total"):
        _, found = load_text("rules:\n" + RULE.replace("m1", name).format(extra="enabled: true"))
        assert found == [], name
    _, found = load_text("rules:\n  - {id: h, name: l2, kind: counter, query: '*', "
                         "aggregation: histogram, field: v, buckets: [1]}\n")
    assert found == []


def test_a_static_label_cannot_be_empty():
    assert errors("labels: {env: '', team: web}") == [
        "f.yaml:2:85: rule 'r1': labels: label 'env' has an empty value: an empty label is no "
        "label in Prometheus (remote write drops it); give it a value or leave it out "
        "[EMPTY_LABEL_VALUE]"]


def test_reserved_label_names_are_refused():
    def codes(extra: str) -> list[tuple[str, int, int]]:
        _, found = load_text("rules:\n" + RULE.format(extra=extra), "f.yaml")
        return [(p.code, p.line, p.column) for p in found]

    assert codes("group_by: [l2m_overflow]") == [("LABEL_CLASH", 2, 81)]
    assert codes("labels: {l2m_overflow: 'x'}") == [("LABEL_CLASH", 2, 79)]
    assert codes("group_by: [__x]") == [("INVALID_GROUP_BY_LABEL", 2, 82)]
    assert codes("labels: {__x: y}") == [("INVALID_LABEL_NAME", 2, 80)]


def test_label_names_starting_with_l2m_are_l2m_s_own():
    assert errors("group_by: [l2m_account]") == [
        "f.yaml:2:81: rule 'r1': group_by: label 'l2m_account' starts with l2m_, reserved for "
        "the labels l2m adds (l2m_overflow, l2m deliver's l2m_account) [LABEL_CLASH]"]
    assert errors("labels: {l2m_x: y}") == [
        "f.yaml:2:79: rule 'r1': labels: label 'l2m_x' starts with l2m_, reserved for the "
        "labels l2m adds (l2m_overflow, l2m deliver's l2m_account) [LABEL_CLASH]"]
    assert errors("labels: {l2m: y, l2maccount: z}") == []


def test_an_id_of_l2m_s_own_counters_is_refused():
    _, found = load_text("rules:\n  - {id: l2m-late, name: m1, kind: counter, query: '*', "
                         "aggregation: count}\n", "f.yaml")
    assert [str(p) for p in found if p.severity == "error"] == [
        "f.yaml:2:10: rule 'l2m-late': id: 'l2m-late' starts with l2m-: rule ids starting with "
        "l2m- are l2m's own (l2m-late, l2m-label-cut, …), whose counts they would share "
        "[RESERVED_ID]"]
    assert errors("labels: {a: b}") == []  # an id such as l2m1 or l2m_x stays allowed
