"""Series caps (issue 20, deliverable 1) without a JVM: which new series a state domain
admits, where the others go, and how caps are configured — the job's `limits:`, an account's
overrides, a rule's `max_series` — and checked at load."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from l2m.config.loader import load_config
from l2m.engine.admission import (
    OVERFLOW_SERIES,
    Admission,
    Limit,
    RuleCaps,
    beyond_rule_caps,
    placement_shard,
    redirected,
    rule_caps,
)
from l2m.engine.partials import PARTIAL_ARROW, Partial, merge
from l2m.engine.samples import series_labels
from l2m.errors import RuleValidationError
from l2m.policy.limits import Limits, SeriesLimits
from l2m.rules.loader import load_rules, load_text
from tests.support.configs import KAFKA, config_error

RULES, _ = load_text("""\
rules:
  - {id: a1, name: req_total, kind: counter, query: "*", aggregation: count, group_by: [id],
     account: acme}
  - {id: a2, name: req_total, kind: counter, query: "*", aggregation: count, group_by: [id],
     labels: {via: a2}, account: acme}
  - {id: a3, name: other_total, kind: counter, query: "*", aggregation: count, group_by: [id],
     account: acme, max_series: 50}
  - {id: b1, name: req_total, kind: counter, query: "*", aggregation: count, group_by: [id],
     account: globex}
  - {id: free, name: free_total, kind: counter, query: "*", aggregation: count,
     group_by: [id], labels: {team: x}}
""")
BY_ID = {r.id: r for r in RULES}


def one(logs: int, ts: int = 0) -> Partial:
    return Partial(logs, logs, float(logs), Decimal(logs), None, None, ts)


def test_a_rule_cap_admits_in_key_order_and_sends_the_rest_to_the_overflow_series():
    admission = Admission({"free": RuleCaps(2)}, {})
    rows = [("1:c", "", one(1, 30)), ("1:a", "", one(2, 10)), ("1:b", "", one(3, 20)),
            ("1:c", "", one(4, 40))]
    out = redirected(rows, {}, admission, "free")
    assert [(name, p.matches) for name, _, p in out] == [
        ("1:a", 2), ("1:b", 3), (OVERFLOW_SERIES, 1), (OVERFLOW_SERIES, 4)]
    assert admission.refused == {("free", Limit.RULE): [5, 40]}


def test_known_series_keep_counting_past_the_cap():
    admission = Admission({"free": RuleCaps(1)}, {"free": 1})
    out = redirected([("1:a", "", one(1)), ("1:z", "", one(1))], {"1:a": []}, admission,
                     "free")
    assert [name for name, _, _ in out] == ["1:a", OVERFLOW_SERIES]


def test_metric_and_account_caps_count_across_the_account_s_rules():
    caps = rule_caps(RULES, Limits(SeriesLimits(per_rule=10, per_metric=3, per_account=4)))
    admission = Admission(caps, {"a1": 2, "a3": 1})
    assert admission.admit("a2") is None  # req_total of acme: 3 of 3
    assert admission.admit("a2") is Limit.METRIC
    assert admission.admit("a3") is Limit.ACCOUNT  # acme: 4 of 4
    assert admission.admit("b1") is None  # another account: its own domains
    assert admission.admit("free") is None  # no account: capped per rule only


def test_caps_come_from_the_job_an_account_override_and_the_rule():
    limits = Limits(SeriesLimits(100, 200, 300), (("acme", (("per_account", 1000),
                                                             ("per_rule", 5))),))
    caps = rule_caps(RULES, limits)
    assert caps["a1"] == RuleCaps(5, 200, 1000, "acme", "req_total")
    assert caps["a3"] == RuleCaps(50, 200, 1000, "acme", "other_total")
    assert caps["b1"] == RuleCaps(100, 200, 300, "globex", "req_total")
    assert caps["free"] == RuleCaps(100)


def test_zero_is_no_cap():
    admission = Admission(rule_caps(RULES, Limits(SeriesLimits(0, 0, 0))), {"a1": 10**9})
    assert admission.admit("a1") is None


def test_every_rule_of_an_account_shares_a_shard_and_the_overflow_series_is_labelled():
    assert {placement_shard(BY_ID[r], 8) for r in ("a1", "a2", "a3")} == \
        {placement_shard(BY_ID["a1"], 8)}
    assert series_labels(BY_ID["a2"], OVERFLOW_SERIES) == [("l2m_overflow", "true"),
                                                           ("via", "a2")]


def test_max_series_must_be_a_positive_whole_number():
    _, problems = load_text("rules:\n  - {id: x, name: x_total, kind: counter, query: '*', "
                            "aggregation: count, max_series: 0}\n")
    assert [(p.code, p.key) for p in problems] == [("INVALID_TYPE", "max_series")]


def test_max_series_may_not_exceed_the_account_s_cap(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("rules:\n  - {id: x, name: x_total, kind: counter, query: '*', "
                    "aggregation: count, account: acme, max_series: 5000}\n")
    with pytest.raises(RuleValidationError) as err:
        load_rules([path], limits=Limits(SeriesLimits(per_account=1000)))
    assert [(p.code, p.line, p.key) for p in err.value.problems] == [
        ("MAX_SERIES_ABOVE_ACCOUNT", 2, "max_series")]
    assert "account 'acme''s cap of 1000 series" in str(err.value.problems[0])
    raised = Limits(SeriesLimits(per_account=1000), (("acme", (("per_account", 5000),)),))
    assert load_rules([path], limits=raised).rules[0].max_series == 5000


def test_the_overflow_label_is_reserved():
    _, problems = load_text("rules:\n  - {id: x, name: x_total, kind: counter, query: '*', "
                            "aggregation: count, labels: {l2m_overflow: 'no'}}\n")
    assert [p.code for p in problems] == ["LABEL_CLASH"]


def test_the_job_config_reads_caps_and_account_overrides(tmp_path: Path):
    path = tmp_path / "job.yaml"
    path.write_text(KAFKA + "limits:\n  max_series_per_rule: 7\n  max_series_per_account: 0\n"
                    "  accounts:\n    acme: {max_series_per_metric: 9}\n")
    limits = load_config(path).limits.series
    assert limits.for_account("acme") == SeriesLimits(7, 9, 0)
    assert limits.for_account("globex") == SeriesLimits(7, 20_000, 0)


@pytest.mark.parametrize(("text", "message"), [
    ("  max_series_per_rule: -1\n", "limits.max_series_per_rule"),
    ("  accounts:\n    acme: {max_series: 9}\n", "unknown key 'max_series'"),
    ("  accounts:\n    acme: {max_series_per_rule: x}\n", "must be a whole number"),
    ("  accounts: [acme]\n", "expected a mapping of account to its caps"),
])
def test_bad_caps_in_the_job_config_are_one_clear_line(tmp_path, text, message):
    error = config_error(tmp_path, KAFKA + "limits:\n" + text)
    assert message in error and "\n" not in error


def test_a_series_carries_at_most_30_labels():
    fields = ", ".join(f"f{i}" for i in range(29))
    rule = ("rules:\n  - {{id: x, name: x_total, kind: counter, query: '*', aggregation: count, "
            "group_by: [{}]{}}}\n")
    assert load_text(rule.format(fields, ""))[1] == []
    _, problems = load_text(rule.format(fields, ", labels: {a: '1', b: '2'}"))
    assert [(p.code, p.line) for p in problems] == [("TOO_MANY_LABELS", 2)]
    assert "would carry 31 labels" in problems[0].message


def _reference_beyond(table, caps):
    """beyond_rule_caps as first written, row by row in Python (the specification)."""
    rules = table.column("rule").to_pylist()
    windows = table.column("window").to_pylist()
    names = table.column("series").to_pylist()
    groups: dict = {}
    for rule, window, name in zip(rules, windows, names, strict=True):
        if rule in caps and name != OVERFLOW_SERIES:
            groups.setdefault((rule, window), set()).add(name)
    beyond = set()
    for (rule, window), seen in groups.items():
        beyond.update((rule, window, n) for n in sorted(seen)[caps[rule]:])
    renamed = [OVERFLOW_SERIES if (r, w, n) in beyond else n
               for r, w, n in zip(rules, windows, names, strict=True)]
    return merge([table.set_column(table.schema.get_field_index("series"), "series",
                                   pa.array(renamed, pa.string()))], unique=False)


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5, 6])
def test_beyond_rule_caps_in_arrow_decides_as_the_row_by_row_reference(seed):
    import random

    print(f"seed {seed}")
    rng = random.Random(seed)
    names = ["é", "z", "Z", "a b", "10", "9", "\U0001f600", OVERFLOW_SERIES, *map(str, range(40))]
    rows = []
    for _ in range(400):
        rule = rng.choice(["a", "b", "g", "free"])
        window = None if rule in ("a", "b") else rng.choice([0, 60_000])
        for le in ([None] if rule != "g" else ["1", "+Inf"]):
            rows.append({"rule": rule, "series": rng.choice(names), "le": le, "window": window,
                         "matches": 1, "n": 1, "sum": 1.0, "exact_sum": Decimal(1),
                         "exact_n": 1, "min": 1.0, "max": 1.0, "ts": rng.randrange(1000)})
    table = merge([pa.Table.from_pylist(rows, PARTIAL_ARROW)], unique=False)
    caps = {"a": 5, "b": 30, "g": rng.choice([1, 3, 50])}
    if seed > 4:  # no capped histogram: names are not counted by a group_by first
        del caps["g"]

    def ordered(t):
        return sorted(t.to_pylist(), key=lambda r: (r["rule"], r["window"] or -1, r["series"],
                                                    r["le"] or ""))
    assert ordered(beyond_rule_caps(table, caps)) == ordered(_reference_beyond(table, caps))
    assert beyond_rule_caps(table, {}) is table


def _reference_admitted(table, caps):
    """Backfill's admission as first written (the specification): one Admission per window,
    fed by redirected rule by rule in id order, the incoming overflow series' logs refused
    for the rule's first refusal (else its per-rule cap), the families merged in Python."""
    from l2m.engine.partials import partial_rows

    domains: dict = {}
    for rule_id, name, le, window, part in partial_rows(table):
        domains.setdefault(window, {}).setdefault(rule_id, []).append((name, le or "", part))
    out: dict = {}
    refused: dict = {}
    for window, by_rule in domains.items():
        admission = Admission(caps, {})
        for rule_id in sorted(by_rule):
            rows = by_rule[rule_id]
            for name, le, part in redirected(rows, {}, admission, rule_id):
                key = (rule_id, name, le, window)
                out[key] = out[key].merge(part) if key in out else part
            collapsed = [part for name, _, part in rows if name == OVERFLOW_SERIES]
            reasons = [limit for rule, limit in admission.refused if rule == rule_id]
            for part in collapsed:
                admission.count(rule_id, reasons[0] if reasons else Limit.RULE, part.matches,
                                part.ts)
        for key, (logs, _ts) in admission.refused.items():
            refused[key] = refused.get(key, 0) + logs
    return out, refused


@pytest.mark.parametrize("seed", range(12))
def test_admitted_table_decides_as_one_admission_per_window_series_by_series(seed):
    """Backfill's admission on Arrow (l2m.engine.admission.admitted_table) against the
    reference: the same rows kept, renamed and merged, the same logs refused per cap — with
    rule, metric and account caps meeting in one window, histograms (a row per bucket),
    incoming overflow series and uncapped rules."""
    import random

    from l2m.engine.admission import admitted_table
    from l2m.engine.partials import partial_rows

    print(f"seed {seed}")
    rng = random.Random(seed)
    names = ["é", "z", "Z", "a b", "10", "9", "\U0001f600", OVERFLOW_SERIES,
             *map(str, range(rng.choice([3, 12, 40])))]
    accounts = {"a1": "acme", "a2": "acme", "a3": "acme", "b1": "globex", "h": "acme",
                "free": None, "loose": None}
    metric = {"a1": "req", "a2": "req", "a3": "other", "b1": "req", "h": "req", "free": "f"}
    caps = {}
    for rule_id, account in accounts.items():
        if rule_id == "loose":
            continue  # no caps at all: never admitted or refused
        caps[rule_id] = RuleCaps(rng.choice([0, 1, 2, 4, 50]),
                                 rng.choice([0, 2, 5, 9]) if account else 0,
                                 rng.choice([0, 3, 8, 100]) if account else 0,
                                 account, metric[rule_id])
    rows = []
    for _ in range(rng.choice([30, 300])):
        rule = rng.choice(list(accounts))
        window = rng.choice([None, 0, 60_000, -60_000])
        logs = rng.randint(1, 5)
        for le in ([None] if rule != "h" else ["1", "+Inf"]):
            rows.append({"rule": rule, "series": rng.choice(names), "le": le, "window": window,
                         "matches": logs, "n": logs, "sum": float(logs),
                         "exact_sum": Decimal(logs), "exact_n": logs, "min": 1.0,
                         "max": float(logs), "ts": rng.randrange(1000)})
    table = merge([pa.Table.from_pylist(rows, PARTIAL_ARROW)], unique=False)
    got, refused = admitted_table(table, caps)
    expected, expected_refused = _reference_admitted(table, caps)
    assert {(r, n, le or "", w): p for r, n, le, w, p in partial_rows(got)} == expected
    assert refused == expected_refused
    assert admitted_table(table, {}) == (table, {})
