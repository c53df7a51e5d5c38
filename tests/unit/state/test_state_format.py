"""State outlives releases: golden state pins both formats l2m continues
(``tests/golden/state-v<N>-*.json``: format 2, which releases 0.1.0 and 0.2.0 wrote, here;
format 9's in ``test_state_processor.py``); each must keep loading and continuing exactly.
Every other format — 0, 1 (builds before 0.1.0) and 3 to 8 (0.3.0 development builds) — is
refused with one ``[STATE_FORMAT]`` line naming it, who wrote it and what to do.

Adding a format: write its golden state, keep format 2's, add the version to
``l2m.state.format.READABLE`` with the code that reads it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson
import pandas as pd
import pytest

from l2m.engine.partials import Partial
from l2m.errors import StateFormatError
from l2m.rules.loader import load_text
from l2m.state.checkpoint import check_checkpoint
from l2m.state.counters import CounterState
from l2m.state.format import (
    BLOB_FORMAT,
    CUMULATIVE,
    FRAME_BYTES,
    READABLE,
    STATE_FORMAT,
    UPGRADE_HINT,
    dump_blob,
    dump_entry,
    load_blob,
    load_entry,
)
from l2m.state.format2 import MetricState
from l2m.state.gauges import GaugeState
from tests.support.outputs import output_samples
from tests.unit.state.test_counter_state import group_state, partial
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


def run(fn: MetricState, key: tuple, rows: list[dict], state: object) -> list[dict]:
    frames = [pd.DataFrame(rows)] if rows else []
    return output_samples(fn(key, iter(frames), state))  # type: ignore[arg-type]


def golden(name: str) -> bytes:
    return (GOLDEN / name).read_bytes()


def test_every_readable_version_has_golden_blobs():
    for version in READABLE:
        assert sorted(GOLDEN.glob(f"state-v{version}-*.json")), version
    assert READABLE == (BLOB_FORMAT, STATE_FORMAT) == (2, 9)
    assert sorted(p.name for p in GOLDEN.glob("state-v*.json")) == [
        "state-v0-counter.json", "state-v2-counter.json", "state-v2-gauge.json",
        "state-v9-counter.json", "state-v9-gauge.json"]  # format 0's: the refusal's


def test_format_9_frames_an_entry_past_1_kib_and_reads_framed_and_plain_entries():
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


def _state(counters: CounterState | None = None, gauges: GaugeState | None = None
           ) -> MetricState:
    return MetricState(counters or CounterState(BY_ID, ttl_ms=10**12),
                       gauges or GaugeState(BY_ID))


def test_v2_counter_key_continues_every_rule_in_it():
    fn = _state()
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
    fn = _state()
    state = gauge_group_state(golden("state-v2-gauge.json"), watermark=0)
    row = {"rule": "h", "series": "", "le": "10", "window": W, "matches": 1, "n": 1,
           "sum": 1.0, "exact_sum": None, "exact_n": 0, "min": 1.0, "max": 1.0, "ts": W + 1}
    out = run(fn, (1, W), [row], state)
    assert [(s["name"], s["labels"].get("le"), s["value"]) for s in out] == [
        ("ms_bucket", "10", 3.0), ("ms_bucket", "100", 4.0), ("ms_bucket", "+Inf", 5.0),
        ("ms_sum", None, 510.0), ("ms_count", None, 5.0)]
    assert load_blob(state.get[0])["v"] == 2
    gone = gauge_group_state(golden("state-v2-gauge.json"), watermark=0)
    assert run(_state(gauges=GaugeState({})), (1, W), [], gone) == []
    assert not gone.exists  # rule h was removed: its window's state goes


def test_v2_counter_key_admits_every_series():
    fn = _state()
    state = group_state(golden("state-v2-counter.json"), now=W + 1000)
    out = run(fn, (0, CUMULATIVE), [{**partial("3:api", None, 1, 2.0, W + 3000), "rule": "b"}],
              state)
    assert [(s["labels"], s["value"]) for s in out] == [({"svc": "api"}, 2.0)]


def test_a_blob_without_a_version_is_refused_naming_what_it_found():
    with pytest.raises(StateFormatError) as err:
        load_blob(golden("state-v0-counter.json"))
    assert err.value.code == "STATE_FORMAT"
    assert "format 0" in str(err.value) and "Upgrading" in str(err.value)
    with pytest.raises(StateFormatError, match="format 9"):
        load_blob(orjson.dumps({"v": 8}))


def test_blobs_are_written_in_format_2():
    assert orjson.loads(dump_blob({"rules": {}})) == {"v": 2, "rules": {}}


DEV_BUILDS = "0.3.0 development builds"


@pytest.mark.parametrize("found", [1, 3, 4, 5, 6, 7, 8])
def test_formats_1_and_3_to_8_are_refused_with_who_wrote_them_and_the_upgrade_path(
        tmp_path, found):
    """No release wrote them: format 1 only builds before 0.1.0, formats 3 to 8 only 0.3.0
    development builds. Refused before Spark starts (the marker), and at the first blob or
    key (an object-store checkpoint without a marker)."""
    writer = "l2m builds before 0.1.0" if found == 1 else DEV_BUILDS
    root = tmp_path / "ckpt"
    root.mkdir()
    (root / "l2m.json").write_text(f'{{"state_format": {found}}}\n')
    with pytest.raises(StateFormatError) as err:
        check_checkpoint(str(root), "metrics")
    assert err.value.code == "STATE_FORMAT"
    assert str(err.value) == (
        f"checkpoint {root} holds state format {found}, which only {writer} wrote; this l2m "
        f"continues format 2 (releases 0.1.0 and 0.2.0) and format 9. {UPGRADE_HINT}")
    assert "\n" not in str(err.value)
    assert "`source.starting_offsets` set to where the old job stopped" in UPGRADE_HINT
    assert 'docs/streaming.md, "Upgrading"' in UPGRADE_HINT
    assert json.loads((root / "l2m.json").read_text()) == {"state_format": found}  # untouched
    with pytest.raises(StateFormatError) as blob:
        load_blob(orjson.dumps({"v": found, "rules": {}}))
    assert str(blob.value) == (
        f"the checkpoint holds state format {found}, which only {writer} wrote; this l2m "
        f"continues format 2 (releases 0.1.0 and 0.2.0) and format 9. {UPGRADE_HINT}")


def test_the_checkpoint_marker_is_written_on_a_new_checkpoint_and_checked(tmp_path):
    root = tmp_path / "ckpt"
    check_checkpoint(str(root), "metrics")
    assert json.loads((root / "l2m.json").read_text()) == {"state_format": STATE_FORMAT}
    check_checkpoint(str(root), "metrics")  # ours: accepted
    (root / "l2m.json").write_text('{"state_format": 2}')
    assert check_checkpoint(str(root), "metrics") == 2  # 0.1.0's and 0.2.0's: continued
    assert json.loads((root / "l2m.json").read_text()) == {"state_format": 2}
    (root / "l2m.json").write_text('{"state_format": 0}')
    with pytest.raises(StateFormatError, match="holds state format 0"):
        check_checkpoint(str(root), "metrics")
    legacy = tmp_path / "legacy"
    (legacy / "counters").mkdir(parents=True)  # the two-query layout
    with pytest.raises(StateFormatError, match="before state format versions"):
        check_checkpoint(str(legacy), "metrics")


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


def test_an_object_store_checkpoint_is_marked_and_an_unmarked_started_one_is_format_2():
    new = _ObjectStore({}, set())
    assert check_checkpoint("s3a://b/cp/", "metrics", new) == STATE_FORMAT
    assert json.loads(new.files["s3a://b/cp/l2m.json"]) == {"state_format": STATE_FORMAT}
    assert check_checkpoint("s3a://b/cp", "metrics", new) == STATE_FORMAT
    # started by a release that marked local checkpoints only (0.1.0, 0.2.0): format 2, its
    # blobs checked (a development build's format 3 one is refused at its first batch)
    old = _ObjectStore({}, {"s3a://b/cp/metrics/offsets"})
    assert check_checkpoint("s3a://b/cp", "metrics", old) == 2 and not old.files
    # the two-query layout (before 0.1.0): refused there too, not started over from empty state
    for dirs in ({"s3a://b/cp/counters"}, {"s3a://b/cp/gauges", "s3a://b/cp/metrics/offsets"}):
        with pytest.raises(StateFormatError, match="before state format versions"):
            check_checkpoint("s3a://b/cp", "metrics", _ObjectStore({}, dirs))
    bad = _ObjectStore({"gs://b/cp/l2m.json": '{"state_format": 99}'}, set())
    with pytest.raises(StateFormatError, match="holds state format 99"):
        check_checkpoint("gs://b/cp", "metrics", bad)
    assert check_checkpoint("s3a://b/cp", "metrics") == STATE_FORMAT  # nothing to read with


def test_format_9_s_code_never_imports_format_2_s():
    """Format 2's code (l2m.state.format2) can go with the format: nothing of format 9's
    depends on it."""
    import ast

    state = Path(__file__).resolve().parents[3] / "l2m" / "state"
    for name in ("processor", "counterkeys", "windowkeys", "keycall", "rulebook", "buckets",
                 "caps", "variables", "mapio", "pages", "rows", "output", "counters",
                 "gauges", "format"):
        tree = ast.parse((state / f"{name}.py").read_text())
        imported = {node.module for node in ast.walk(tree)
                    if isinstance(node, ast.ImportFrom) and node.module}
        assert "l2m.state.format2" not in imported, name
