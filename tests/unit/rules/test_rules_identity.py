"""Series identity (SPEC §7, issue 20): `validate` rejects two enabled rules that could write
the same series for the same target account, naming both rules' positions; rules that cannot
collide pass. All were accepted on def2d50."""

from __future__ import annotations

from pathlib import Path

import pytest

from l2m.errors import RuleValidationError
from l2m.rules.identity import can_coincide
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule


def rules(*specs: str) -> str:
    return "rules:\n" + "".join(f"  - {{{spec}}}\n" for spec in specs)


def codes(text: str) -> list[tuple[str, str | None, int]]:
    _, found = load_text(text, "f.yaml")
    return [(p.code, p.rule_id, p.line) for p in found if p.severity == "error"]


COUNT = "kind: counter, query: '*', aggregation: count"


def test_same_name_and_group_by_collide_and_name_the_first_rule():
    text = rules(f"id: a, name: http_requests_total, {COUNT}, group_by: [service]",
                 f"id: b, name: http_requests_total, {COUNT}, group_by: [service]")
    _, found = load_text(text, "f.yaml")
    (problem,) = found
    assert (problem.code, problem.rule_id, problem.line) == ("SERIES_COLLISION", "b", 3)
    assert "rule 'a' at f.yaml:2" in problem.message


@pytest.mark.parametrize(("a", "b", "collide"), [
    # a missing group-by field adds no label: {service} is one of {service, status}'s sets
    ("group_by: [service]", "group_by: [service, http.status]", True),
    ("", "group_by: [service]", True),  # both can write {} (no labels)
    # a static label is a value the other rule's group-by label can take
    ("labels: {service: web}", "group_by: [service]", True),
    ("labels: {team: a}", "labels: {team: b}", False),  # distinct static values
    ("labels: {team: a}", "labels: {team: a}", True),
    ("labels: {team: a}", "group_by: [service]", False),  # b never has a `team` label
    ("labels: {team: a}, group_by: [service]", "labels: {team: a}, group_by: [level]", True),
])
def test_label_sets_collide_when_some_log_of_each_gives_the_same_set(a, b, collide):
    sep_a = ", " if a else ""
    sep_b = ", " if b else ""
    text = rules(f"id: a, name: m_total, {COUNT}{sep_a}{a}",
                 f"id: b, name: m_total, {COUNT}{sep_b}{b}")
    assert (codes(text) == [("SERIES_COLLISION", "b", 3)]) is collide


def test_other_target_accounts_and_disabled_rules_do_not_collide():
    assert codes(rules(f"id: a, name: m_total, {COUNT}, target_account: x",
                       f"id: b, name: m_total, {COUNT}, target_account: y")) == []
    assert codes(rules(f"id: a, name: m_total, {COUNT}",
                       f"id: b, name: m_total, {COUNT}, enabled: false")) == []
    # the source account does not separate series: same target (none), same series
    assert codes(rules(f"id: a, name: m_total, {COUNT}, account: x",
                       f"id: b, name: m_total, {COUNT}, account: y")) == [
        ("SERIES_COLLISION", "b", 3)]


def test_one_name_is_one_metric_type():
    gauge = "kind: gauge, query: '*', aggregation: count"
    assert codes(rules(f"id: a, name: m, {COUNT}, labels: {{k: a}}",
                       f"id: b, name: m, {gauge}, labels: {{k: b}}")) == [
        ("METRIC_TYPE_CONFLICT", "b", 3)]
    hist = "kind: counter, query: '*', aggregation: histogram, field: v, buckets: [1]"
    assert codes(rules(f"id: a, name: m, {COUNT}", f"id: b, name: m, {hist}")) == [
        ("METRIC_TYPE_CONFLICT", "b", 3)]


@pytest.mark.parametrize("suffix", ["_bucket", "_sum", "_count"])
def test_a_name_that_is_a_histogram_series_collides(suffix):
    hist = "kind: gauge, query: '*', aggregation: histogram, field: v, buckets: [1, 2]"
    _, found = load_text(rules(f"id: h, name: lat, {hist}",
                               f"id: c, name: lat{suffix}, {COUNT}"), "f.yaml")
    (problem,) = found
    assert (problem.code, problem.rule_id) == ("HISTOGRAM_NAME_COLLISION", "c")
    assert f"'lat{suffix}' is the {suffix} series of the histogram 'lat'" in problem.message
    # whatever the order in the file
    assert codes(rules(f"id: c, name: lat{suffix}, {COUNT}", f"id: h, name: lat, {hist}")) == [
        ("HISTOGRAM_NAME_COLLISION", "h", 3)]


def test_validate_reports_collisions_across_files_with_both_positions(tmp_path: Path):
    (tmp_path / "a.yaml").write_text(rules(f"id: a, name: m_total, {COUNT}"))
    (tmp_path / "b.yaml").write_text(rules(f"id: b, name: m_total, {COUNT}"))
    with pytest.raises(RuleValidationError) as info:
        load_rules([tmp_path])
    (problem,) = info.value.problems
    assert (problem.code, Path(problem.file).name, problem.line) == ("SERIES_COLLISION",
                                                                    "b.yaml", 2)
    assert f"{tmp_path / 'a.yaml'}:2" in problem.message


def test_the_example_rules_and_the_benchmark_rules_do_not_collide():
    root = Path(__file__).resolve().parents[3]
    load_rules([root / "rules", root / "benchmarks" / "rules.yaml"])


def test_can_coincide_is_symmetric():
    a = Rule(id="a", name="m", kind="counter", query="*", aggregation="count",
             group_by=("service",), labels=(("team", "x"),))
    b = Rule(id="b", name="m", kind="counter", query="*", aggregation="count",
             group_by=("team",))
    # a on a log without `service` writes {team="x"}; b on a log with team "x" writes the same
    assert can_coincide(a, b) is can_coincide(b, a) is True
    c = Rule(id="c", name="m", kind="counter", query="*", aggregation="count",
             group_by=("level",))
    assert can_coincide(a, c) is can_coincide(c, a) is False  # c never writes `team`


def _brute_force(rules_: list[Rule]) -> list[tuple[str, str, str]]:
    """Every colliding pair by checking every pair (the definition), as (code, later, earlier)."""
    from l2m.rules.identity import HISTOGRAM_SUFFIXES, _pair

    out = []
    entries = []
    for rule in rules_:
        entries.append((rule, rule.name, None))
        if rule.classic:  # only a classic histogram writes the suffixed names
            entries += [(rule, rule.name + s, s) for s in HISTOGRAM_SUFFIXES]
    for i, (later, name, later_suffix) in enumerate(entries):
        for earlier, other, earlier_suffix in entries[:i]:
            if other != name or earlier.id == later.id:
                continue
            problem = _pair(earlier, earlier_suffix, later, later_suffix)
            if problem is not None:
                out.append((problem.code, later.id, earlier.id))
    return sorted(out)


def test_the_indexed_search_finds_exactly_the_pairs_every_pair_check_finds():
    # Random families over a few names, label names and values, kinds and histograms: the
    # lookup by label layout and static values agrees with checking every pair.
    import random

    from l2m.rules.identity import collisions

    seed = 2026_11_28
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(200):
        made = []
        for i in range(rng.randrange(2, 14)):
            hist = rng.random() < 0.15
            static = {n: rng.choice("ab") for n in rng.sample(["team", "env", "tier"],
                                                                rng.randrange(0, 3))}
            groups = tuple(rng.sample(["team", "env", "service", "level"], rng.randrange(0, 3)))
            made.append(Rule(
                id=f"r{i}", name=rng.choice(["m", "m_bucket", "m_count", "n"]),
                kind="gauge" if (not hist and rng.random() < 0.3) else "counter",
                query="*", aggregation="histogram" if hist else "count",
                field="v" if hist else None, buckets=(1.0, 2.0) if hist else (),
                group_by=groups, labels=tuple(sorted(static.items()))))
        got = sorted((p.code, p.rule_id, p.message.split("rule '")[1].split("'")[0])
                     for p in collisions(made))
        assert got == _brute_force(made)


def test_ten_thousand_rules_of_one_name_apart_by_a_static_label_compare_no_pair(monkeypatch):
    # Every pair was checked before (50 million pairs, minutes); indexed by the static
    # label's values, no rule meets another.
    from l2m.rules import identity

    pairs = []
    monkeypatch.setattr(identity, "_pair", lambda *args: pairs.append(args))
    many = [Rule(id=f"r{i}", name="requests_total", kind="counter", query="*",
                 aggregation="count", group_by=("service",), labels=(("route", f"/{i}"),))
            for i in range(10_000)]
    assert identity.collisions(many) == []
    assert pairs == []


def test_a_rule_colliding_with_many_reports_its_first_few():
    from l2m.rules.identity import MAX_PER_RULE, collisions

    same = [Rule(id=f"r{i}", name="m_total", kind="counter", query="*", aggregation="count")
            for i in range(50)]
    found = collisions(same)
    last = [p for p in found if p.rule_id == "r49"]
    assert len(last) == MAX_PER_RULE
    assert [p.message.split("rule '")[1].split("'")[0] for p in last] == \
        [f"r{i}" for i in range(MAX_PER_RULE)]
    assert len(found) == sum(min(i, MAX_PER_RULE) for i in range(50))


def test_a_histogram_in_four_families_still_reports_its_first_few():
    # A histogram writes its name and three suffixed ones: the cap is the rule's, not a
    # family's.
    from l2m.rules.identity import MAX_PER_RULE, collisions

    plain = [Rule(id=f"p{suffix}{i}", name="m" + suffix, kind="counter", query="*",
                  aggregation="count") for suffix in ("", "_bucket", "_sum", "_count")
             for i in range(12)]
    hist = Rule(id="h", name="m", kind="counter", query="*", aggregation="histogram",
                field="v", buckets=(1.0,))
    assert sum(p.rule_id == "h" for p in collisions([*plain, hist])) == MAX_PER_RULE
