"""Live rules without a JVM (issue 23): the stored rule set format (pinned by a golden file),
the reload watcher's decisions, the offset log's rule set version, the partials' tags."""

from __future__ import annotations

import io
import os
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa
import pytest

from l2m.engine.admission import placement_shard
from l2m.engine.partials import PARTIAL_ARROW
from l2m.engine.routing import plan_for
from l2m.engine.rulesets import STREAM_PARTIAL_ARROW, places, tag
from l2m.errors import RuleSnapshotError
from l2m.rules.loader import load_rules, load_text
from l2m.rules.model import Rule
from l2m.rules.snapshot import SNAPSHOT_FORMAT, restore, snapshot, version_of
from l2m.runtime.reload import RuleWatcher, fingerprint
from l2m.streaming.rulesets import ruleset_of

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "ruleset-v1.json"
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
    (b'{"format": 2, "rules": []}', "format 2; this l2m reads format 1"),
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


def test_the_watcher_publishes_a_changed_set_and_nothing_when_nothing_changed(tmp_path):
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_text(RULE)
    out, publisher = io.StringIO(), _Publisher()
    watcher = _watcher(folder, out)
    assert watcher.check(publisher) is None and publisher.published == []
    (folder / "b.yaml").write_text(OTHER)
    _later()
    assert watcher.check(publisher) is True
    assert sorted(r.id for r in publisher.published[-1]) == ["a", "b"]
    assert watcher.status.successes == 1 and watcher.status.rules == 2
    assert "rules reloaded: 2 rules, version " in out.getvalue()
    _later()
    assert watcher.check(publisher) is None  # seen: nothing to do


def test_the_watcher_refuses_a_set_that_does_not_validate_whole(tmp_path):
    folder = tmp_path / "rules"
    folder.mkdir()
    (folder / "a.yaml").write_text(RULE)
    out, publisher = io.StringIO(), _Publisher()
    watcher = _watcher(folder, out)
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
