"""Native histograms and quantiles in the state stage, without Spark (issue 56): a series'
(counters) and a window's (gauges) buckets re-keyed after each batch to at most the rule's
``native_max_buckets`` (:func:`l2m.engine.nativebuckets.reduced_parts`), with samples after
many batches equal to backfill's one-shot ones (run_local); a hostile stream's state stays
bounded; a schema change restarts a series; a classic+native histogram's logs counted once
by the refusals and the per-rule matches."""

from __future__ import annotations

import copy
import dataclasses
import random
from collections.abc import Sequence
from typing import Any

import orjson
import pyarrow as pa
import pytest

from l2m.batch.local import RunSettings, run_local
from l2m.engine.admission import Admission, Limit, RuleCaps
from l2m.engine.nativebuckets import is_native_key, parse_key
from l2m.engine.partials import Partial, frame_partials
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing
from l2m.rules.loader import load_text
from l2m.rules.model import Aggregation, Rule
from l2m.semantics import exphist
from l2m.state.counters import CounterState
from l2m.state.gauges import GaugeState
from l2m.state.rows import Reduction, counted
from l2m.state.tally import MatchCount, Sums

T0 = 1795341600000  # 2026-11-22T10:00:00Z, a window start

_BASE, _PROBLEMS = load_text("""\
rules:
  - {id: both, name: both_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [1, 10, 100], group_by: [service]}
  - {id: nat, name: nat_ms, kind: counter, query: '*', aggregation: histogram, field: ms,
     buckets: [1], group_by: [service]}
  - {id: gh, name: gh_ms, kind: gauge, query: '*', aggregation: histogram, field: ms,
     buckets: [1], group_by: [service]}
  - {id: q, name: q_ms, kind: gauge, query: '*', aggregation: sum, field: ms,
     group_by: [service]}
""")


def _rules(max_buckets: int = 160) -> list[Rule]:
    """Classic+native counter (schema 3), native-only counter (schema 5), native gauge
    histogram (schema 3), quantile gauges (schema 5); built in code from loaded rules."""
    assert _PROBLEMS == []
    both, nat, gh, q = _BASE
    return [
        dataclasses.replace(both, native_schema=3, native_max_buckets=max_buckets),
        dataclasses.replace(nat, buckets=(), bucket_labels=(), native_schema=5,
                            native_max_buckets=max_buckets),
        dataclasses.replace(gh, buckets=(), bucket_labels=(), native_schema=3,
                            native_max_buckets=max_buckets),
        dataclasses.replace(q, aggregation=Aggregation.QUANTILES, native_schema=5,
                            native_max_buckets=max_buckets, quantiles=(0.0, 0.5, 0.9, 0.99, 1.0),
                            quantile_labels=("0", "0.5", "0.9", "0.99", "1")),
    ]


def _value(rng: random.Random, i: int) -> Any:
    """Lognormal latencies, with zeros, negatives, missing, null and non-numeric values."""
    kind = i % 17
    if kind == 0:
        return 0
    if kind == 1:
        return -rng.lognormvariate(2, 1)
    if kind == 2:
        return "slow"
    if kind == 3:
        return None
    return round(rng.lognormvariate(3, 1.2), 3)


def _logs(n: int, seed: int = 5, value: Any = _value) -> list[bytes]:
    """``n`` logs over 4 one-minute windows, services a..c (some without one)."""
    rng = random.Random(seed)
    logs = []
    for i in range(n):
        log: dict[str, Any] = {"@timestamp": T0 + (i * 240_000) // n, "service": "abc"[i % 3]}
        v = value(rng, i)
        if i % 19 != 4:  # sometimes no field at all
            log["ms"] = v
        if i % 23 == 7:
            del log["service"]
        logs.append(orjson.dumps(log))
    return logs


def _batch_rows(routing: Routing, lines: Sequence[bytes]
                ) -> dict[tuple[str, int | None], list[tuple[str, str, Partial]]]:
    """One read task's partials of ``lines`` by (rule, window): a micro-batch's rows."""
    task = ReadTask(routing.plan, routing)
    for _ in task.add(list(lines)):
        pass
    table = pa.Table.from_batches(list(task.finish()))
    out: dict[tuple[str, int | None], list[tuple[str, str, Partial]]] = {}
    for rule, window, row in zip(table.column("rule").to_pylist(),
                                 table.column("window").to_pylist(), frame_partials(table),
                                 strict=True):
        out.setdefault((rule, window), []).append(row)
    return out


def _native_rows(entry: dict[str, Any]) -> int:
    return sum(1 for le in entry if is_native_key(le))


class _Streaming:
    """The state stage's counters and gauges fed batch by batch (format-independent: the
    stored content as the formats keep it, one rule per counter key, one per window)."""

    def __init__(self, rules: list[Rule]) -> None:
        self.counters = CounterState({r.id: r for r in rules if r.kind == "counter"},
                                     ttl_ms=10 ** 12)
        self.gauges = GaugeState({r.id: r for r in rules if r.kind == "gauge"})
        self.stored: dict[tuple[str, int | None], dict[str, Any]] = {}
        self.latest: dict[bytes, bytes] = {}  # last sample per (name, labels, window)
        self.most_rows = 0  # the most native rows any stored series had after a batch

    def batch(self, routing: Routing, lines: Sequence[bytes], now: int) -> None:
        for (rule_id, window), rows in sorted(_batch_rows(routing, lines).items(),
                                              key=lambda kv: (kv[0][0], kv[0][1] or 0)):
            if rule_id.startswith("__"):
                continue  # the input statuses
            before = self.stored.get((rule_id, window), {})
            if window is None:
                content, samples = self.counters.update(rule_id, before, rows, now, 0)
                assert content is not None
                entries = [e[1] for e in content["series"].values()]
            else:
                content, samples = self.gauges.update(rule_id, window, before, rows)
                entries = list(content["series"].values())
            self.stored[(rule_id, window)] = content
            self.most_rows = max([self.most_rows, *map(_native_rows, entries)])
            for s in samples:
                labels = dict(s["labels"])
                self.latest[orjson.dumps([s["name"], sorted(labels.items()),
                                          s["timestamp"] if s["kind"] == "gauge" else 0])] = \
                    orjson.dumps(s)


def _final(lines: list[bytes]) -> dict[bytes, bytes]:
    """run_local's samples keyed as :class:`_Streaming` keys them."""
    out = {}
    for line in lines:
        s = orjson.loads(line)
        out[orjson.dumps([s["name"], sorted(s["labels"].items()),
                          s["timestamp"] if s["kind"] == "gauge" else 0])] = \
            orjson.dumps(s)
    return out


@pytest.mark.parametrize("max_buckets", [160, 12, 1])
def test_samples_after_many_batches_equal_backfill_in_one_shot(max_buckets: int) -> None:
    rules = _rules(max_buckets)
    routing = RunSettings(limits=None).routing(rules)
    logs = _logs(1200)
    one_shot = run_local(routing, logs)
    streaming = _Streaming(rules)
    for at in range(0, len(logs), 37):  # 33 micro-batches
        streaming.batch(routing, logs[at:at + 37], now=T0 + at)
    expected = _final(one_shot.lines)
    assert streaming.latest == expected
    histograms = [orjson.loads(v)["histogram"] for v in expected.values()
                  if b'"histogram"' in v]
    assert histograms and all(len(h["positive"]) + len(h["negative"]) <= max_buckets
                              or h["schema"] == exphist.SCHEMA_MIN for h in histograms)
    if max_buckets == 12:
        # The limit lowered the busier series' (and windows') resolution.
        assert {h["schema"] for h in histograms} == {-1, 0, 3}
        assert streaming.most_rows <= 12 + 2  # the zero and no-bucket keys besides


def _hostile(rng: random.Random, i: int) -> float:
    """Magnitudes over 1e-300..1e300, both signs."""
    return (-1) ** i * 10 ** rng.uniform(-300, 300)


def _schema_min_buckets(values: list[float]) -> int:
    return len({(v > 0, exphist.magnitude_index(v, exphist.SCHEMA_MIN)) for v in values})


def test_a_hostile_stream_keeps_few_rows_per_series_and_window() -> None:
    rules = _rules(160)
    routing = RunSettings(limits=None).routing(rules)
    logs = _logs(3000, seed=9, value=_hostile)
    streaming = _Streaming(rules)
    for at in range(0, len(logs), 100):
        streaming.batch(routing, logs[at:at + 100], now=T0 + at)
        for content in streaming.stored.values():
            for entry in content["series"].values():
                parts = entry[1] if isinstance(entry, list) else entry
                native = [le for le in parts if is_native_key(le)]
                schemas = {parse_key(le)[1] for le in native if le not in ("z/", "x/")}
                assert len(schemas) <= 1  # one resolution per series
    values = [orjson.loads(line).get("ms") for line in logs]
    numbers = [v for v in values if isinstance(v, float)]
    # Both signs over 2^±997: at schema -4 about 126 buckets a side; never more rows than
    # the limit or what schema -4 needs, plus z/ and x/ (classic bounds aside).
    bound = max(160, _schema_min_buckets(numbers)) + 2
    assert 160 < streaming.most_rows <= bound == 254
    # Sums past what decimal(38,18) holds are double sums: they differ in the last digits
    # with the order of adding, as any sum's do (every other field is exact).
    final = _final(run_local(routing, logs).lines)
    assert {k: _without_sum(v) for k, v in streaming.latest.items()} == \
        {k: _without_sum(v) for k, v in final.items()}
    positive = [abs(v) for v in numbers]
    assert _schema_min_buckets(positive) == 126 <= 160  # one sign: within the limit


def _without_sum(line: bytes) -> Any:
    sample = orjson.loads(line)
    if "histogram" in sample:
        sample["histogram"]["sum"] = round(sample["histogram"]["sum"] / 1e290)
    elif sample["name"].endswith("_sum"):
        sample["value"] = round(sample["value"] / 1e290)
    return sample


def test_the_stored_entry_of_a_native_series_is_bounded_in_bytes() -> None:
    rules = _rules(160)
    routing = RunSettings(limits=None).routing(rules)
    logs = _logs(6000, seed=9, value=lambda rng, i: 10 ** rng.uniform(-300, 300))
    streaming = _Streaming(rules)
    sizes = []
    for at in range(0, len(logs), 300):
        streaming.batch(routing, logs[at:at + 300], now=T0 + at)
        sizes.append(max(len(orjson.dumps(entry)) for (rule, _w), c in
                         streaming.stored.items() if rule == "nat"
                         for entry in c["series"].values()))
    # 160 buckets at most (and z/, x/), each stored partial ≈ 116 bytes of hostile doubles:
    # ≈ 15 kB per series from the first few hundred logs on, whatever comes after.
    assert streaming.most_rows == 162
    assert max(sizes) < 162 * 120
    assert sizes[-1] - sizes[len(sizes) // 2] < 300


def test_a_schema_change_restarts_the_series() -> None:
    rules = _rules()
    routing = RunSettings(limits=None).routing(rules)
    logs = _logs(200)
    streaming = _Streaming(rules)
    streaming.batch(routing, logs[:100], now=T0)
    first = copy.deepcopy(streaming.stored)
    finer = [dataclasses.replace(r, native_schema=4) if r.id == "nat" else r for r in rules]
    after = _Streaming(finer)
    after.stored = streaming.stored
    after.batch(RunSettings(limits=None).routing(finer), logs[100:], now=T0 + 1)
    restarted = {k: v for k, v in after.latest.items() if b"nat_ms" in k}
    fresh = _Streaming(finer)
    fresh.batch(RunSettings(limits=None).routing(finer), logs[100:], now=T0 + 1)
    assert restarted == {k: v for k, v in fresh.latest.items() if b"nat_ms" in k}
    assert restarted and all(orjson.loads(v)["histogram"]["schema"] == 4
                             for v in restarted.values())
    # A max_buckets change keeps the series (same signature).
    fewer = [dataclasses.replace(r, native_max_buckets=5) if r.id == "nat" else r
             for r in rules]
    kept = _Streaming(fewer)
    kept.stored = first
    kept.batch(RunSettings(limits=None).routing(fewer), logs[100:], now=T0 + 1)
    count = sum(orjson.loads(v)["histogram"]["count"] for k, v in kept.latest.items()
                if b"nat_ms" in k)
    assert count == sum(orjson.loads(v)["histogram"]["count"] for k, v in
                        _final(run_local(RunSettings(limits=None).routing(fewer),
                                         logs).lines).items() if b"nat_ms" in k)


def _part(n: int, v: float, ts: int) -> Partial:
    return Partial(n, n, v * n, None, v, v, ts)


def test_refusals_count_a_classic_and_native_histograms_logs_once() -> None:
    both = _rules()[0]
    counters = CounterState({"both": both}, ttl_ms=10 ** 12)
    admission = Admission({"both": RuleCaps(1)}, {})
    rows = []
    for series, logs in (("1:a", 3), ("1:b", 4), ("1:c", 5)):
        rows += [(series, "10", _part(logs, 5.0, T0)), (series, "p3/19", _part(logs, 5.0, T0))]
    _content, samples = counters.update("both", {}, rows, T0, 0, admission=admission)
    assert admission.refused == {("both", Limit.RULE): [9, T0]}
    overflow = [s for s in samples if s["labels"] == {"l2m_overflow": "true"}]
    assert [s["value"] for s in overflow if s["name"] == "both_ms_count"] == [9.0]
    assert [s["histogram"]["count"] for s in overflow if "histogram" in s] == [9]


class _Acc:
    def __init__(self, param: Any) -> None:
        self.param, self.value = param, param.zero({})

    def add(self, term: Any) -> None:
        self.value = self.param.addInPlace(self.value, term)


class _Count:
    def __init__(self) -> None:
        self.value = 0

    def add(self, n: int) -> None:
        self.value += n


def _reduction() -> Reduction:
    return Reduction(_Count(), _Count(), _Acc(Sums()))  # type: ignore[arg-type]


def test_matches_per_rule_count_each_log_once() -> None:
    rules = _rules()
    routing = RunSettings(limits=None).routing(rules)
    task = ReadTask(routing.plan, routing)
    logs = _logs(41)
    for _ in task.add(logs):
        pass
    table = pa.Table.from_batches(list(task.finish()))
    reduction = _reduction()
    by_kind = ({r.id: r for r in rules if r.kind == "counter"},
               {r.id: r for r in rules if r.kind == "gauge"})
    for _ in counted(iter([table.to_pandas()]), reduction, by_kind):
        pass
    assert reduction.matches is not None
    matches = {k.rule: v for k, v in reduction.matches.value.items()
               if isinstance(k, MatchCount) and not k.rule.startswith("__")}
    assert matches == {"both": 41, "nat": 41, "gh": 41, "q": 41}
    assert run_local(routing, logs).summary.matches == matches
    # Without the rules (a removed rule's rows), its rows are counted as they are.
    unknown = _reduction()
    for _ in counted(iter([table.to_pandas()]), unknown):
        pass
    assert unknown.matches is not None
    assert unknown.matches.value[MatchCount("both")] == 82
    # Pre-aggregation's rows in are rows, two per log for "both".
    assert unknown.rows_in.value == reduction.rows_in.value
