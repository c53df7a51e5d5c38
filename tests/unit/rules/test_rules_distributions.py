"""Distributions in rules (issue 56): the `native` and `quantiles` keys — every problem with its
code, message and position; good rules to their exact fields; series identity, snapshots and
the listing of native histograms and quantile gauges."""

from __future__ import annotations

import dataclasses
import hashlib
import random
from pathlib import Path

import orjson
import pytest

from l2m.cli import main
from l2m.rules.identity import HISTOGRAM_SUFFIXES, _pair, collisions, shown_type
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule
from l2m.rules.snapshot import restore, snapshot, version_of

ROOT = Path(__file__).resolve().parents[3]

HIST = 'id: h, name: lat, kind: counter, query: "*", aggregation: histogram, field: v'
QUANT = 'id: q, name: lat_q, kind: gauge, query: "*", aggregation: quantiles, field: v'


def rules(*specs: str) -> str:
    return "rules:\n" + "".join(f"  - {{{spec}}}\n" for spec in specs)


def found(text: str) -> list[str]:
    """Every problem of a rule file as `l2m validate` prints it."""
    _, problems = load_text(text, "f.yaml")
    return [str(p) for p in problems]


def at(text: str, token: str, after: str, line: int = 2) -> str:
    """``f.yaml:line:column`` of the first ``token`` after ``after`` on ``line`` of ``text``."""
    row = text.splitlines()[line - 1]
    return f"f.yaml:{line}:{row.index(token, row.index(after)) + 1}"


def loaded(text: str) -> Rule:
    (rule,), problems = load_text(text, "f.yaml")
    assert problems == []
    return rule


NATIVE_FORM = ("; 'native' is true, false or a mapping of schema (-4 to 8) and max_buckets "
               "(1 to 1000) [INVALID_NATIVE]")


# --- good rules ------------------------------------------------------------------------------


def test_a_native_histogram_takes_the_default_schema_and_bucket_limit():
    rule = loaded(rules(f"{HIST}, native: true, group_by: [service]"))
    assert (rule.native_schema, rule.native_max_buckets, rule.buckets, rule.bucket_labels,
            rule.quantiles, rule.quantile_labels, rule.classic, rule.bucketed) == (
        3, 160, (), (), (), (), False, True)
    assert rule.signature == ("histogram", "v", ("native/3",), ("service",))


def test_a_native_mapping_sets_either_key_and_the_other_keeps_its_default():
    assert (loaded(rules(f"{HIST}, native: {{schema: -4}}")).native_schema,
            loaded(rules(f"{HIST}, native: {{schema: -4}}")).native_max_buckets) == (-4, 160)
    rule = loaded(rules(f"{HIST}, native: {{max_buckets: 1000}}"))
    assert (rule.native_schema, rule.native_max_buckets) == (3, 1000)
    rule = loaded(rules(f"{HIST}, native: {{}}"))
    assert (rule.native_schema, rule.native_max_buckets) == (3, 160)
    rule = loaded(rules(f"{HIST}, native: {{schema: 8, max_buckets: 1}}"))
    assert (rule.native_schema, rule.native_max_buckets) == (8, 1)


def test_classic_and_native_together():
    rule = loaded(rules(f"{HIST}, buckets: [5, 10.0, 25.00], native: {{schema: 2}}"))
    assert (rule.buckets, rule.bucket_labels, rule.native_schema, rule.classic) == (
        (5.0, 10.0, 25.0), ("5", "10.0", "25.0"), 2, True)
    assert rule.signature == ("histogram", "v", ("5", "10.0", "25.0", "native/2"), ())
    assert (rule.native_max_buckets, rule.quantiles) == (160, ())


def test_native_false_is_a_classic_histogram_with_the_signature_releases_stored():
    rule = loaded(rules(f"{HIST}, buckets: [1, 2], native: false"))
    assert (rule.native_schema, rule.native_max_buckets, rule.classic) == (None, 160, True)
    assert rule.signature == ("histogram", "v", ("1", "2"), ())


def test_a_quantiles_rule_loads_its_quantiles_and_their_labels_as_written():
    rule = loaded(rules(f"{QUANT}, quantiles: [0, 0.5, 0.9, 0.99, 0.999, 1], "
                        "group_by: [service]"))
    assert (rule.aggregation, rule.kind, rule.native_schema, rule.native_max_buckets,
            rule.quantiles, rule.quantile_labels, rule.buckets, rule.bucketed,
            rule.classic) == (
        "quantiles", "gauge", 5, 320, (0.0, 0.5, 0.9, 0.99, 0.999, 1.0),
        ("0", "0.5", "0.9", "0.99", "0.999", "1"), (), True, False)
    assert all(type(q) is float for q in rule.quantiles)
    assert rule.signature == ("quantiles", "v", ("native/5",), ("service",))


def test_a_quantiles_rule_takes_native_for_its_window_histogram():
    rule = loaded(rules(f"{QUANT}, quantiles: [0.5], native: {{schema: 7, max_buckets: 300}}"))
    assert (rule.native_schema, rule.native_max_buckets) == (7, 300)
    assert loaded(rules(f"{QUANT}, quantiles: [0.5], native: true")).native_schema == 5


def test_the_brief_s_rules_load_as_written():
    text = """\
rules:
  - id: http-latency-native
    name: http_request_latency_ms
    kind: counter
    query: 'http.path:\\/api\\/*'
    aggregation: histogram
    field: http.duration_ms
    native: true
    group_by: [service]
  - id: http-latency-quantiles
    name: http_request_latency_quantiles_ms
    kind: gauge
    query: 'http.path:\\/api\\/*'
    aggregation: quantiles
    field: http.duration_ms
    quantiles: [0.5, 0.9, 0.99]
    native: {schema: 5}
    group_by: [service]
"""
    (native, quantiles), problems = load_text(text, "f.yaml")
    assert problems == []
    assert (native.native_schema, native.buckets, native.line) == (3, (), 2)
    assert (quantiles.native_schema, quantiles.quantiles, quantiles.quantile_labels,
            quantiles.line) == (5, (0.5, 0.9, 0.99), ("0.5", "0.9", "0.99"), 10)


# --- problems --------------------------------------------------------------------------------


def test_a_histogram_needs_buckets_or_native():
    missing = ("f.yaml:2:5: rule 'h': aggregation 'histogram' needs 'buckets' (classic "
               "bounds) or 'native' (exponential buckets), or both [MISSING_BUCKETS]")
    assert found(rules(HIST)) == [missing]
    # native: false is no native buckets: the histogram would have none at all
    assert found(rules(f"{HIST}, native: false")) == [missing]
    # a bad native value is that problem alone
    text = rules(f"{HIST}, native: 1")
    assert [p.split(" [")[-1] for p in found(text)] == ["INVALID_NATIVE]"]


@pytest.mark.parametrize("native, token, says", [
    ("{schema: 9}", "9", "schema must be a whole number from -4 to 8, got 9"),
    ("{schema: -5}", "-5", "schema must be a whole number from -4 to 8, got -5"),
    ("{schema: '3'}", "'3'", "schema must be a whole number from -4 to 8, got '3'"),
    ("{schema: 2.0}", "2.0", "schema must be a whole number from -4 to 8, got 2.0"),
    ("{schema: true}", "true", "schema must be a whole number from -4 to 8, got true"),
    ("{schema: null}", "null", "schema must be a whole number from -4 to 8, got null"),
    ("{schema: [3]}", "[3]", "schema must be a whole number from -4 to 8, got list"),
    ("{max_buckets: 0}", "0", "max_buckets must be a whole number from 1 to 1000, got 0"),
    ("{max_buckets: 1001}", "1001",
     "max_buckets must be a whole number from 1 to 1000, got 1001"),
    ("{max_buckets: .inf}", ".inf",
     "max_buckets must be a whole number from 1 to 1000, got inf"),
    ("yes", "yes", "expected true, false or a mapping, got string"),
    ("3", "3", "expected true, false or a mapping, got integer"),
    ("[3]", "[3]", "expected true, false or a mapping, got list"),
    ("null", "null", "expected true, false or a mapping, got null"),
    (f"{{schema: {'1' * 300}}}", "1", f"schema must be a whole number from -4 to 8, got "
                                     f"{'1' * 20}… (300 characters)"),
])
def test_a_bad_native_value_is_refused_at_its_node(native, token, says):
    text = rules(f"{HIST}, native: {native}")
    assert found(text) == [f"{at(text, token, 'native:')}: rule 'h': native: {says}{NATIVE_FORM}"]


def test_unknown_native_keys_are_refused_with_a_suggestion():
    text = rules(f"{HIST}, native: {{shema: 3, max_bucket: 9, zero_threshold: 0}}")
    assert found(text) == [
        f"{at(text, 'shema', 'native')}: rule 'h': native: unknown key 'shema' (did you mean "
        "'schema'?) [UNKNOWN_KEY]",
        f"{at(text, 'max_bucket', 'native')}: rule 'h': native: unknown key 'max_bucket' "
        "(did you mean 'max_buckets'?) [UNKNOWN_KEY]",
        f"{at(text, 'zero_threshold', 'native')}: rule 'h': native: unknown key "
        "'zero_threshold' (expected schema or max_buckets) [UNKNOWN_KEY]"]


def test_every_problem_of_a_native_mapping_is_reported_on_its_own_line():
    text = """\
rules:
  - id: h
    name: lat
    kind: counter
    query: "*"
    aggregation: histogram
    field: v
    native:
      schema: 12
      max_buckets: -1
      schema: 3
"""
    assert found(text) == [
        f"f.yaml:9:15: rule 'h': native: schema must be a whole number from -4 to 8, got 12"
        f"{NATIVE_FORM}",
        f"f.yaml:10:20: rule 'h': native: max_buckets must be a whole number from 1 to "
        f"1000, got -1{NATIVE_FORM}",
        "f.yaml:11:7: rule 'h': key 'schema' appears more than once [DUPLICATE_KEY]"]


def test_quantiles_always_keep_a_native_histogram():
    text = rules(f"{QUANT}, quantiles: [0.5], native: false")
    assert found(text) == [
        f"{at(text, 'false', 'native')}: "
        "rule 'q': native: aggregation 'quantiles' always estimates from a "
        "native histogram: leave 'native' out or give its resolution, a mapping of schema "
        "(-4 to 8) and max_buckets (1 to 1000) [INVALID_NATIVE]"]


def test_a_quantile_is_a_number_as_written():
    text = rules(f"{QUANT}, quantiles: [-0.0, 1e-1]")
    assert found(text) == [
        f"{at(text, '1e-1', 'quantiles')}: rule 'q': quantiles: quantile '1e-1' is not a "
        "number from 0 to 1 (YAML reads an exponent without a dot as text: write 0.1 or "
        "1.0e-1) [INVALID_QUANTILES]"]
    rule = loaded(rules(f"{QUANT}, quantiles: [-0.0, 0.50, 1]"))
    assert (rule.quantiles, rule.quantile_labels) == ((0.0, 0.5, 1.0), ("0", "0.5", "1"))
    assert str(rule.quantiles[0]) == "0.0"  # not -0.0
    text = rules(f"{QUANT}, quantiles: [1, 0]")
    assert found(text) == [
        f"{at(text, '0', '1, ')}: rule 'q': quantiles: quantiles must be strictly increasing "
        "(0 after 1) [INVALID_QUANTILES]"]


def test_a_quantiles_rule_needs_quantiles_and_a_field_and_is_a_gauge():
    assert found(rules(QUANT)) == [
        "f.yaml:2:5: rule 'q': aggregation 'quantiles' needs 'quantiles', a list of "
        "quantiles from 0 to 1 (e.g. [0.5, 0.9, 0.99]) [MISSING_QUANTILES]"]
    assert found(rules('id: q, name: m, kind: gauge, query: "*", aggregation: quantiles, '
                       'quantiles: [0.5]')) == [
        "f.yaml:2:5: rule 'q': aggregation 'quantiles' needs 'field', the numeric log field "
        "it aggregates [MISSING_FIELD]"]
    text = rules('id: q, name: m, kind: counter, query: "*", aggregation: quantiles, '
                 'field: v, quantiles: [0.5]')
    assert found(text) == [
        f"{at(text, 'quantiles', 'aggregation')}: "
        "rule 'q': aggregation: a counter cannot use aggregation 'quantiles' "
        "(allowed: count, sum, histogram) [AGGREGATION_KIND_MISMATCH]"]


@pytest.mark.parametrize("quantiles, token, says", [
    ("[]", "[]", "expected a non-empty list of numbers from 0 to 1, got an empty list"),
    ("0.5", "0.5", "expected a non-empty list of numbers from 0 to 1, got number"),
    ("{a: 1}", "{a", "expected a non-empty list of numbers from 0 to 1, got mapping"),
    ("[0.5, 1.5]", "1.5", "quantile 1.5 is not a number from 0 to 1"),
    ("[-0.1]", "-0.1", "quantile -0.1 is not a number from 0 to 1"),
    ("['0.5']", "'0.5'",
     "quantile '0.5' is not a number from 0 to 1 (a string: write it without quotes)"),
    ("[true]", "true", "quantile true is not a number from 0 to 1"),
    ("[.nan]", ".nan", "quantile nan is not a number from 0 to 1"),
    ("[null]", "null", "quantile null is not a number from 0 to 1"),
    ("[[0.5]]", "[0.5]", "quantile list is not a number from 0 to 1"),
    ("[0.5, 0.9, 0.5]", "0.5]", "quantile 0.5 is listed twice"),
    ("[0.5, 0.50]", "0.50", "quantile 0.5 is listed twice"),
    ("[0, 0.0]", "0.0", "quantile 0.0 is listed twice"),
    ("[0.9, 0.5]", "0.5", "quantiles must be strictly increasing (0.5 after 0.9)"),
    (f"[{'9' * 4000}]", "9", f"quantile {'9' * 20}… (4000 characters) is not a number from 0 "
                             "to 1"),
    (f"['{'x' * 41}']", "'x", "quantile a string of 41 characters is not a number from 0 to 1"),
    ('["é\\u0000"]', '"é', "quantile 'é\\x00' is not a number from 0 to 1"),
])
def test_bad_quantiles_are_refused_at_the_offending_node(quantiles, token, says):
    text = rules(f"{QUANT}, quantiles: {quantiles}")
    assert found(text) == [
        f"{at(text, token, 'quantiles: ')}: rule 'q': quantiles: {says} [INVALID_QUANTILES]"]


def test_at_most_twenty_quantiles():
    many = [round(i / 100, 2) for i in range(1, 22)]
    text = rules(f"{QUANT}, quantiles: {many}")
    assert found(text) == [
        f"{at(text, '[', 'quantiles: ')}: "
        "rule 'q': quantiles: at most 20 quantiles, got 21 [INVALID_QUANTILES]"]
    assert loaded(rules(f"{QUANT}, quantiles: {many[:20]}")).quantiles == tuple(many[:20])


def test_native_and_quantiles_elsewhere_are_ignored_with_a_warning():
    text = rules('id: s, name: m, kind: counter, query: "*", aggregation: sum, field: v, '
                 'native: {schema: 99}, quantiles: [2]',
                 f"{HIST}, native: true, quantiles: [0.5]")
    (plain, hist), problems = load_text(text, "f.yaml")
    assert [str(p) for p in problems] == [
        f"{at(text, 'native', 'field')}: rule 's': warning 'native' is ignored by aggregation "
        "'sum' [UNUSED_KEY]",
        f"{at(text, 'quantiles', 'field')}: rule 's': warning 'quantiles' is ignored by "
        "aggregation 'sum' [UNUSED_KEY]",
        f"{at(text, 'quantiles', 'field', line=3)}: "
        "rule 'h': warning 'quantiles' is ignored by aggregation 'histogram' "
        "[UNUSED_KEY]"]
    assert (plain.native_schema, plain.quantiles) == (None, ())
    assert (hist.native_schema, hist.quantiles, hist.quantile_labels) == (3, (), ())


def test_an_unknown_aggregation_names_quantiles_among_the_allowed():
    text = rules('id: a, name: m, kind: gauge, query: "*", aggregation: p99, field: v')
    assert found(text) == [
        f"{at(text, 'p99', 'aggregation')}: "
        "rule 'a': aggregation: aggregation 'p99' must be one of count, sum, "
        "avg, min, max, histogram, quantiles [INVALID_AGGREGATION]"]


def test_quantile_is_a_reserved_label_of_quantiles_rules():
    text = rules(f"{QUANT}, quantiles: [0.5], group_by: [service, quantile]",
                 f"{QUANT}, quantiles: [0.5], labels: {{x: y}}".replace("{x: y}",
                                                                         "{quantile: p50}"))
    assert found(text) == [
        f"{at(text, '[service', 'group_by')}: rule 'q': group_by: label 'quantile' is "
        "reserved for the quantile of a quantile gauge [LABEL_CLASH]",
        f"{at(text, '{quantile', 'labels', line=3)}: "
        "rule 'q': labels: label 'quantile' is reserved for the quantile of a "
        "quantile gauge [LABEL_CLASH]"]
    # `le` is no label of a quantile gauge; `quantile` none of a histogram
    assert found(rules(f"{QUANT}, quantiles: [0.5], group_by: [le]")) == []
    assert found(rules(f"{HIST}, native: true, group_by: [quantile]")) == []


def test_le_stays_reserved_for_a_native_histogram():
    text = rules(f"{HIST}, native: true, group_by: [le]")
    assert found(text) == [
        f"{at(text, '[le]', 'group_by')}: "
        "rule 'h': group_by: label 'le' is reserved for histogram buckets "
        "[LABEL_CLASH]"]


def _labelled(spec: str, count: int) -> str:
    labels = ", ".join(f"l{i}: x" for i in range(count))
    return rules(f"{spec}, labels: {{{labels}}}")


def test_too_many_labels_counts_le_for_classic_buckets_and_quantile_for_quantiles():
    # 29 static labels + one for the group-by (or overflow) label: 30, the limit
    assert found(_labelled(f"{HIST}, native: true", 29)) == []
    too_many = ("f.yaml:2:5: rule '{}': its series would carry 31 labels (static labels, "
                "group_by fields and a classic histogram's le or a quantile gauge's "
                "quantile); the limit is 30 [TOO_MANY_LABELS]")
    assert found(_labelled(f"{HIST}, buckets: [1]", 29)) == [too_many.format("h")]
    assert found(_labelled(f"{HIST}, buckets: [1], native: true", 29)) == [
        too_many.format("h")]
    assert found(_labelled(f"{QUANT}, quantiles: [0.5]", 29)) == [too_many.format("q")]
    assert found(_labelled(f"{QUANT}, quantiles: [0.5]", 28)) == []


def test_only_a_classic_histogram_writes_suffixed_names():
    # l2m → l2m_bucket, l2m_sum, l2m_count: l2m's own names, but only with classic buckets
    assert found(rules(HIST.replace("name: lat", "name: l2m") + ", native: true")) == []
    assert found(rules(QUANT.replace("name: lat_q", "name: l2m") + ", quantiles: [0.5]")) == []
    text = rules(HIST.replace("name: lat", "name: l2m") + ", buckets: [1]")
    assert found(text) == [
        f"{at(text, 'l2m', 'name')}: rule 'h': name: 'l2m' is a histogram, whose series would be "
        "l2m_bucket, l2m_sum and l2m_count: metric names starting with l2m_ are l2m's own "
        "(l2m_input_logs_total, l2m_late_logs_total, …), written to the same metrics topic "
        "[RESERVED_NAME]"]


def test_problems_are_positioned_by_load_rules_too(tmp_path):
    path = tmp_path / "r.yaml"
    text = rules(f"{HIST}, native: {{schema: 9}}")
    path.write_text(text)
    from l2m.errors import RuleValidationError

    with pytest.raises(RuleValidationError) as err:
        load_rules([path])
    assert [(p.code, p.line, p.column, p.rule_id, p.key) for p in err.value.problems] == [
        ("INVALID_NATIVE", 2, int(at(text, "9", "schema").split(":")[2]), "h", "native")]


# --- series identity -------------------------------------------------------------------------


def _codes(*specs: str) -> list[str]:
    _, problems = load_text(rules(*specs), "f.yaml")
    return [f"{p.code} {p.rule_id}: {p.message}" for p in problems]


def test_a_native_histogram_writes_only_its_name():
    native = "id: n, name: lat, kind: counter, query: '*', aggregation: histogram, field: v, " \
             "native: true"
    for suffix in HISTOGRAM_SUFFIXES:
        assert _codes(native, f"id: c, name: lat{suffix}, kind: counter, query: '*', "
                              "aggregation: count") == []
    assert _codes(native + ", buckets: [1]", "id: c, name: lat_count, kind: counter, "
                  "query: '*', aggregation: count") == [
        "HISTOGRAM_NAME_COLLISION c: 'lat_count' is the _count series of the histogram 'lat' "
        "(rule 'n' at f.yaml:2)"]


def test_classic_and_native_histograms_of_one_name_are_one_type():
    native = "name: lat, kind: counter, query: '*', aggregation: histogram, field: v"
    assert _codes(f"id: a, {native}, native: true", f"id: b, {native}, buckets: [1]") == [
        "SERIES_COLLISION b: metric 'lat' can write the same series as rule 'a' at f.yaml:2: "
        "both can emit labels {} (no labels) for the same target account; rename one, add a "
        "distinguishing static label, or give it another target_account"]
    assert _codes(f"id: a, {native}, native: true",
                  "id: b, name: lat, kind: counter, query: '*', aggregation: count") == [
        "METRIC_TYPE_CONFLICT b: metric 'lat' is a counter here and a counter histogram in "
        "rule 'a' at f.yaml:2"]


def test_a_quantiles_rule_is_a_gauge_whose_series_always_carry_quantile():
    q = "name: m, kind: gauge, query: '*', aggregation: quantiles, field: v, quantiles: [0.5]"
    gauge = "name: m, kind: gauge, query: '*', aggregation: max, field: v"
    # a plain gauge of the name never writes `quantile`: no series in common
    assert _codes(f"id: a, {q}", f"id: b, {gauge}") == []
    assert _codes(f"id: a, {q}", f"id: b, {gauge}, group_by: [service]") == []
    # …unless it can: from its group-by or a static label of any value
    collide = ("SERIES_COLLISION b: metric 'm' can write the same series as rule 'a' at "
               "f.yaml:2: both can emit labels {} for the same target account; rename one, "
               "add a distinguishing static label, or give it another target_account")
    assert _codes(f"id: a, {q}", f"id: b, {gauge}, group_by: [quantile]") == [
        collide.format("{quantile}")]
    assert _codes(f"id: a, {q}", f"id: b, {gauge}, labels: {{quantile: '0.5'}}") == [
        collide.format("{quantile}")]
    assert _codes(f"id: a, {gauge}, labels: {{quantile: x}}", f"id: b, {q}") == [
        collide.format("{quantile}")]
    assert _codes(f"id: a, {q}", f"id: b, {q}, labels: {{env: prod}}") == []
    assert _codes(f"id: a, {q}, group_by: [env]", f"id: b, {q}, labels: {{env: prod}}") == [
        collide.format("{env, quantile}")]
    assert _codes(f"id: a, {q}", "id: b, name: m, kind: counter, query: '*', "
                                 "aggregation: count") == [
        "METRIC_TYPE_CONFLICT b: metric 'm' is a counter here and a gauge in rule 'a' at "
        "f.yaml:2"]


def _brute_force(made: list[Rule]) -> list[tuple[str, str, str]]:
    """Every colliding pair by checking every pair (the definition), as (code, later,
    earlier); only classic histograms write the suffixed names."""
    entries = []
    for rule in made:
        entries.append((rule, rule.name, None))
        if rule.classic:
            entries += [(rule, rule.name + s, s) for s in HISTOGRAM_SUFFIXES]
    out = []
    for i, (later, name, later_suffix) in enumerate(entries):
        for earlier, other, earlier_suffix in entries[:i]:
            if other != name or earlier.id == later.id:
                continue
            problem = _pair(earlier, earlier_suffix, later, later_suffix)
            if problem is not None:
                out.append((problem.code, later.id, earlier.id))
    return sorted(out)


def test_the_indexed_search_agrees_with_every_pair_for_native_and_quantile_rules():
    seed = 2026_12_02
    print("seed", seed)
    rng = random.Random(seed)
    for _ in range(300):
        made = []
        for i in range(rng.randrange(2, 14)):
            form = rng.choice(["count", "gauge", "classic", "native", "both", "quantiles"])
            static = {n: rng.choice("ab") for n in rng.sample(["team", "quantile", "tier"],
                                                                rng.randrange(0, 3))}
            groups = rng.sample(["team", "quantile", "service"], rng.randrange(0, 3))
            if form == "quantiles":  # its own label is reserved (the loader refuses it)
                static.pop("quantile", None)
                groups = [g for g in groups if g != "quantile"]
            made.append(Rule(
                id=f"r{i}", name=rng.choice(["m", "m_bucket", "m_count", "n"]),
                kind="gauge" if form in ("gauge", "quantiles") or rng.random() < 0.2
                else "counter",
                query="*", aggregation={"count": "count", "gauge": "max",
                                        "quantiles": "quantiles"}.get(form, "histogram"),
                field=None if form == "count" else "v",
                buckets=(1.0,) if form in ("classic", "both") else (),
                bucket_labels=("1",) if form in ("classic", "both") else (),
                native_schema=3 if form in ("native", "both") else 5 if form == "quantiles"
                else None,
                quantiles=(0.5,) if form == "quantiles" else (),
                group_by=tuple(groups), labels=tuple(sorted(static.items()))))
        got = sorted((p.code, p.rule_id, p.message.split("rule '")[1].split("'")[0])
                     for p in collisions(made))
        assert got == _brute_force(made)


# --- the listing -----------------------------------------------------------------------------


def test_the_listing_names_each_histogram_form():
    text = rules(f"{HIST}, buckets: [1]",
                 f"{HIST.replace('id: h', 'id: n').replace('lat', 'lat_n')}, native: true",
                 f"{HIST.replace('id: h', 'id: b').replace('lat', 'lat_b')}, buckets: [1], "
                 "native: true",
                 f"{HIST.replace('id: h', 'id: g').replace('lat', 'lat_g')}, buckets: [1]"
                 .replace("counter", "gauge"),
                 f"{HIST.replace('id: h', 'id: gn').replace('lat', 'lat_gn')}, native: true"
                 .replace("counter", "gauge"),
                 f"{QUANT}, quantiles: [0.5]",
                 "id: c, name: c, kind: counter, query: '*', aggregation: count",
                 "id: x, name: x, kind: gauge, query: '*', aggregation: max, field: v")
    made, problems = load_text(text, "f.yaml")
    assert problems == []
    assert [(r.id, shown_type(r)) for r in made] == [
        ("h", "histogram"), ("n", "native histogram"), ("b", "classic+native histogram"),
        ("g", "gauge histogram"), ("gn", "gauge native histogram"), ("q", "quantiles"),
        ("c", "counter"), ("x", "gauge")]


def test_validate_accepts_the_shipped_latency_rules_and_lists_them(capsys):
    assert main(["validate", str(ROOT / "rules" / "latency.yaml"), "--list"]) == 0
    assert capsys.readouterr().out == (
        "ok: 3 rules in 1 file(s)\n"
        "http-latency-native\tnative histogram\thttp_request_latency_ms\tmilliseconds\t"
        "API request latency in milliseconds (native histogram)\n"
        "http-latency-quantiles\tquantiles\thttp_request_latency_quantiles_ms\tmilliseconds\t"
        "API request latency quantiles per one-minute window, in milliseconds\n"
        "http-response-size\tgauge native histogram\thttp_response_size_bytes\tbytes\t"
        "HTTP response sizes per one-minute window, in bytes\n")


def test_the_shipped_latency_rules_are_what_their_comments_say():
    by_id = {r.id: r for r in load_rules([ROOT / "rules" / "latency.yaml"]).rules}
    assert {i: (r.kind, r.aggregation, r.native_schema, r.native_max_buckets, r.buckets,
                r.quantile_labels, r.group_by) for i, r in by_id.items()} == {
        "http-latency-native": ("counter", "histogram", 3, 160, (), (), ("service",)),
        "http-latency-quantiles": ("gauge", "quantiles", 5, 320, (), ("0.5", "0.9", "0.99"),
                                   ("service",)),
        "http-response-size": ("gauge", "histogram", 2, 80, (), (), ("service",)),
    }


# --- snapshots -------------------------------------------------------------------------------

CLASSIC_EXAMPLES = ("web.yaml", "payments.yaml", "platform.yaml")


def test_the_example_classic_rules_snapshot_as_before_native_histograms(monkeypatch):
    # Pinned with the snapshot code of commit 42e7103 (before native and quantiles were
    # stored): rule sets without them keep their bytes, so their versions — and the replay of
    # a batch planned before an upgrade — are unchanged.
    monkeypatch.chdir(ROOT)  # the rules' file names are part of the snapshot
    made = load_rules([Path("rules") / name for name in CLASSIC_EXAMPLES]).rules
    data = snapshot(made)
    assert (len(data), version_of(data)) == (7136, "568eca5f08f4dc39")
    assert hashlib.sha256(data).hexdigest() == (
        "568eca5f08f4dc39b42a82bcdaac44b21daa427f8c55f54ea77aa782fd382014")
    assert b"native" not in data and b"quantile" not in data


def test_native_and_quantile_rules_round_trip_through_a_snapshot():
    text = rules(f"{HIST}, native: {{schema: -2, max_buckets: 7}}, buckets: [0.5, 1]",
                 f"{QUANT}, quantiles: [0, 0.25, 1], native: {{max_buckets: 999}}",
                 f"{HIST.replace('id: h', 'id: d').replace('lat', 'lat_d')}, native: true")
    made, problems = load_text(text, "f.yaml")
    assert problems == []
    data = snapshot(made)
    stored = {r["id"]: r for r in orjson.loads(data)["rules"]}
    assert {i: {k: v for k, v in r.items() if k in ("native_schema", "native_max_buckets",
                                                     "quantiles", "quantile_labels")}
            for i, r in stored.items()} == {
        "d": {"native_schema": 3},
        "h": {"native_max_buckets": 7, "native_schema": -2},
        "q": {"native_max_buckets": 999, "native_schema": 5, "quantile_labels": ["0", "0.25",
                                                                                  "1"],
              "quantiles": [0.0, 0.25, 1.0]},
    }
    assert all(list(r) == sorted(r) for r in stored.values())  # canonical: keys sorted
    restored = restore(data)
    assert sorted(restored, key=lambda r: r.id) == sorted(made, key=lambda r: r.id)
    assert [(r.id, r.signature) for r in restored] == [
        ("d", ("histogram", "v", ("native/3",), ())),
        ("h", ("histogram", "v", ("0.5", "1", "native/-2"), ())),
        ("q", ("quantiles", "v", ("native/5",), ()))]
    assert snapshot(restored) == data


def test_a_snapshot_without_the_new_fields_restores_their_defaults():
    data = snapshot(load_rules([ROOT / "rules" / "web.yaml"]).rules)
    for rule in restore(data):
        assert (rule.native_schema, rule.native_max_buckets, rule.quantiles,
                rule.quantile_labels) == (None, 160, (), ())



# --- the docs --------------------------------------------------------------------------------


def test_the_resolution_table_of_the_docs_is_exphist_s():
    from l2m.semantics.exphist import growth_factor, relative_error_bound

    text = (ROOT / "docs" / "rules.md").read_text()
    section = text[text.index("## Distributions"):text.index("## Series identity")]
    rows = [line.split(" | ") for line in section.splitlines()
            if line.startswith("| ") and line[2].isdigit()]
    assert [(int(r[0][2]), r[1], r[2], r[3].rstrip(" |")) for r in rows] == [
        (s, f"{growth_factor(s):.4f}", f"{100 * relative_error_bound(s):.2f}%",
         f"{100 * (growth_factor(s) - 1):.2f}%") for s in range(9)]


def test_a_snapshot_with_native_or_quantile_rules_is_format_2_and_others_stay_format_1():
    # A build that reads format 1 only refuses format 2 with a RuleSnapshotError instead of
    # dropping `native` and restoring a native histogram as a classic one.
    native, problems = load_text(rules(f"{HIST}, native: true, buckets: [1]"), "f.yaml")
    assert problems == []
    assert orjson.loads(snapshot(native))["format"] == 2
    assert list(restore(snapshot(native))) == list(native)
    classic = load_rules([ROOT / "rules" / "web.yaml"]).rules
    assert orjson.loads(snapshot(classic))["format"] == 1


def test_a_build_without_native_buckets_restarts_a_native_series_instead_of_reading_it():
    # Rolled back to, an older build restores the rule as its classic part: the stored
    # signature (the native schema among the bounds) is not that rule's, so the series
    # restarts instead of its native rows being summed into +Inf, _sum and _count.
    from l2m.state.counters import same_signature

    both, problems = load_text(rules(f"{HIST}, native: true, buckets: [1, 10]"), "f.yaml")
    assert problems == []
    stored = [list(part) if isinstance(part, tuple) else part for part in both[0].signature]
    classic = dataclasses.replace(both[0], native_schema=None)
    assert stored[2] == ["1", "10", "native/3"]
    assert same_signature(stored, both[0])
    assert not same_signature(stored, classic)
    # the comparison of the builds before native buckets: its four elements, in order
    assert tuple(stored[2]) != classic.signature[2]


def test_a_classic_and_a_native_gauge_histogram_of_one_name_are_two_metric_types():
    # remote write sends the first as TYPE histogram, the second as gaugehistogram: one
    # family name keeps one type
    gauge = HIST.replace("counter", "gauge")
    assert found(rules(f"{gauge}, buckets: [1], labels: {{x: '1'}}",
                       f"{gauge.replace('id: h', 'id: n')}, native: true, "
                       f"labels: {{x: '2'}}")) == [
        "f.yaml:3:1: rule 'n': name: metric 'lat' is a gauge native histogram here and a "
        "gauge histogram in rule 'h' at f.yaml:2 [METRIC_TYPE_CONFLICT]"]
    assert found(rules(f"{gauge}, buckets: [1], native: true, labels: {{x: '1'}}",
                       f"{gauge.replace('id: h', 'id: n')}, native: true, "
                       f"labels: {{x: '2'}}")) == []
