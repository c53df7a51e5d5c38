"""Rule files nobody validated cannot hang, crash or fool ``l2m validate``: alias bombs, unknown
tags, bad typed values, deep nesting, huge files, reserved label names, paths given twice,
unreadable directories. Every one is a positioned error with a stable code, and the other
files' errors are still reported."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from l2m.errors import RuleValidationError
from l2m.rules.loader import load_rules, load_text
from l2m.yamlio.yamlsafe import MAX_FILE_BYTES
from tests.unit.rules.test_rules import rule_yaml

BOMB = """\
a: &a [x, x, x, x, x, x, x, x, x]
b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
rules:
  - id: r1
    name: m1
    kind: counter
    query: "*"
    aggregation: count
    ? *i
    : 1
"""


def codes(text: str) -> list[tuple[str, int, int]]:
    _, found = load_text(text, "f.yaml")
    return [(p.code, p.line, p.column) for p in found if p.severity == "error"]


def test_an_alias_bomb_used_as_a_key_is_refused_at_once_at_its_alias():
    started = time.monotonic()
    assert codes(BOMB) == [("YAML_ALIAS_LIMIT", 5, 8)]  # where the expansion passes 10,000
    assert time.monotonic() - started < 1.0


def test_small_aliases_still_work():
    text = rule_yaml(labels="&common {team: web}") + rule_yaml(id="r2", name="m2",
                                                               labels="*common")[6:]
    rules, found = load_text(text, "f.yaml")
    assert [r.labels for r in rules] == [(("team", "web"),)] * 2 and found == []


def test_a_recursive_alias_is_refused():
    assert codes("rules: &r [*r]\n") == [("YAML_ALIAS_LIMIT", 1, 12)]


@pytest.mark.parametrize(("value", "code"), [
    ("!!int abc", "YAML_INVALID_VALUE"),
    ("!!float x", "YAML_INVALID_VALUE"),
    ("!foo bar", "YAML_UNKNOWN_TAG"),
    ("!!python/object:os.system {}", "YAML_UNKNOWN_TAG"),
])
def test_unknown_tags_and_bad_typed_values_are_positioned_errors(value, code):
    assert codes(rule_yaml(field=value, aggregation="sum")) == [(code, 7, 12)]


def test_deep_nesting_is_an_error_not_a_crash():
    assert [c for c, _, _ in codes("rules: " + "[" * 100_000)] == ["YAML_TOO_DEEP"]


def test_a_file_over_the_cap_is_refused_without_parsing(tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_text("rules: []\n#" + "x" * MAX_FILE_BYTES)
    with pytest.raises(RuleValidationError) as info:
        load_rules([big])
    assert [p.code for p in info.value.problems] == ["FILE_TOO_LARGE"]


def test_a_bad_file_does_not_hide_the_others_errors(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(rule_yaml(field="!!int abc", aggregation="sum"))
    (tmp_path / "b.yaml").write_text(rule_yaml(id="r2", kind="histogram"))
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    assert [(Path(p.file).name, p.code) for p in info.value.problems] == [
        ("a.yaml", "YAML_INVALID_VALUE"), ("b.yaml", "INVALID_KIND")]


@pytest.mark.parametrize("field", ["__name__", "__meta", "2xx", "1.rate"])
def test_group_by_fields_that_would_be_invalid_or_reserved_labels_are_refused(field):
    assert codes(rule_yaml(group_by=f"['{field}']")) == [("INVALID_GROUP_BY_LABEL", 7, 16)]


def test_sanitised_group_by_labels_are_fine():
    rules, found = load_text(rule_yaml(group_by="[http.status, k8s-pod, _x]"), "f.yaml")
    assert found == [] and rules[0].group_labels == (
        ("http_status", "http.status"), ("k8s_pod", "k8s-pod"), ("_x", "_x"))


def test_a_file_given_twice_or_through_its_directory_is_loaded_once(tmp_path: Path):
    (tmp_path / "web.yaml").write_text(rule_yaml())
    ruleset = load_rules([tmp_path / "web.yaml", tmp_path, tmp_path / "web.yaml"])
    assert [r.id for r in ruleset.rules] == ["r1"]


def test_an_unreadable_directory_is_an_error(tmp_path: Path, monkeypatch):
    # Tests run as root here, where permissions do not stop reading: make the listing of the
    # sub-directory fail as it fails for an unprivileged user.
    (tmp_path / "ok.yaml").write_text(rule_yaml())
    locked = tmp_path / "team"
    locked.mkdir()
    real_scandir = os.scandir

    def scandir(path):  # type: ignore[no-untyped-def]
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    assert [(p.code, p.file) for p in info.value.problems] == [("FILE_UNREADABLE", str(locked))]


def test_a_control_character_is_a_syntax_error_at_its_position():
    assert codes(rule_yaml(labels='{a: "x\x07"}')) == [("YAML_SYNTAX", 7, 19)]


def test_a_syntax_error_never_quotes_the_line():
    _, found = load_text("rules:\n  - id: token-Zq9 : oops\n", "f.yaml")
    assert [(p.code, p.line) for p in found] == [("YAML_SYNTAX", 2)]
    assert "Zq9" not in str(found[0])


@pytest.mark.parametrize(("labels", "column"), [("{? [a, b] : 1}", 16), ("{? {a: 1} : 1}", 16)])
def test_a_list_or_mapping_as_a_key_is_a_positioned_error(labels, column):
    # constructing such a mapping raised PyYAML's "unhashable key", with a traceback
    assert codes(rule_yaml(labels=labels)) == [("YAML_COMPLEX_KEY", 7, column)]


@pytest.mark.parametrize("depth", [100, 250, 300])
def test_nesting_that_composes_but_would_not_construct_is_an_error(depth):
    # a few hundred levels passed the composer and crashed the constructor (RecursionError)
    text = rule_yaml(labels="[" * depth + "]" * depth)
    assert [c for c, _, _ in codes(text)] == ["YAML_TOO_DEEP"]


def test_a_plain_equals_sign_is_a_string():
    rules, found = load_text(rule_yaml(labels="{op: =}"), "f.yaml")
    assert found == [] and rules[0].labels == (("op", "="),)


def test_a_dangling_symlink_in_a_directory_is_an_error_not_skipped(tmp_path: Path):
    (tmp_path / "ok.yaml").write_text(rule_yaml())
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "deleted.yaml")
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    assert [(p.code, p.file) for p in info.value.problems] == [
        ("FILE_UNREADABLE", str(tmp_path / "gone.yaml"))]


def test_a_fifo_is_an_error_and_never_blocks(tmp_path: Path):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)  # nobody writes to it: opening it blocking would hang for ever
    for given in ([tmp_path], [fifo]):
        with pytest.raises(RuleValidationError) as info:
            load_rules(given)
        assert [(p.code, p.file) for p in info.value.problems] == [("FILE_UNREADABLE", str(fifo))]


def test_an_unreadable_file_is_an_error_naming_it(tmp_path: Path, monkeypatch):
    # As root, chmod 000 does not stop reading: make opening the file fail as it would for
    # an unprivileged user.
    (tmp_path / "a.yaml").write_text(rule_yaml())
    locked = tmp_path / "b.yaml"
    locked.write_text(rule_yaml(id="r2"))
    real_open = os.open

    def deny(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", deny)
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    assert [(p.code, p.file) for p in info.value.problems] == [("FILE_UNREADABLE", str(locked))]


def test_a_file_that_is_not_utf8_is_unreadable(tmp_path: Path):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(rule_yaml(labels="{city: 'Malmö'}").encode("latin-1"))
    with pytest.raises(RuleValidationError) as info:
        load_rules([bad])
    assert [p.code for p in info.value.problems] == ["FILE_UNREADABLE"]


def test_symlinked_directories_are_followed_once_and_loops_end(tmp_path: Path):
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "team.yaml").write_text(rule_yaml())
    top = tmp_path / "rules"
    top.mkdir()
    (top / "team").symlink_to(shared)       # a linked folder: its rules count
    (top / "again").symlink_to(shared)      # the same folder twice: loaded once
    (shared / "loop").symlink_to(top)       # a cycle: the walk still ends
    ruleset = load_rules([top])
    assert [r.id for r in ruleset.rules] == ["r1"]


def test_a_kubernetes_configmap_mount_loads_each_rule_once(tmp_path: Path):
    # A ConfigMap volume: real files in a timestamped folder, `..data` linking to it, and a
    # symlink per key at the top. Every rule is reachable three ways.
    stamp = tmp_path / "..2026_11_22_12_00_00.123"
    stamp.mkdir()
    (stamp / "web.yaml").write_text(rule_yaml())
    (tmp_path / "..data").symlink_to(stamp.name)
    (tmp_path / "web.yaml").symlink_to("..data/web.yaml")
    ruleset = load_rules([tmp_path])
    assert [r.id for r in ruleset.rules] == ["r1"]
