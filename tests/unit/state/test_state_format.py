"""State outlives releases: golden blobs pin every state layout l2m has written since format
versions exist (``tests/golden/state-v<N>-*.json``); each must keep loading and continuing
exactly. Blobs of an unknown version are refused with ``[STATE_FORMAT]``, naming the version.

Adding a format: write its golden blobs here, keep the old ones, add the version to
``l2m.state.format.READABLE`` with the code that reads it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pandas as pd
import pytest

from l2m.engine.admission import RuleCaps
from l2m.engine.partials import Partial
from l2m.errors import StateFormatError
from l2m.rules.loader import load_text
from l2m.state.checkpoint import check_checkpoint
from l2m.state.counters import CounterState
from l2m.state.format import (
    BLOB_FORMATS,
    FRAME_BYTES,
    READABLE,
    STATE_FORMAT,
    dump_blob,
    dump_entry,
    load_blob,
    load_entry,
)
from l2m.state.function import CUMULATIVE, MetricState
from l2m.state.gauges import GaugeState
from tests.support.outputs import output_samples
from tests.unit.state.test_counter_state import group_state, partial, run
from tests.unit.state.test_gauge_state import group_state as gauge_group_state

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
W = 1_795_341_600_000
RULES, _ = load_text("""\
rules:
  - {id: b, name: bytes_total, kind: counter, query: "*", aggregation: sum, field: b,
     group_by: [svc]}
  - {id: h, name: ms, kind: gauge, query: "*", aggregation: histogram, field: ms,
     buckets: [10, 100]}
  - {id: g, name: reqs, kind: gauge, query: "*", aggregation: count, group_by: [svc]}
""")
BY_ID = {r.id: r for r in RULES}


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_every_readable_version_has_golden_blobs():
    for version in READABLE:
        assert sorted(GOLDEN.glob(f"state-v{version}-*.json")), version
    assert STATE_FORMAT in READABLE
    assert set(BLOB_FORMATS) < set(READABLE)


def test_format_7_frames_an_entry_past_1_kib_and_reads_framed_and_plain_entries():
    small = {"sig": ["count", None, [], ["svc"]], "gen": 0}
    assert dump_entry(small) == orjson.dumps(small)  # as format 6 wrote it
    big = {"s": {f"3:s{i:02d}": [W, {"": [1, 1, 1.0, "1", None, None, W]}]
                 for i in range(40)}}
    plain = orjson.dumps(big)
    raw = dump_entry(big)
    assert len(plain) > FRAME_BYTES
    assert raw[:1] == b"\x00" and int.from_bytes(raw[1:5], "little") == len(plain)
    assert len(raw) < len(plain) / 2
    assert load_entry(raw) == big and load_entry(plain) == big and load_entry(dump_entry(
        small)) == small


def test_v1_counter_blob_continues_exactly_including_an_infinite_sum():
    fn = CounterState(BY_ID, ttl_ms=10**12)
    state = group_state(golden("state-v1-counter.json"), now=W + 1000)
    row = partial("3:web", None, 1, 0.25, W + 3000)
    out = run(fn, ("b", 0), [row, {**row, "series": "-"}], state)
    assert [(s["labels"], s["value"], s["timestamp"]) for s in out] == [
        ({}, "+Inf", W + 3000), ({"svc": "web"}, 6.75, W + 3000)]
    stored = load_blob(state.get[0])
    assert stored["v"] == 1  # a checkpoint keeps the format it was started with
    assert math.isinf(Partial.load(stored["series"]["-"][1][""]).sum)


def test_v1_status_blob_keeps_its_late_count():
    fn = CounterState({}, ttl_ms=10**12)
    state = group_state(golden("state-v1-status.json"), now=W + 1000, watermark=W + 60_000)
    out = run(fn, ("__status__", 0), [partial("2:ok", str(W), 1, 1.0, W + 10)], state)
    assert {s["name"]: s["value"] for s in out} == {"l2m_input_logs_total": 11.0,
                                                   "l2m_late_logs_total": 3.0}


def test_v1_gauge_blob_continues_its_window():
    fn = GaugeState(BY_ID)
    state = gauge_group_state(golden("state-v1-gauge.json"), watermark=0)
    row = {"rule": "h", "series": "", "le": "100", "window": W, "matches": 1, "n": 1,
           "sum": 50.0, "exact_sum": None, "exact_n": 0, "min": 50.0, "max": 50.0,
           "ts": W + 1}
    frames = [pd.DataFrame([row])]
    out = output_samples(fn(("h", 0, W), iter(frames), state))
    assert [(s["name"], s["labels"].get("le"), s["value"]) for s in out] == [
        ("ms_bucket", "10", 2.0), ("ms_bucket", "100", 3.0), ("ms_bucket", "+Inf", 4.0),
        ("ms_sum", None, 559.0), ("ms_count", None, 4.0)]


def _state(counters: CounterState | None = None, gauges: GaugeState | None = None,
           state_format: int = 3, caps: dict[str, RuleCaps] | None = None
           ) -> MetricState:
    return MetricState(counters or CounterState(BY_ID, ttl_ms=10**12),
                       gauges or GaugeState(BY_ID), caps=caps, state_format=state_format)


def test_v2_counter_key_continues_every_rule_in_it():
    fn = _state(state_format=2, caps={"b": RuleCaps(1)})  # caps are off on format 2
    state = group_state(golden("state-v2-counter.json"), now=W + 1000, watermark=W + 60_000)
    rows = [{**partial("3:web", None, 1, 0.25, W + 3000), "rule": "b"},
            {**partial("2:ok", str(W), 1, 1.0, W + 10), "rule": "__status__"}]
    out = run(fn, (0, CUMULATIVE), rows, state)
    assert {(s["name"], tuple(s["labels"].items()), s["value"]) for s in out} == {
        ("bytes_total", (("svc", "web"),), 6.75),
        ("l2m_input_logs_total", (("status", "ok"),), 11.0),
        ("l2m_late_logs_total", (), 4.0)}  # the log's window had closed: late
    stored = load_blob(state.get[0])
    assert stored["v"] == 2 and set(stored["rules"]) == {"b", "__status__"}
    # the untouched series of rule b stays, its infinite sum with it
    assert math.isinf(Partial.load(stored["rules"]["b"]["series"]["-"][1][""]).sum)


def test_v2_gauge_key_continues_its_window_and_drops_removed_rules():
    fn = _state(state_format=2)
    state = gauge_group_state(golden("state-v2-gauge.json"), watermark=0)
    row = {"rule": "h", "series": "", "le": "10", "window": W, "matches": 1, "n": 1,
           "sum": 1.0, "exact_sum": None, "exact_n": 0, "min": 1.0, "max": 1.0, "ts": W + 1}
    out = run(fn, (1, W), [row], state)
    assert [(s["name"], s["labels"].get("le"), s["value"]) for s in out] == [
        ("ms_bucket", "10", 3.0), ("ms_bucket", "100", 4.0), ("ms_bucket", "+Inf", 5.0),
        ("ms_sum", None, 510.0), ("ms_count", None, 5.0)]
    assert load_blob(state.get[0])["v"] == 2
    gone = gauge_group_state(golden("state-v2-gauge.json"), watermark=0)
    assert run(_state(gauges=GaugeState({}), state_format=2), (1, W), [], gone) == []
    assert not gone.exists  # rule h was removed: its window's state goes


def test_v2_counter_key_admits_every_series_whatever_the_caps():
    fn = _state(state_format=2, caps={"b": RuleCaps(1)})
    state = group_state(golden("state-v2-counter.json"), now=W + 1000)
    out = run(fn, (0, CUMULATIVE), [{**partial("3:api", None, 1, 2.0, W + 3000), "rule": "b"}],
              state)
    assert [(s["labels"], s["value"]) for s in out] == [({"svc": "api"}, 2.0)]


def test_v3_counter_key_continues_its_overflow_and_refusal_counts():
    fn = _state(caps={"b": RuleCaps(1)})
    state = group_state(golden("state-v3-counter.json"), now=W + 1000)
    rows = [{**partial("3:web", None, 1, 0.25, W + 3000), "rule": "b"},
            {**partial("3:api", None, 1, 5.0, W + 3500), "rule": "b"}]
    out = run(fn, (0, CUMULATIVE), rows, state)
    assert [(s["name"], s["labels"], s["value"], s["timestamp"]) for s in out] == [
        ("bytes_total", {"l2m_overflow": "true"}, 9.0, W + 3500),
        ("bytes_total", {"svc": "web"}, 6.75, W + 3000),
        ("l2m_series_refused_total", {"account": "", "limit": "rule", "rule": "b"}, 3.0,
         W + 3500)]
    stored = load_blob(state.get[0])
    assert stored["v"] == 3 and set(stored["rules"]["b"]["series"]) == {"3:web", "!overflow"}


def test_v3_gauge_window_continues_its_overflow_and_refusal_counts():
    fn = _state(caps={"g": RuleCaps(1)})
    state = gauge_group_state(golden("state-v3-gauge.json"), watermark=0)
    row = {"rule": "g", "series": "3:api", "le": "", "window": W, "matches": 1, "n": 1,
           "sum": 1.0, "exact_sum": None, "exact_n": 0, "min": 1.0, "max": 1.0, "ts": W + 5}
    out = run(fn, (1, W), [row], state)
    assert [(s["name"], s["labels"], s["value"], s["timestamp"]) for s in out] == [
        ("reqs", {"l2m_overflow": "true"}, 2.0, W),
        ("l2m_series_refused", {"account": "", "limit": "rule", "rule": "g"}, 2.0, W)]
    assert load_blob(state.get[0])["v"] == 3


def test_a_blob_without_a_version_is_refused_naming_what_it_found():
    with pytest.raises(StateFormatError) as err:
        load_blob(golden("state-v0-counter.json"))
    assert err.value.code == "STATE_FORMAT"
    assert "format 0" in str(err.value) and "Upgrading" in str(err.value)
    with pytest.raises(StateFormatError, match="format 7"):
        load_blob(orjson.dumps({"v": 7}))


def test_blobs_are_written_in_the_format_asked_for_and_never_as_format_4():
    assert orjson.loads(dump_blob({"series": {}}, 3)) == {"v": 3, "series": {}}
    with pytest.raises(StateFormatError, match="blobs of format 4"):
        load_blob(orjson.dumps({"v": 4, "series": {}}))


def test_the_checkpoint_marker_is_written_on_a_new_checkpoint_and_checked(tmp_path):
    root = tmp_path / "ckpt"
    check_checkpoint(str(root), "metrics")
    assert json.loads((root / "l2m.json").read_text()) == {"state_format": STATE_FORMAT}
    check_checkpoint(str(root), "metrics")  # ours: accepted
    (root / "l2m.json").write_text('{"state_format": 0}')
    with pytest.raises(StateFormatError, match="holds state format 0"):
        check_checkpoint(str(root), "metrics")
    legacy = tmp_path / "legacy"
    (legacy / "counters").mkdir(parents=True)  # the two-query layout
    with pytest.raises(StateFormatError, match="before state format versions"):
        check_checkpoint(str(legacy), "metrics")


@pytest.mark.parametrize("found", [4, 5, 6])
def test_a_format_4_5_or_6_checkpoint_continues_as_format_7_and_is_marked_so(tmp_path, found):
    """Format 4's entries are format 5's own entries, format 5's groups format 6's before they
    are bucketed, and format 6's entries format 7's unframed ones: the job continues them, and
    the marker says 7 from then on, so that a release reading only formats up to 6 refuses the
    checkpoint (its large entries are framed, its small rules' entries move into groups and
    buckets an older release would not read)."""
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "l2m.json").write_text(f'{{"state_format": {found}}}\n')
    assert check_checkpoint(str(root), "metrics") == 7 == STATE_FORMAT
    assert json.loads((root / "l2m.json").read_text()) == {"state_format": 7}
    assert check_checkpoint(str(root), "metrics") == 7


def test_a_format_2_blob_in_a_job_that_took_its_checkpoint_for_format_3_is_refused():
    # an object-store checkpoint has no l2m.json: the blob's own version must match
    state = group_state(golden("state-v2-counter.json"), now=W + 1000)
    with pytest.raises(StateFormatError, match="holds state format 2 blobs"):
        run(_state(), (0, CUMULATIVE), [], state)


class _ObjectStore:
    """An object store's files, as Spark's Hadoop file systems would show them."""

    def __init__(self, files: dict[str, str], dirs: set[str]) -> None:
        self.files, self.dirs = files, dirs

    def read(self, path: str) -> str | None:
        return self.files.get(path)

    def write(self, path: str, text: str) -> None:
        self.files[path] = text

    def is_dir(self, path: str) -> bool:
        return path in self.dirs


def test_an_object_store_checkpoint_is_marked_and_an_unmarked_started_one_is_format_3():
    new = _ObjectStore({}, set())
    assert check_checkpoint("s3a://b/cp/", "metrics", new) == STATE_FORMAT
    assert json.loads(new.files["s3a://b/cp/l2m.json"]) == {"state_format": STATE_FORMAT}
    assert check_checkpoint("s3a://b/cp", "metrics", new) == STATE_FORMAT
    # started by a release that marked local checkpoints only: format 3, its blobs checked
    old = _ObjectStore({}, {"s3a://b/cp/metrics/offsets"})
    assert check_checkpoint("s3a://b/cp", "metrics", old) == 3 and not old.files
    bad = _ObjectStore({"gs://b/cp/l2m.json": '{"state_format": 99}'}, set())
    with pytest.raises(StateFormatError, match="holds state format 99"):
        check_checkpoint("gs://b/cp", "metrics", bad)
    assert check_checkpoint("s3a://b/cp", "metrics") == STATE_FORMAT  # nothing to read with
