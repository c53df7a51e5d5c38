"""The read task's pipeline on Arrow (l2m/engine/pipeline.py, l2m/engine/preaggregate.py, the
account slices of l2m/engine/fanout.py), no JVM: exact decimal values as the reference takes them,
chunking that does not change a partial, account-scoped rules evaluated on their account's slice
exactly as with an account mask, and the rules' trip through a data-source option."""

from __future__ import annotations

import dataclasses
import decimal
import functools
import gc
import math
import pickle
import random
from decimal import Decimal
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from benchmarks.tenants import write_rules
from l2m.dev.generator import GeneratorConfig, LogGenerator, tenant
from l2m.engine.admission import rule_caps
from l2m.engine.fanout import MATCH_SCHEMA, FanOut, fan_out
from l2m.engine.parse import ParsePlan, parse_lines
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.pipeline import TaskPipeline, routing_from_option, routing_option
from l2m.engine.preaggregate import exact_values, preaggregate
from l2m.engine.routing import plan_for
from l2m.policy.limits import Limits, SeriesLimits
from l2m.query.nodes import FieldUse, KeywordEquals
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Aggregation, Kind, Rule
from tests.support.rulesets import SCOPED_RULES

ROOT = Path(__file__).resolve().parents[3]
_Q = Decimal(1).scaleb(-18)


def _expected_exact(v: float | None) -> Decimal | None:
    if v is None or not math.isfinite(v) or abs(v) >= 1e20:
        return None
    return Decimal(repr(v)).quantize(_Q, rounding=decimal.ROUND_HALF_UP,
                                     context=decimal.Context(prec=100))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_exact_values_are_the_shortest_digits_rounded_to_18_places(seed: int) -> None:
    print(f"seed {seed}")
    rng = random.Random(seed)
    values: list[float | None] = []
    for _ in range(20_000):
        v = rng.choice([1, -1]) * 10 ** rng.uniform(-22, 21)
        values.append(round(v, rng.randint(0, 6)) if rng.random() < 0.3 else v)
    values += [0.1, 0.2, 5e-19, -5e-19, 4.9999999999999996e-19, 1.5e-18, -0.0, 1e20,
               99999999999999983616.0, math.nan, math.inf, -math.inf, None, 5e-324]
    got = exact_values(pa.array(values, pa.float64())).to_pylist()
    assert got == [_expected_exact(v) for v in values]



def test_exact_values_of_repeated_values_are_converted_once_and_equal() -> None:
    """Most values repeat (status codes, byte counts): the distinct ones are converted and
    mapped back - nulls, NaN, ±0 and ±Inf included."""
    rng = random.Random(4)
    pool: list[float | None] = [0.1, 0.2, 1.0, 200.0, -0.0, 0.0, 0.30000000000000004, 1e20,
                                math.nan, math.inf, -math.inf, None, 5e-19, 1.5e-18, 19.131]
    values = [rng.choice(pool) for _ in range(5_000)]
    got = exact_values(pa.array(values, pa.float64())).to_pylist()
    assert got == [_expected_exact(v) for v in values]

def _rules() -> list[Any]:
    return list(_loaded_rules())


@functools.cache
def _loaded_rules() -> tuple[Any, ...]:
    # Read once for the file's tests (rules are frozen): each read took ~0.15 s.
    return (*load_rules([ROOT / "rules", ROOT / "benchmarks" / "rules.yaml"]).rules,
            *load_text(SCOPED_RULES)[0])


def _lines(n: int, seed: int) -> list[bytes]:
    gen = LogGenerator(GeneratorConfig(seed=seed, malformed_ratio=0.02,
                                       no_timestamp_ratio=0.02, late_ratio=0.05))
    return list(gen.lines(n))


def _sorted(table: pa.Table) -> list[dict[str, Any]]:
    """The partials in key order; the double sum (which depends on the order of additions:
    the exact sum is the one samples show) rounded to 9 significant digits."""
    rows = sorted(table.to_pylist(), key=lambda r: (r["rule"], r["series"], r["le"] or "",
                                                     r["window"] or 0))
    return [{**r, "sum": float(f"{r['sum']:.9g}")} for r in rows]


def rule_rows(fanout: FanOut, rule: Rule) -> pa.Table:
    """One match row per log the rule matches, the rule evaluated alone on the whole batch with
    its account scope as a mask: what the account slices of FanOut.table must equal."""
    assert rule.compiled is not None
    masks = [fanout._routed, fanout.matcher.mask(rule.compiled.root)]
    if rule.account is not None:
        masks.append(fanout.matcher.mask(KeywordEquals("account", rule.account)))
    condition = functools.reduce(pc.and_, masks)
    hit = np.flatnonzero(np.asarray(condition.to_numpy(zero_copy_only=False), bool))
    return fanout._shape_rows([(rule, hit)]).cast(MATCH_SCHEMA) if len(hit) \
        else MATCH_SCHEMA.empty_table()


def test_account_slices_match_exactly_what_an_account_mask_matches() -> None:
    routing = plan_for(_rules())
    batch = parse_lines(_lines(4000, seed=5), routing.plan)
    got = fan_out(batch, routing, with_status=False)
    masked = FanOut(batch, routing)  # every rule on the whole batch, scope as a mask
    expected = pa.concat_tables([rule_rows(masked, rule) for rule in routing.rules])
    key = ["rule", "series", "le", "window", "ts", "v"]
    assert got.num_rows == expected.num_rows > 20_000
    assert got.sort_by([(k, "ascending") for k in key]).equals(
        expected.sort_by([(k, "ascending") for k in key]))
    scoped = set(got.column("rule").to_pylist())
    assert {"acct-web", "acct-lat", "acct-sum"} <= scoped and "acct-none" not in scoped


@pytest.fixture(scope="module")
def tenant_rules(tmp_path_factory: pytest.TempPathFactory) -> list[Any]:
    """60 tenants' rules (benchmarks.tenants), read once for the three cases below."""
    folder = tmp_path_factory.mktemp("tenants")
    return list(load_rules([write_rules(folder / "tenants.yaml", 60)]).rules)


@pytest.mark.parametrize("accounts", [3, 40, 400])
def test_account_rows_are_the_per_rule_slices_rows_in_the_same_order(tenant_rules: list[Any],
                                                                    accounts: int) -> None:
    # The array path (each distinct query's hits once, every rule's share cut by binary
    # search) against the reference loop it replaces: a numpy call per (account, rule).
    # Tenants' rules share queries and shapes across accounts; a few accounts have rules and
    # no logs, most logs' accounts have no rules; some accounts have a broad query of their
    # own (a query of one rule), label values are cut, and histograms differ only by how
    # their bounds are written.
    own = "\n".join(
        f"  - {{id: own-{k}, name: own_total, kind: counter, query: 'NOT trace_id:x{k}', "
        f"aggregation: count, account: {tenant(k)}, group_by: [trace_id]}}\n"
        f"  - {{id: hist-{k}, name: d_{k}, kind: gauge, query: '*', aggregation: histogram, "
        f"field: http.duration_ms, buckets: {[[1, 2], [1.0, 2.0]][k % 2]}, "
        f"account: {tenant(k)}}}" for k in range(0, 40, 3))
    rules = [*tenant_rules, *load_text(SCOPED_RULES)[0], *load_text(f"rules:\n{own}\n")[0]]
    routing = plan_for(rules, max_label_value_length=8)
    gen = LogGenerator(GeneratorConfig(seed=accounts, accounts=accounts, malformed_ratio=0.02,
                                       late_ratio=0.05))
    batch = parse_lines(list(gen.lines(3000)), routing.plan)
    scoped = FanOut(batch, routing).scoped()
    assert scoped is not None and len(scoped.slices) > 1
    expected = scoped.rows(scoped.account_matches())
    got = FanOut(batch, routing).scoped().account_rows()  # type: ignore[union-attr]
    assert len(got) == len(expected) > 1
    for mine, theirs in zip(got, expected, strict=True):
        assert mine.equals(theirs)


def test_histograms_of_equal_bounds_written_apart_keep_their_own_le_labels() -> None:
    # [1, 2] and [1.0, 2.0] are equal bounds but different labels: rules of one shape share
    # their rows' building, so the labels are part of the shape (the second rule's rows took
    # the first one's "1" for its own "1.0").
    rules, _ = load_text("""
rules:
  - {id: a, name: a, kind: gauge, query: "*", aggregation: histogram, field: d, buckets: [1, 2]}
  - {id: b, name: b, kind: gauge, query: "*", aggregation: histogram, field: d, buckets: [1.0, 2.0]}
""")
    routing = plan_for(rules)
    batch = parse_lines([b'{"@timestamp": 1795341600000, "d": 0.5}',
                         b'{"@timestamp": 1795341600000, "d": 1.5}'], routing.plan)
    rows = fan_out(batch, routing, with_status=False).select(["rule", "le"]).to_pylist()
    assert sorted((r["rule"], r["le"]) for r in rows) == \
        [("a", "1"), ("a", "2"), ("b", "1.0"), ("b", "2.0")]


def test_a_task_partials_do_not_depend_on_how_its_logs_were_chunked() -> None:
    routing = plan_for(_rules())
    lines = _lines(5000, seed=6)
    batches = [parse_lines(lines[i:i + 500], routing.plan, now_ms=1_700_000_000_000)
               for i in range(0, len(lines), 500)]
    small = TaskPipeline(routing, chunk_rows=700)  # chunks of 1000, merged more than once
    whole = TaskPipeline(routing, chunk_rows=10**9)
    for batch in batches:
        small.add(batch)
        whole.add(batch)
    got = pa.Table.from_batches(list(small.finish()), PARTIAL_ARROW)
    expected = pa.Table.from_batches(list(whole.finish()), PARTIAL_ARROW)
    assert got.schema == PARTIAL_ARROW
    assert _sorted(got) == _sorted(expected)
    # ... and equal the match rows of all logs pre-aggregated at once
    table = pa.Table.from_batches(batches)
    direct = preaggregate(fan_out(table, routing), routing.exact_rules)
    assert _sorted(got) == _sorted(direct)
    assert sum(got.column("matches").to_pylist()) == small.match_rows > 5000
    assert small.logs == 5000 and got.num_rows < small.match_rows // 10


def test_routing_travels_as_an_option_and_is_decoded_once_per_process() -> None:
    routing = plan_for(_rules())
    option = routing_option(routing)
    decoded = routing_from_option(option)
    assert decoded == routing and decoded.by_account.keys() == routing.by_account.keys()
    assert routing_from_option(option) is decoded
    assert gc.isenabled()  # decoded with the collector paused, and it is back on


def test_rules_and_caps_keep_every_field_through_their_compact_pickles() -> None:
    """Rule and RuleCaps pickle as their field values in order (the routing's size and
    decode time in every worker): every field comes back, the compiled query too, and a
    cached property is computed again, not carried."""
    rules = [r for r in _rules() if r.enabled]
    _ = rules[0].group_labels
    limits = Limits(SeriesLimits(per_rule=50, per_metric=70, per_account=90))
    routing = plan_for(rules, limits=limits)
    # The caps travel as the rules and limits they are worked out from, not as records.
    assert b"l2m.engine.admission" not in pickle.dumps(routing)  # where RuleCaps lives
    decoded = routing_from_option(routing_option(routing))
    assert len(decoded.rules) == len(rules)
    for before, after in zip(rules, decoded.rules, strict=True):
        assert {f.name: getattr(after, f.name) for f in dataclasses.fields(Rule)} == \
            {f.name: getattr(before, f.name) for f in dataclasses.fields(Rule)}
        assert after.compiled == before.compiled and after.compiled is not None
        assert "group_labels" not in vars(pickle.loads(pickle.dumps(before)))
        assert after.group_labels == before.group_labels
    assert decoded.caps == routing.caps == rule_caps(rules, limits)
    assert any(c.account_name for c in decoded.caps.values())
    assert {c.rule for c in decoded.caps.values()} >= {50}


def test_the_parse_plan_merges_every_rules_field_uses_whatever_they_share() -> None:
    """plan_for merges each distinct use once (tenants share compiled queries): the plan is
    the one a merge of every rule's uses, one by one, gives."""
    rules = _rules()
    uses: list[FieldUse] = []
    for rule in rules:
        assert rule.compiled is not None
        uses += [*rule.compiled.fields, *(FieldUse(f, string=True) for f in rule.group_by)]
        uses += [FieldUse(rule.field, number=True)] if rule.field else []
        uses += [FieldUse("account", string=True)] if rule.account is not None else []
    assert plan_for(rules).plan == ParsePlan.merge(reversed(uses))
    assert any(u.keyword_patterns for u in plan_for(rules).plan.fields)


def test_read_task_hands_over_exactly_the_dead_lettered_rows_in_order() -> None:
    """Malformed and future-dated logs reach the dead-letter callback with their row and
    reason, in row order; good, blank and undated logs do not."""
    from l2m.engine.readtask import ReadTask

    routing = plan_for(_rules())
    now = 1_795_341_600_000
    lines: list[bytes | None] = [
        b'{"@timestamp": 1795341600000, "level": "error"}',
        b'{"level": ',
        b"",
        b'{"level": "info"}',
        b'{"@timestamp": 1895341600000, "level": "error"}',
        None,
        b"[1]",
    ]
    seen: list[tuple[int, str]] = []
    task = ReadTask(routing.plan, routing)
    list(task.add(lines, [now] * len(lines), lambda i, reason: seen.append((i, reason))))
    assert [i for i, _ in seen] == [1, 4, 6]
    assert seen[0][1].startswith("invalid JSON")
    assert seen[1][1].startswith("future: event time 1895341600000")
    assert seen[2][1] == "not a JSON object (a list)"


def test_coded_match_rows_pre_aggregate_exactly_as_strings_do() -> None:
    """The read task's match rows (rule, series and le dictionary-encoded, a dictionary per
    part) are the plain rows, and pre-aggregate to the same partials (in an order of Arrow's,
    which nothing downstream reads: the state and backfill's finals key their rows):
    histograms, gauges, scoped rules, status rows and cut label values among them."""
    from l2m.engine.fanout import CODED_MATCH_SCHEMA
    from l2m.engine.labels import CUT_RULE
    from l2m.engine.status import STATUS_RULE

    routing = plan_for(_rules(), max_label_value_length=6)
    batch = parse_lines(_lines(3000, seed=8), routing.plan, now_ms=1_700_000_000_000)
    coded = fan_out(batch, routing, coded=True)
    plain = fan_out(batch, routing)
    assert coded.schema == CODED_MATCH_SCHEMA and plain.schema == MATCH_SCHEMA
    assert coded.cast(MATCH_SCHEMA).equals(plain)
    rules = set(plain.column("rule").to_pylist())
    kinds = {r.aggregation for r in routing.rules if r.id in rules}
    assert {CUT_RULE, STATUS_RULE, "acct-web"} <= rules and Aggregation.HISTOGRAM in kinds
    assert any(r.kind == Kind.GAUGE for r in routing.rules if r.id in rules)
    got = preaggregate(coded, routing.exact_rules)
    key = [(k, "ascending") for k in ("rule", "series", "le", "window")]
    assert got.sort_by(key).equals(preaggregate(plain, routing.exact_rules).sort_by(key))
    assert got.schema == PARTIAL_ARROW and got.num_rows > 700
