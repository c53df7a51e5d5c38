"""Label values from logs are bounded (l2m/engine/labels.py, issue 20): a group-by value over
the job's limit is cut to the limit with a marker, the log still counts (into the series of
the kept prefix), and each cut label value is counted per rule — in the fan-out's cut rows,
in the counter state (``l2m_label_values_cut_total{rule}``), on the driver's /metrics. No JVM."""

from __future__ import annotations

import orjson
import pyarrow as pa
import pytest

from l2m.config.loader import load_config
from l2m.defaults import MAX_LABEL_VALUE_LENGTH
from l2m.engine.fanout import fan_out
from l2m.engine.labels import CUT_MARKER, CUT_RULE, cut_value, encoded, encoded_codes
from l2m.engine.parse import parse_lines
from l2m.engine.partials import frame_partials
from l2m.engine.preaggregate import preaggregate
from l2m.engine.routing import plan_for
from l2m.engine.samples import series_labels
from l2m.engine.status import STATUS_RULE, status_label
from l2m.errors import ConfigError
from l2m.rules.loader import load_text
from l2m.state.counters import CounterState, tallied
from l2m.state.tally import CutCount

T0 = 1795341600000
RULES, _ = load_text("""\
rules:
  - {id: by-service, name: logs_total, kind: counter, query: "*", aggregation: count,
     group_by: [service]}
  - {id: two, name: two_total, kind: counter, query: "*", aggregation: count,
     group_by: [service, level]}
  - {id: lat, name: lat, kind: gauge, query: "*", aggregation: max, field: ms,
     group_by: [service]}
  - {id: scoped, name: scoped_total, kind: counter, query: "*", aggregation: count,
     group_by: [service], account: acme}
""")
BY_ID = {r.id: r for r in RULES}
HUGE = "x" * 1_100_000  # the 1.1 MB group-by value


def log(service: str, level: str = "info", account: str = "acme", ms: float = 1.0) -> bytes:
    return orjson.dumps({"@timestamp": T0, "service": service, "level": level,
                         "account": account, "ms": ms})


def rows(lines: list[bytes], limit: int = MAX_LABEL_VALUE_LENGTH) -> list[dict]:
    routing = plan_for(RULES, max_label_value_length=limit)
    return fan_out(parse_lines(lines, routing.plan), routing).to_pylist()


def test_a_value_over_the_limit_is_cut_to_the_limit_with_the_marker():
    assert cut_value("short") == "short"
    assert cut_value("y" * 1024) == "y" * 1024
    cut = cut_value("y" * 1025)
    assert len(cut) == 1024 and cut == "y" * (1024 - len(CUT_MARKER)) + CUT_MARKER
    # characters, not bytes: a 4-byte character counts as one
    assert cut_value("😀" * 30, 20) == "😀" * 14 + CUT_MARKER


def test_the_arrow_encoding_cuts_as_cut_value_does_and_says_which_rows():
    values = ["a", "b" * 40, None, "é" * 21, "c" * 20, "b" * 40]
    keys, cut = encoded(pa.array(values, pa.string()), 20)
    expected = [("-" if v is None else f"{len(cut_value(v, 20))}:{cut_value(v, 20)}")
                for v in values]
    assert keys.to_pylist() == expected
    assert cut is not None and cut.tolist() == [False, True, False, True, False, True]
    keys, cut = encoded(pa.array(["a", None], pa.string()), 20)
    assert cut is None and keys.to_pylist() == ["1:a", "-"]


def test_an_empty_value_is_encoded_as_an_absent_one_cut_or_not():
    values = ["", "a", None, "", "b" * 40, "b" * 41]
    keys, cut = encoded(pa.array(values, pa.string()), 20)
    assert keys.to_pylist() == ["-", "1:a", "-", "-", f"20:{'b' * 14}{CUT_MARKER}",
                                f"20:{'b' * 14}{CUT_MARKER}"]
    assert cut is not None and cut.tolist() == [False, False, False, False, True, True]
    codes, distinct, cut = encoded_codes(pa.array(["", None, "x", ""], pa.string()))
    assert (codes.tolist(), distinct.to_pylist(), cut) == ([0, 0, 1, 0], ["-", "1:x"], None)


def test_a_huge_group_by_value_becomes_a_cut_label_and_every_cut_is_counted_per_rule():
    lines = [log("cart"), log(HUGE), log(HUGE[:-1] + "z", level="w" * 2000), log("cart")]
    out = rows(lines)
    matched = [r for r in out if r["rule"] not in (STATUS_RULE, CUT_RULE)]
    # every log still counts, in every rule it matches (4 logs × 4 rules)
    assert len(matched) == 16
    for r in matched:
        labels = dict(series_labels(BY_ID[r["rule"]], r["series"]))
        assert all(len(v) <= MAX_LABEL_VALUE_LENGTH for v in labels.values())
    cut_service = "x" * (MAX_LABEL_VALUE_LENGTH - len(CUT_MARKER)) + CUT_MARKER
    services = {dict(series_labels(BY_ID[r["rule"]], r["series"]))["service"]
                for r in matched}
    assert services == {"cart", cut_service}  # the two long values share their kept prefix
    cuts: dict[str, int] = {}
    for r in out:
        if r["rule"] == CUT_RULE:
            assert r["ts"] == T0 and r["v"] == 1.0 and r["window"] is None
            rule = status_label(r["series"])
            cuts[rule] = cuts.get(rule, 0) + 1
    # one per cut label value: 2 logs × service in each rule, and one level in rule "two"
    assert cuts == {"by-service": 2, "two": 3, "lat": 2, "scoped": 2}
    # the pre-aggregate keeps one partial per (cut rows, rule)
    partials = [p for p in preaggregate(pa.Table.from_pylist(out)).to_pylist()
                if p["rule"] == CUT_RULE]
    assert sorted((status_label(p["series"]), p["matches"]) for p in partials) == sorted(
        cuts.items())


def test_the_limit_is_the_routings_and_nothing_is_cut_below_it():
    lines = [log("s" * 100)]
    assert not [r for r in rows(lines) if r["rule"] == CUT_RULE]
    cut = [r for r in rows(lines, limit=50) if r["rule"] == CUT_RULE]
    assert len(cut) == 4
    without_status = plan_for(RULES, max_label_value_length=50)
    table = fan_out(parse_lines(lines, without_status.plan), without_status, with_status=False)
    assert CUT_RULE not in table.column("rule").to_pylist()


def test_the_counter_state_keeps_the_cut_count_exactly_and_emits_it_per_rule():
    out = rows([log(HUGE), log(HUGE), log("cart")])
    table = preaggregate(pa.Table.from_pylist(out))
    frame = table.to_pandas()
    cut = [p for rule, p in zip(frame["rule"], frame_partials(frame), strict=True)
           if rule == CUT_RULE]
    state = CounterState(BY_ID, ttl_ms=60_000)
    content, samples = state.update(CUT_RULE, {}, cut, now=1000, watermark=0)
    got = {(s["name"], s["labels"]["rule"], s["value"]) for s in samples}
    assert got == {("l2m_label_values_cut_total", rule, 2.0)
                   for rule in ("by-service", "two", "lat", "scoped")}
    assert all(s["rule"] == "l2m-label-cut" and s["timestamp"] == T0 for s in samples)
    content, samples = state.update(CUT_RULE, content or {}, cut, now=2000, watermark=0)
    assert {s["value"] for s in samples} == {4.0}  # cumulative, like every counter
    assert tallied(CUT_RULE, 0, -1, content) == {
        CutCount(rule): 4 for rule in ("by-service", "two", "lat", "scoped")}


def test_the_limit_is_configured_in_the_job_file(tmp_path):
    path = tmp_path / "job.yaml"
    path.write_text('kafka: {bootstrap.servers: "127.0.0.1:9092"}\n')
    assert load_config(path).limits.max_label_value_length == 1024
    path.write_text('kafka: {bootstrap.servers: "127.0.0.1:9092"}\n'
                    "limits: {max_label_value_length: 200}\n")
    assert load_config(path).limits.max_label_value_length == 200
    path.write_text('kafka: {bootstrap.servers: "127.0.0.1:9092"}\n'
                    "limits: {max_label_value_length: 5}\n")
    with pytest.raises(ConfigError, match="max_label_value_length"):
        load_config(path)


def test_the_driver_shows_the_cut_count_per_rule():
    from l2m.runtime.telemetry import Telemetry
    from tests.unit.runtime.test_telemetry import CFG, PROGRESS, counts, sample

    t = Telemetry(CFG, RULES)
    t.started(counts(10, 2, {}, {CutCount("by-service"): 3}))
    t.batch(PROGRESS)
    assert sample(t, "l2m_label_values_cut_total", rule="by-service") == 3
    assert sample(t, "l2m_label_values_cut_total", rule="two") == 0


def test_long_values_sharing_their_kept_prefix_are_one_series_of_a_task():
    """Cut to the same key, two long values are one series: one partial per key in a read
    task's output (its match rows carry codes, one per distinct key), counting both logs,
    one or two group-by fields alike."""
    from l2m.engine.pipeline import TaskPipeline

    routing = plan_for(RULES, max_label_value_length=12)
    lines = [log("a" * 20 + "1"), log("a" * 20 + "2"), log("a" * 20 + "2", level="error"),
             log("short")]
    pipeline = TaskPipeline(routing)
    pipeline.add(parse_lines(lines, routing.plan))
    partials = pa.Table.from_batches(list(pipeline.finish())).to_pylist()
    keys = [(p["rule"], p["series"], p["le"], p["window"]) for p in partials]
    assert len(keys) == len(set(keys))
    cut = "a" * (12 - len(CUT_MARKER)) + CUT_MARKER
    series = {p["series"]: p["matches"] for p in partials if p["rule"] == "by-service"}
    assert series == {f"12:{cut}": 3, "5:short": 1}
