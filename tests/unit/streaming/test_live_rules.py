"""Live rules without a JVM (issue 23): the stored rule set format (pinned by a golden file),
the reload watcher's decisions, the offset log's rule set version, the partials' tags."""

from __future__ import annotations

import io
import json
import os
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest

from l2m.engine.admission import placement_shard
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.routing import plan_for
from l2m.engine.streamtask import STREAM_PARTIAL_ARROW, places, tag
from l2m.errors import RuleSnapshotError
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule
from l2m.rules.snapshot import SNAPSHOT_FORMAT, restore, snapshot, version_of
from l2m.runtime.reload import RuleWatcher, fingerprint
from l2m.streaming.rulesets import ruleset_of

if TYPE_CHECKING:
    from l2m.engine.rulesets import Versions
    from l2m.state.processor import MetricProcessor
    from tests.support import tws

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "ruleset-v1.json"
GOLDEN_RULES = """\
rules:
  - {id: req, name: requests_total, kind: counter, query: "service:web AND NOT level:debug", aggregation: count,
     group_by: [service, http.status], labels: {team: shop}, description: "Requests served", unit: ""}
  - {id: lat, name: latency_seconds, kind: counter, query: "_exists_:http.duration_ms", aggregation: histogram,
     field: http.duration_ms, buckets: [10, 50.5, 250], account: acme, target_account: acme-metrics, max_series: 500}
  - {id: worst, name: worst_ms, kind: gauge, query: "*", aggregation: max, field: ms, enabled: false}
"""  # noqa: E501 (the golden file's rules, as written when format 1 was pinned)


def test_format_1_snapshots_are_read_and_written_as_pinned():
    """A snapshot written by the release that introduced format 1 restores to the same rules,
    and these rules still write it byte for byte (so its version is unchanged): replays
    across an upgrade find their rules."""
    rules, errors = load_text(GOLDEN_RULES, file="rules/golden.yaml")
    assert not errors
    data = GOLDEN.read_bytes()
    assert SNAPSHOT_FORMAT == 1 and snapshot(rules) == data
    assert version_of(data) == "6ed46cbc083d3fea"
    restored = restore(data)
    assert sorted(restored, key=lambda r: r.id) == sorted(rules, key=lambda r: r.id)
    assert all(r.compiled is not None for r in restored)
    assert snapshot(restored) == data


def test_the_version_does_not_depend_on_the_order_rules_were_loaded_in():
    rules, _ = load_text(GOLDEN_RULES, file="rules/golden.yaml")
    assert version_of(snapshot(rules)) == version_of(snapshot(list(reversed(rules))))


@pytest.mark.parametrize("data, says", [
    (b"not json", "not JSON"),
    (b'{"format": 3, "rules": []}', "format 3; this l2m reads formats 1 and 2"),
    (b'{"format": 1, "rules": [{"id": "a"}]}', "rule 'a' of a rule set snapshot cannot"),
])
def test_a_snapshot_this_release_cannot_read_is_a_clear_error(data, says):
    with pytest.raises(RuleSnapshotError, match=says):
        restore(data)


def test_the_offset_log_names_the_batch_s_rule_set():
    entry = ('v1\n{"batchWatermarkMs":0,"batchTimestampMs":1,"conf":{}}\n'
             '{"topic":"logs","partitions":{"0":10},"ruleset":"0123456789abcdef"}')
    assert ruleset_of(entry) == "0123456789abcdef"
    # Batches planned before live rules: none (the query's first rules).
    assert ruleset_of('v1\n{}\n{"topic":"logs","partitions":{"0":10}}') is None
    assert ruleset_of("v1\n{}\n") is None


def test_partials_are_tagged_with_their_rule_set_and_shard():
    rules, _ = load_text(GOLDEN_RULES, file="rules/golden.yaml")
    routing = plan_for(rules)
    partials = pa.RecordBatch.from_pylist(
        [{"rule": "req", "series": "1:a"}, {"rule": "__cut__", "series": "1:b"},
         {"rule": "lat", "series": ""}], schema=PARTIAL_ARROW)
    tagged = tag(partials, "v9", places("v9", routing, 8))
    assert tagged.schema == STREAM_PARTIAL_ARROW
    by_id = {r.id: r for r in rules}
    assert tagged.column("ruleset").to_pylist() == ["v9"] * 3
    assert tagged.column("place").to_pylist() == [
        placement_shard(by_id["req"], 8), None, placement_shard(by_id["lat"], 8)]


class _Publisher:
    def __init__(self) -> None:
        self.published: list[Sequence[Rule]] = []

    def publish(self, rules: Sequence[Rule]) -> str:
        self.published.append(rules)
        return version_of(snapshot(rules))


def _watcher(folder: Path, out: io.StringIO) -> RuleWatcher:
    watcher = RuleWatcher([str(folder)], lambda: load_rules([folder]), poll_s=0.001, out=out)
    watcher.started(load_rules([folder]))
    watcher.status.version = version_of(snapshot(watcher.rules))
    return watcher


RULE = textwrap.dedent("""\
    rules:
      - {id: a, name: a_total, kind: counter, query: "*", aggregation: count}
    """)
OTHER = RULE.replace("id: a", "id: b").replace("a_total", "b_total")


def _later() -> None:
    time.sleep(0.01)  # past the watcher's poll interval


@pytest.fixture
def watched(tmp_path: Path) -> tuple[Path, io.StringIO, _Publisher, RuleWatcher]:
    """A rule folder holding rule a, and a watcher on it: (folder, its output, the job's
    stand-in publisher, the watcher)."""
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_text(RULE)
    out = io.StringIO()
    return folder, out, _Publisher(), _watcher(folder, out)


def test_the_watcher_publishes_a_changed_set_and_nothing_when_nothing_changed(watched):
    folder, out, publisher, watcher = watched
    assert watcher.check(publisher) is None and publisher.published == []
    (folder / "b.yaml").write_text(OTHER)
    _later()
    assert watcher.check(publisher) is True
    assert sorted(r.id for r in publisher.published[-1]) == ["a", "b"]
    assert watcher.status.successes == 1 and watcher.status.rules == 2
    assert "rules reloaded: 2 rules, version " in out.getvalue()
    _later()
    assert watcher.check(publisher) is None  # seen: nothing to do


def test_the_watcher_refuses_a_set_that_does_not_validate_whole(watched):
    folder, out, publisher, watcher = watched
    running = watcher.status.version
    (folder / "b.yaml").write_text(OTHER.replace('"*"', '"level:(error"'))
    _later()
    assert watcher.check(publisher) is False
    assert publisher.published == []  # nothing of it reaches the job, not even rule a
    assert (watcher.status.version, watcher.status.last_ok, watcher.status.failures) == (
        running, False, 1)
    text = out.getvalue()
    assert f"still running version {running}" in text
    assert f"{folder / 'b.yaml'}:2:" in text  # the problem, with its position
    # A request reloads even when nothing changed since: refused again, counted again.
    request = watcher.request()
    assert watcher.check(publisher) is False and request.done.is_set() and not request.ok
    assert watcher.status.failures == 2


def test_the_fingerprint_sees_edits_additions_removals_and_a_configmap_swap(tmp_path):
    folder = tmp_path / "rules"
    data = tmp_path / "rules" / "..2026_11_24_10_00_00.1"
    data.mkdir(parents=True)
    (data / "a.yaml").write_text(RULE)
    os.symlink(data.name, folder / "..data")
    os.symlink("..data/a.yaml", folder / "a.yaml")
    seen = {fingerprint([str(folder)])}
    # The kubelet writes a new timestamped folder and swaps ..data to it.
    swapped = tmp_path / "rules" / "..2026_11_24_10_05_00.2"
    swapped.mkdir()
    (swapped / "a.yaml").write_text(RULE + "\n")
    os.symlink(swapped.name, folder / "..data.tmp")
    os.replace(folder / "..data.tmp", folder / "..data")
    seen.add(fingerprint([str(folder)]))
    (folder / "b.yaml").write_text(RULE)
    seen.add(fingerprint([str(folder)]))
    (folder / "b.yaml").unlink()
    (folder / "a.yaml").unlink()
    seen.add(fingerprint([str(folder)]))
    seen.add(fingerprint([str(tmp_path / "missing")]))
    assert len(seen) == 5


def test_rules_in_a_configmap_volume_are_read_by_their_visible_names(tmp_path):
    """The kubelet's layout: files in ``..<timestamp>/``, ``..data`` linking to it, the visible
    names linking into ``..data``; during a swap the next version's folder is there too."""
    folder = tmp_path / "rules"
    old = folder / "..2026_11_24_10_00_00.1"
    new = folder / "..2026_11_24_10_05_00.2"
    old.mkdir(parents=True)
    new.mkdir()
    (old / "a.yaml").write_text(RULE)
    (new / "a.yaml").write_text(RULE.replace("a_total", "a2_total"))
    os.symlink(old.name, folder / "..data")
    os.symlink("..data/a.yaml", folder / "a.yaml")
    loaded = load_rules([folder])  # no duplicate id from the folder being swapped in
    assert [(r.id, r.name, r.file) for r in loaded.rules] == [
        ("a", "a_total", str(folder / "a.yaml"))]


GRACE_MS, DELAY_MS = 1_200_000, 120_000


def _versioned_processor(monkeypatch: pytest.MonkeyPatch, files: Path, first: list[Rule]
                         ) -> tuple[MetricProcessor, tws.Store, Versions]:
    """A state processor whose workers' files are ``files`` (the versions shipped) and whose
    query started with rule set v1 = ``first``, on a fresh store: (processor, store, the
    query's versions)."""
    import pyspark

    from l2m.engine.pipeline import RuleTable, routing_option
    from l2m.engine.rulesets import Versions
    from l2m.state.counters import CounterState
    from l2m.state.gauges import GaugeState
    from l2m.state.processor import MetricProcessor
    from tests.support import tws

    monkeypatch.setattr(pyspark.SparkFiles, "getRootDirectory", staticmethod(lambda: str(files)))
    versions = Versions("v1", routing_option(plan_for(first)))
    store = tws.Store()
    fn = MetricProcessor(CounterState(RuleTable(versions.option, "counter", versions),
                                      ttl_ms=128_000),
                         GaugeState(RuleTable(versions.option, "gauge", versions),
                                    recheck_ms=60_000, grace_ms=GRACE_MS,
                                    publish_delay_ms=DELAY_MS))
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    return fn, store, versions


def test_a_timer_publishes_a_window_with_the_rules_of_its_last_input(tmp_path, monkeypatch):
    """A gauge rule added live: its window's final is published by a timer in a task with no
    rows — maybe on a worker that has only seen the query's first rules. The key remembers the
    rule set of its last input and the timer uses it, so the window is published whole."""

    from l2m.engine.pipeline import routing_option
    from l2m.engine.rulesets import routing_file
    from l2m.state.format import CUMULATIVE
    from tests.unit.state.test_state_processor import W, _marked, row

    first, _ = load_text("rules:\n  - {id: c, account: a, name: c_total, kind: counter, "
                         "query: '*', aggregation: count, group_by: [s]}\n")
    added, _ = load_text("rules:\n  - {id: g, account: a, name: g, kind: gauge, query: '*', "
                         "aggregation: max, field: v, group_by: [s]}\n")
    files = tmp_path / "files"
    files.mkdir()
    (files / routing_file("v2")).write_text(routing_option(plan_for([*first, *added])))
    fn, store, _ = _versioned_processor(monkeypatch, files, first)
    before = W + 60_000 + DELAY_MS - GRACE_MS - 1
    rows = [{**row("g", i, float(i + 1), window=W), "ruleset": "v2"} for i in range(2)]
    assert [m for m, *_ in _marked(fn, store, (0, W), rows, now=W, watermark=before)] == [
        None, None]
    # another key's rows on this worker, of the first rules
    _marked(fn, store, (0, CUMULATIVE), [{**row("c", 9), "ruleset": "v1"}], now=W + 2)
    finals = _marked(fn, store, (0, W), now=W + 60_000, watermark=before + 1, timer=True)
    assert finals == [("final", "g", (("s", "s0"),), 1.0), ("final", "g", (("s", "s1"),), 2.0)]
    # After a restart the key's rule set may be one this process never shipped: the key is
    # then under the current rules, as a restart makes it — never a failed task.
    w2 = W + 60_000
    _marked(fn, store, (0, w2), [{**row("g", 0, 3.0, window=w2), "ruleset": "v2"}],
            now=W + 1, watermark=before)
    (files / routing_file("v2")).unlink()
    _marked(fn, store, (0, CUMULATIVE), [{**row("c", 9), "ruleset": "v1"}], now=W + 3)
    assert _marked(fn, store, (0, w2), now=W + 120_000, watermark=before + 60_001,
                   timer=True) == []


class _Context:
    def __init__(self) -> None:
        self.added: list[str] = []

    def addFile(self, path: str) -> None:  # Spark's name
        self.added.append(Path(path).name)


class _Spark:
    def __init__(self) -> None:
        self.sparkContext = _Context()


def test_a_rule_set_is_kept_while_a_batch_planned_with_it_may_be_replayed(tmp_path):
    """The source may read the previous version just before a publication: that version is
    kept until the batch after the newest planned one has committed — across a crash and a
    restart with other rules too, which ships it again for the replay."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RulesetPublisher, ruleset_version

    cfg = JobConfig(checkpoint=str(tmp_path / "ck"))
    query = tmp_path / "ck" / "metrics"
    offsets, commits = query / "offsets", query / "commits"
    offsets.mkdir(parents=True)
    commits.mkdir(parents=True)
    sets = [load_text(RULE.replace("id: a", f"id: {x}").replace("a_total", f"{x}_total"))[0]
            for x in "abc"]
    a, b, c = (ruleset_version(snapshot(r), cfg) for r in sets)

    def batch(n: int, version: str, committed: bool) -> None:
        (offsets / str(n)).write_text(
            f'v1\n{{}}\n{{"topic":"logs","partitions":{{"0":{n}}},"ruleset":"{version}"}}')
        if committed:
            (commits / str(n)).write_text("v1\n{}")

    def stored() -> set[str]:
        return {p.stem for p in (tmp_path / "ck" / "rulesets").glob("*.json")}

    first = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    first.start(sets[0])
    batch(0, a, committed=True)
    first.publish(sets[1])
    assert stored() == {a, b}  # batch 1 may still be planned with a
    batch(1, a, committed=False)  # … and it was; then the process dies
    first.tidy(now=True)
    assert stored() == {a, b}
    spark = _Spark()
    again = RulesetPublisher(spark, cfg, "metrics")  # type: ignore[arg-type]
    again.start(sets[2])
    assert stored() == {a, c}  # b: no batch used it
    assert sorted(spark.sparkContext.added) == sorted([f"l2m-routing-{c}", f"l2m-routing-{a}"])
    (commits / "1").write_text("v1\n{}")  # the replay committed
    again.tidy(now=True)
    assert stored() == {a, c}  # an idle source's tick would repeat batch 1's offset
    batch(2, c, committed=True)
    again.tidy(now=True)
    assert stored() == {c}


def test_a_checkpoint_of_an_older_state_format_takes_rule_changes_only_by_restart(tmp_path):
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RulesetPublisher

    rules, _ = load_text(RULE)
    publisher = RulesetPublisher(_Spark(), JobConfig(checkpoint=str(tmp_path / "ck")),  # type: ignore[arg-type]
                                 "metrics", live=False)
    publisher.start(rules)
    with pytest.raises(RuleSnapshotError,
                       match="need a checkpoint of state format 9; this one holds format 2"):
        publisher.publish(load_text(OTHER)[0])


def test_an_accounts_cap_counts_the_series_of_rules_added_live(tmp_path, monkeypatch):
    """A rule added live counts in its account's series: a third rule's new series are
    refused once the account's cap is full with the first rule's and the second's, both of
    them rules the job did not start with being among them."""
    import pyspark

    from l2m.engine.pipeline import CapsTable, RuleTable, routing_option
    from l2m.engine.rulesets import Versions, routing_file
    from l2m.policy.limits import Limits, SeriesLimits
    from l2m.state.counters import CounterState
    from l2m.state.format import CUMULATIVE
    from l2m.state.gauges import GaugeState
    from l2m.state.processor import MetricProcessor
    from tests.support import tws
    from tests.unit.state.test_state_processor import W, _marked, row

    def rule(x: str) -> str:
        return (f"  - {{id: {x}, account: a, name: {x}_total, kind: counter, query: '*', "
                "aggregation: count, group_by: [s]}\n")

    first, _ = load_text("rules:\n" + rule("p"))
    later, _ = load_text("rules:\n" + rule("p") + rule("q") + rule("r"))
    limits = Limits(series=SeriesLimits(per_rule=0, per_metric=0, per_account=5))
    files = tmp_path / "files"
    files.mkdir()
    (files / routing_file("v2")).write_text(routing_option(plan_for(later, limits=limits)))
    monkeypatch.setattr(pyspark.SparkFiles, "getRootDirectory", staticmethod(lambda: str(files)))
    versions = Versions("v1", routing_option(plan_for(first, limits=limits)))
    store = tws.Store()
    fn = MetricProcessor(CounterState(RuleTable(versions.option, "counter", versions),
                                      ttl_ms=128_000),
                         GaugeState(RuleTable(versions.option, "gauge", versions)),
                         caps=CapsTable(versions.option, versions))
    fn.init(tws.Handle(store))  # type: ignore[arg-type]
    key = (0, CUMULATIVE)
    _marked(fn, store, key, [{**row("p", i), "ruleset": "v1"} for i in range(3)], now=W)
    _marked(fn, store, key, [{**row("q", i), "ruleset": "v2"} for i in range(2)], now=W + 1)
    out = _marked(fn, store, key, [{**row("r", i), "ruleset": "v2"} for i in range(2)],
                  now=W + 2)
    # p's 3 and q's 2 fill the account: r's two new series go to its overflow series
    assert [(rule_id, labels) for _m, rule_id, labels, _v in out if rule_id == "r"] == [
        ("r", (("l2m_overflow", "true"),))]


# --- issue 53: no snapshot dies under a batch ----------------------------------------------

GAUGE = textwrap.dedent("""\
    rules:
      - {id: g, name: g_max, kind: gauge, query: "*", aggregation: max, field: v}
    """)


class _Log:
    """A checkpoint's offset and commit logs, written as Spark writes them."""

    def __init__(self, checkpoint: Path) -> None:
        self.offsets = checkpoint / "metrics" / "offsets"
        self.commits = checkpoint / "metrics" / "commits"
        self.offsets.mkdir(parents=True)
        self.commits.mkdir(parents=True)
        self.store = checkpoint / "rulesets"

    def plan(self, n: int, version: str, watermark: int = 0, at: int = 1) -> None:
        """Batch ``n`` planned with ``version``, run with ``watermark`` at batch time ``at``
        (Spark's processing-time clock: the tests' injected time)."""
        (self.offsets / str(n)).write_text(
            f'v1\n{{"batchWatermarkMs":{watermark},"batchTimestampMs":{at},"conf":{{}}}}\n'
            f'{{"topic":"logs","partitions":{{"0":{n}}},"ruleset":"{version}"}}')

    def commit(self, n: int) -> None:
        (self.commits / str(n)).write_text("v1\n{}")

    def stored(self) -> set[str]:
        return {p.stem for p in self.store.glob("*.json")}

    def windows(self) -> object:
        return json.loads((self.store / "windows").read_text())


def _sets(text: str) -> list[tuple[Rule, ...]]:
    return [tuple(load_text(text.replace("id: ", f"id: {x}").replace("_total", f"{x}_total")
                            .replace("g_max", f"g{x}_max"))[0]) for x in "abc"]


def test_a_rule_set_read_by_batches_planned_during_its_publication_survives_a_crash(tmp_path):
    """Issue 53: while a new version is compiled (100,000 rules: seconds) the source goes on
    planning batches with the running one. Those batches are in the offset log by the time the
    publication ends: the version they name is kept while any of them has not committed, so
    the batch that crashed is replayed after a restart with the rules it was planned with —
    the publisher read the offset log before compiling, and the restart failed with
    RuleSnapshotError."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RulesetPublisher, ruleset_version

    cfg = JobConfig(checkpoint=str(tmp_path / "ck"))
    log = _Log(tmp_path / "ck")
    sets = _sets(RULE)
    a, b, c = (ruleset_version(snapshot(r), cfg) for r in sets)
    first = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    first.start(sets[0])
    log.plan(0, a)
    log.commit(0)
    compile_ = first.compile

    def planning_meanwhile(rules: Sequence[Rule]) -> str:
        log.plan(1, a)  # planned, run and committed while the new rules compile
        log.commit(1)
        log.plan(2, a)  # planned, running when the publication ends
        return compile_(rules)

    first.compile = planning_meanwhile  # type: ignore[method-assign]
    assert first.publish(sets[1]) == b
    assert log.stored() == {a, b}
    first.tidy(now=True)
    assert log.stored() == {a, b}
    # Batch 2 crashes; the next start (with other rules) replays it with a.
    spark = _Spark()
    again = RulesetPublisher(spark, cfg, "metrics")  # type: ignore[arg-type]
    assert again.start(sets[2]).version == c
    assert sorted(spark.sparkContext.added) == sorted([f"l2m-routing-{c}", f"l2m-routing-{a}"])
    assert log.stored() == {a, c}  # b: no batch used it, no key can name it
    log.commit(2)  # the replay committed
    again.tidy(now=True)
    assert log.stored() == {a, c}  # an idle source's tick would repeat batch 2's offset
    log.plan(3, c)
    log.commit(3)
    again.tidy(now=True)
    assert log.stored() == {c}  # a counter-only set: no key names it


def test_a_rule_set_read_by_a_planning_under_way_at_its_replacement_is_kept(tmp_path):
    """The source read the running version just before the new one was written, and logs the
    batch after the publication looked at the offset log: the batch after the newest planned
    keeps it until it has committed; the one after that is planned with the new version."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RulesetPublisher, ruleset_version

    cfg = JobConfig(checkpoint=str(tmp_path / "ck"))
    log = _Log(tmp_path / "ck")
    sets = _sets(RULE)
    a, b, _ = (ruleset_version(snapshot(r), cfg) for r in sets)
    publisher = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    publisher.start(sets[0])
    log.plan(0, a)
    log.commit(0)
    publisher.publish(sets[1])
    publisher.tidy(now=True)
    assert log.stored() == {a, b}  # batch 1 may be planned with a: not logged yet
    log.plan(1, a)
    publisher.tidy(now=True)
    assert log.stored() == {a, b}
    log.commit(1)
    log.plan(2, b)
    publisher.tidy(now=True)
    assert log.stored() == {b}


def test_a_rule_set_with_gauges_is_kept_and_shipped_while_its_windows_may_be_open(tmp_path):
    """A gauge key's timers use the rule set of the key's last input (its ``rs``): a replaced
    version with gauge rules stays in the checkpoint until the committed watermark has passed
    every window its batches touched (the next batch's watermark + grace + a minute) and a
    committed batch started more than a recheck after that was seen (batch time), and a
    restart meanwhile ships it again for those timers."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import (
        RECHECK_MARGIN_MS,
        WINDOW_MARGIN_MS,
        RulesetPublisher,
        ruleset_version,
    )

    grace = 1_200_000
    cfg = JobConfig(checkpoint=str(tmp_path / "ck"), grace_ms=grace)
    log = _Log(tmp_path / "ck")
    sets = _sets(GAUGE)
    a, b, c = (ruleset_version(snapshot(r), cfg) for r in sets)
    publisher = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    publisher.start(sets[0])
    log.plan(0, a, watermark=0, at=T0)
    log.commit(0)
    publisher.publish(sets[1])
    log.plan(1, a, watermark=W0, at=T0 + 1_000)  # planned with a while b was published
    log.commit(1)
    publisher.tidy(now=True)
    assert log.stored() == {a, b}  # a's windows: no later batch says how far they reach
    log.plan(2, b, watermark=W0 + 5_000, at=T0 + 2_000)
    log.commit(2)
    publisher.tidy(now=True)
    bound = W0 + 5_000 + grace + WINDOW_MARGIN_MS
    assert log.windows() == {"format": 2, "versions": {a: {"bound": bound}}}
    assert log.stored() == {a, b}
    # A restart meanwhile (with other rules) ships a again, for its keys' timers.
    spark = _Spark()
    again = RulesetPublisher(spark, cfg, "metrics")  # type: ignore[arg-type]
    again.start(sets[2])
    assert sorted(spark.sparkContext.added) == sorted(
        f"l2m-routing-{v}" for v in (a, b, c))
    log.plan(3, c, watermark=bound - 1, at=T0 + 3_000)
    log.commit(3)
    again.tidy(now=True)
    assert log.stored() == {a, b, c}
    log.plan(4, c, watermark=bound, at=T0 + 4_000)
    log.commit(4)
    again.tidy(now=True)
    # a's windows are past the bound, but a key's timer may be due up to a recheck after
    # batch 4 started; b's last batch (2) saw events up to batch 3's watermark + grace.
    bound_b = bound - 1 + grace + WINDOW_MARGIN_MS
    assert log.windows() == {"format": 2, "versions": {
        a: {"bound": bound, "passed": T0 + 4_000}, b: {"bound": bound_b}}}
    assert log.stored() == {a, b, c}
    log.plan(5, c, watermark=bound, at=T0 + 4_000 + RECHECK_MARGIN_MS)
    log.commit(5)
    again.tidy(now=True)
    assert log.stored() == {a, b, c}
    log.plan(6, c, watermark=bound, at=T0 + 4_001 + RECHECK_MARGIN_MS)
    log.commit(6)
    again.tidy(now=True)
    assert log.stored() == {b, c}  # every timer pending at batch 4 was due in batch 6
    log.plan(7, c, watermark=bound_b, at=T0 + 70_000 + RECHECK_MARGIN_MS)
    log.commit(7)
    again.tidy(now=True)
    assert log.stored() == {b, c}
    log.plan(8, c, watermark=bound_b, at=T0 + 70_001 + 2 * RECHECK_MARGIN_MS)
    log.commit(8)
    again.tidy(now=True)
    assert log.stored() == {c}
    assert log.windows() == {"format": 2, "versions": {}}


def test_a_gauge_rule_set_outlives_a_draining_backlog_s_watermark_until_its_timers_fired(
        tmp_path):
    """Issue 53 follow-up: a backlog drains, the watermark moving an hour a batch, batches a
    second apart. The committed watermark passes a replaced gauge version's window bound long
    before a key's timer (processing time, a recheck) has fired: the version is kept — and
    shipped by a restart in that gap, for the timer-only call that publishes the window with
    a rule the new set removed — until a committed batch started more than a recheck after
    the bound was seen passed. Before, it went at once, and the restart fell back to the
    first rules (l2m.engine.rulesets.Versions.for_key): that window was never published."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RECHECK_MARGIN_MS, RulesetPublisher, ruleset_version

    hour = 3_600_000
    cfg = JobConfig(checkpoint=str(tmp_path / "ck"), grace_ms=0)
    log = _Log(tmp_path / "ck")
    sets = _sets(GAUGE)
    a, b, c = (ruleset_version(snapshot(r), cfg) for r in sets)
    publisher = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    publisher.start(sets[0])
    log.plan(0, a, watermark=W0, at=T0)
    log.commit(0)
    publisher.publish(sets[1])  # a's rule g removed: b's is gb
    for n in range(1, 6):  # the backlog drains under b
        log.plan(n, b, watermark=W0 + n * hour, at=T0 + n * 1_000)
        log.commit(n)
        publisher.tidy(now=True)
        assert log.stored() == {a, b}, n
    assert log.windows() == {"format": 2, "versions": {
        a: {"bound": W0 + hour + 60_000, "passed": T0 + 2_000}}}
    # The driver dies 5 s after a's bound was seen passed; the restart ships a again.
    spark = _Spark()
    again = RulesetPublisher(spark, cfg, "metrics")  # type: ignore[arg-type]
    again.start(sets[2])
    assert f"l2m-routing-{a}" in spark.sparkContext.added
    log.plan(6, c, watermark=W0 + 6 * hour, at=T0 + 2_000 + RECHECK_MARGIN_MS)
    log.commit(6)
    again.tidy(now=True)
    assert log.stored() == {a, b, c}
    log.plan(7, c, watermark=W0 + 7 * hour, at=T0 + 2_001 + RECHECK_MARGIN_MS)
    log.commit(7)
    again.tidy(now=True)
    assert log.stored() == {b, c}


def test_window_bounds_of_format_1_load_and_their_time_is_taken_at_the_next_look(tmp_path):
    """``rulesets/windows`` as the release before wrote it (``{version: bound}``, no batch
    time): each bound loads, and once the committed watermark is past it the version is kept
    for a recheck from the batch at which that was seen — from the first look, by then."""
    from l2m.config.job import JobConfig
    from l2m.streaming.rulesets import RECHECK_MARGIN_MS, RulesetPublisher, ruleset_version

    cfg = JobConfig(checkpoint=str(tmp_path / "ck"))
    log = _Log(tmp_path / "ck")
    sets = _sets(GAUGE)
    a, b, _ = (ruleset_version(snapshot(r), cfg) for r in sets)
    first = RulesetPublisher(_Spark(), cfg, "metrics")  # type: ignore[arg-type]
    first.start(sets[0])
    log.store.joinpath("windows").write_text(json.dumps({a: W0}))
    log.plan(7, b, watermark=W0, at=T0)  # the offset log before it is purged
    log.commit(7)
    spark = _Spark()
    again = RulesetPublisher(spark, cfg, "metrics")  # type: ignore[arg-type]
    again.start(sets[1])
    assert f"l2m-routing-{a}" in spark.sparkContext.added
    assert log.stored() == {a, b}
    assert log.windows() == {"format": 2, "versions": {a: {"bound": W0, "passed": T0}}}
    log.plan(8, b, watermark=W0, at=T0 + RECHECK_MARGIN_MS + 1)
    log.commit(8)
    again.tidy(now=True)
    assert log.stored() == {b}


def test_what_was_shipped_is_remembered_per_live_context_not_per_id(tmp_path):
    """What was shipped is remembered per Spark context, held weakly, not per ``id()``: a
    context freed (or stopped) and another created in its place may share its id, and the
    new one was then given no file (a flake of the format-1 test above, once in three runs:
    ``added == []``). A freed context leaves nothing behind; a new one gets every file."""
    import gc

    from l2m.config.job import JobConfig
    from l2m.streaming import rulesets
    from l2m.streaming.rulesets import RulesetPublisher, ruleset_version

    cfg = JobConfig(checkpoint=str(tmp_path / "ck"))
    rules = _sets(GAUGE)[0]
    version = ruleset_version(snapshot(rules), cfg)
    gc.collect()  # earlier tests' contexts, freed in cycles
    before = len(rulesets._shipped)
    freed = _Spark()
    RulesetPublisher(freed, cfg, "metrics").start(rules)  # type: ignore[arg-type]
    assert freed.sparkContext in rulesets._shipped
    assert len(rulesets._shipped) == before + 1
    del freed
    gc.collect()
    assert len(rulesets._shipped) == before
    spark = _Spark()
    RulesetPublisher(spark, cfg, "metrics").start(rules)  # type: ignore[arg-type]
    assert spark.sparkContext.added == [f"l2m-routing-{version}"]


@pytest.mark.parametrize("text, bounds", [
    (None, {}),
    ('{"v1": 5, "v2": "6", "v3": true}', {"v1": (5, None)}),
    ('{"format": 2, "versions": {"v1": {"bound": 5, "passed": 9}, "v2": {"bound": 6}, '
     '"v3": {"passed": 1}}}', {"v1": (5, 9), "v2": (6, None)}),
    ('{"format": 3, "versions": {"v1": {"bound": 5}}}', {}),  # a later release's: unknown
    ('{"format": 2, "vers', {}),  # a torn write
    ("[1]", {}),
])
def test_window_bounds_are_read_in_both_formats_and_nothing_else(text, bounds):
    from l2m.streaming.rulesets import windows_of

    assert windows_of(text) == bounds


def test_the_recheck_margin_covers_the_job_s_recheck():
    from l2m.streaming.job import RECHECK_MS
    from l2m.streaming.rulesets import RECHECK_MARGIN_MS

    assert RECHECK_MARGIN_MS >= RECHECK_MS


W0 = 1_796_000_000_000  # a watermark (ms)
T0 = 1_796_100_000_000  # a batch time (ms)


def test_a_timer_only_call_runs_under_its_key_s_own_version_or_the_query_s_first(tmp_path):
    """Versions.for_key: a state call with timers only runs under the version its key's state
    names when this worker has it (shipped again after a restart), else under the rules the
    query started with; it never raises. The version is the call's own, passed to the tables
    it reads: nothing another key's call did can change it."""
    from l2m.engine.pipeline import RuleTable, routing_option
    from l2m.engine.rulesets import RuleVersion, Versions, routing_file

    files = tmp_path / "files"
    files.mkdir()
    rules, _ = load_text(RULE)
    later, _ = load_text(OTHER)
    (files / routing_file("v2")).write_text(routing_option(plan_for(later)))
    (files / routing_file("v3")).write_text(routing_option(plan_for(rules)))
    versions = Versions("v1", routing_option(plan_for(rules)))
    table = RuleTable(versions.option, "counter", versions)
    here = str(files)
    assert list(table.at(versions.for_rows("v3", here))) == ["a"]  # another key's rows
    at = versions.for_key("v2", here)
    assert at == RuleVersion("v2", here)
    assert list(versions.routing_at(at).by_kind["counter"]) == ["b"]
    assert list(table.at(at)) == ["b"]
    for absent in ("v9", None, "", "x\0y"):
        at = versions.for_key(absent, here)
        assert at.version == "v1", absent
        assert list(versions.routing_at(at).by_kind["counter"]) == ["a"]
        assert list(table.at(at)) == ["a"]
    assert versions.for_key("v2", None).version == "v1"  # not a Spark worker: no shipped files
    assert list(table) == ["a"]  # as a mapping: the query's first rules


def test_a_rule_snapshot_error_inside_spark_keeps_its_own_code():
    """Raised in a Spark worker (a version not shipped) or in the source's planning process, it
    reaches the driver as text: reported as RULE_SNAPSHOT with its own message, not SPARK."""
    from l2m.runtime.failures import failure

    text = ("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Job aborted\n"
            "org.apache.spark.api.python.PythonException: Traceback (most recent call last):\n"
            '  File "/x/l2m/engine/rulesets.py", line 60, in routing\n'
            "l2m.errors.RuleSnapshotError: rule set 0123456789abcdef was not shipped to this "
            "worker (/tmp/spark/l2m-routing-0123456789abcdef missing)\n")
    error = failure(text)
    assert isinstance(error, RuleSnapshotError)
    assert error.render() == (
        "l2m: error [RULE_SNAPSHOT]: rule set 0123456789abcdef was not shipped to this worker "
        "(/tmp/spark/l2m-routing-0123456789abcdef missing)")


@pytest.mark.parametrize("once", [False, True])
def test_a_start_on_rule_files_that_do_not_validate_runs_the_last_good_set(tmp_path, once):
    """Issue 53: one behaviour for `l2m run` and `l2m run --once` (--once exited 1): the last
    good set the checkpoint keeps, every error of the refused files and that choice on stderr,
    and the refusal on /metrics as a refused reload; without a last good set, the errors and
    exit 1 (the RuleValidationError)."""
    from l2m.errors import RuleValidationError
    from l2m.runtime.reload import rules_at_start

    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_text(RULE + '  - {id: x, name: x_total, kind: counter, '
                                   'query: "level:(error", aggregation: count}\n'
                                   '  - {id: y, name: "bad name", kind: counter, query: "*", '
                                   'aggregation: count}\n')
    good, _ = load_text(OTHER)
    out = io.StringIO()
    ruleset, status = rules_at_start(lambda: load_rules([folder]),
                                     lambda: ("0123456789abcdef", tuple(good)), out, once=once)
    assert [r.id for r in ruleset.rules] == ["b"]
    lines = out.getvalue().splitlines()
    assert [line.split(":")[:2] for line in lines[:-1]] == [
        [str(folder / "a.yaml"), "3"], [str(folder / "a.yaml"), "4"]]
    later = "the next run applies them" if once else "they are applied"
    assert lines[-1] == (
        "l2m run: the rule files do not validate (2 error(s) above); starting with the last "
        "good rule set, version 0123456789abcdef, kept in the checkpoint — fix the files: "
        f"{later} once they validate")
    assert (status.failures, status.successes, status.last_ok, status.last_error,
            status.rules) == (1, 0, False, "RULES", 1)
    assert status.last_at > 0
    with pytest.raises(RuleValidationError):
        rules_at_start(lambda: load_rules([folder]), lambda: None, io.StringIO(), once=once)

    def unreadable() -> None:
        raise RuleSnapshotError("rule set snapshot is not JSON")

    with pytest.raises(RuleValidationError):
        rules_at_start(lambda: load_rules([folder]), unreadable, io.StringIO(), once=once)
    (folder / "a.yaml").write_text(RULE)
    ruleset, status = rules_at_start(lambda: load_rules([folder]), unreadable, out, once=once)
    assert [r.id for r in ruleset.rules] == ["a"]
    assert (status.failures, status.last_ok, status.rules) == (0, True, 1)


def test_a_timer_whose_key_s_version_was_not_shipped_runs_under_the_first_rules(tmp_path,
                                                                              monkeypatch):
    """After a restart a gauge key may name a version this worker cannot read: its timer
    runs under the rules the query started with — not under the version another key's call
    left selected on this worker (here one whose gauge g has another name)."""

    from l2m.engine.pipeline import routing_option
    from l2m.engine.rulesets import routing_file
    from tests.unit.state.test_state_processor import W, _marked, row

    gauge = ("rules:\n  - {id: g, account: a, name: NAME, kind: gauge, query: '*', "
             "aggregation: max, field: v, group_by: [s]}\n")
    first, _ = load_text(RULE)
    files = tmp_path / "files"
    files.mkdir()
    for version, name in (("v2", "g"), ("v3", "g_other")):
        rules, _ = load_text(gauge.replace("NAME", name))
        (files / routing_file(version)).write_text(routing_option(plan_for(rules)))
    fn, store, versions = _versioned_processor(monkeypatch, files, first)
    before = W + 60_000 + DELAY_MS - GRACE_MS - 1
    _marked(fn, store, (0, W), [{**row("g", 0, 3.0, window=W), "ruleset": "v2"}], now=W,
            watermark=before)
    (files / routing_file("v2")).unlink()  # a restart that did not ship v2 again
    # another key's rows on this worker, of v3
    _marked(fn, store, (0, W + 60_000), [{**row("g", 0, 3.0, window=W + 60_000),
                                          "ruleset": "v3"}], now=W + 1, watermark=before)
    assert _marked(fn, store, (0, W), now=W + 60_000, watermark=before + 1, timer=True) == []
    assert versions.for_key("v2", str(files)).version == "v1"
