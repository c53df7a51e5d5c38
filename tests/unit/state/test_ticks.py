"""Ticks (issue 53, deliverable 5) without a JVM: an idle source advances its offset's ``tick``
once a recheck boundary has passed since its last batch, at most twice after data, so that a
batch without rows runs the state's timers; under availableNow one tick follows the data; an
offset written before ticks decodes and continues; the state's window timers are due on
multiples of the recheck, so one tick runs them all."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import l2m.kafka.source as source_module
from l2m.dev.memory import MemoryStreamReader, append
from l2m.engine.routing import plan_for
from l2m.kafka.options import SourceOptions
from l2m.kafka.source import TICKS_PER_IDLE, KafkaStreamReader, ticked
from l2m.rules.loader import load_text
from l2m.state.counters import CounterState
from l2m.state.format import BLOB_FORMAT, STATE_FORMAT
from l2m.state.gauges import GaugeState
from l2m.state.processor import MetricProcessor
from l2m.streaming.job import timers
from tests.support import tws
from tests.unit.state.test_state_processor import COUNTERS, GAUGES, W, row

R = 60_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now
        self.slept: list[int] = []

    def __call__(self) -> int:
        return self.now

    def sleep(self, ms: int) -> None:
        self.slept.append(ms)
        self.now += ms


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock(W + 10)
    monkeypatch.setattr(source_module, "_now_ms", clock)
    monkeypatch.setattr(source_module, "_sleep_ms", clock.sleep)
    return clock


def kafka_reader(monkeypatch: pytest.MonkeyPatch, ends: dict[int, int],
                 tick_ms: int = R) -> KafkaStreamReader:
    options = SourceOptions(topic="logs", kafka={"bootstrap.servers": "b:1"},
                            tick_ms=str(tick_ms) if tick_ms else None)
    reader = KafkaStreamReader(options.spark_options(), None)  # type: ignore[arg-type]
    monkeypatch.setattr(reader, "_end_offsets", lambda start=None: dict(ends))
    return reader


def test_an_idle_kafka_source_ticks_once_a_boundary_has_passed_twice_at_most(monkeypatch,
                                                                            clock):
    ends = {0: 5, 1: 3}
    src = kafka_reader(monkeypatch, ends)
    old = {"topic": "logs", "partitions": {"0": 0, "1": 0}}  # written before ticks
    first = src.latestOffset(old, source_module.ReadAllAvailable())
    # its batch's timers: due at the next minute boundary
    assert first == {"topic": "logs", "partitions": {"0": 5, "1": 3}, "timers": W + R}
    clock.now = W + R - 1  # idle, no boundary passed since the data
    assert src.latestOffset(first, source_module.ReadAllAvailable()) is first
    clock.now = W + R
    tick1 = src.latestOffset(first, source_module.ReadAllAvailable())
    assert tick1 == {**first, "tick": 1, "timers": W + 2 * R}
    assert src.latestOffset(tick1, source_module.ReadAllAvailable()) is tick1  # same minute
    clock.now = W + 2 * R + 5
    tick2 = src.latestOffset(tick1, source_module.ReadAllAvailable())
    assert tick2 == {**first, "tick": 2, "timers": W + 3 * R} and TICKS_PER_IDLE == 2
    clock.now = W + 10 * R  # ticked twice since the data: the watermark stands still
    assert src.latestOffset(tick2, source_module.ReadAllAvailable()) is tick2
    # data again: its offset carries the ticks on; the next idle boundary ticks again
    ends[0] = 9
    data = src.latestOffset(tick2, source_module.ReadAllAvailable())
    assert data == {"topic": "logs", "partitions": {"0": 9, "1": 3}, "tick": 2,
                    "timers": W + 11 * R}
    assert src._decode(data) == {0: 9, 1: 3}
    clock.now = W + 11 * R
    assert src.latestOffset(data, source_module.ReadAllAvailable()) == {
        **data, "tick": 3, "timers": W + 12 * R}
    # the planned tasks of a tick: none
    assert src.partitions(data, {**data, "tick": 3}) == []


def test_without_a_tick_interval_an_idle_source_never_ticks(monkeypatch, clock):
    src = kafka_reader(monkeypatch, {0: 5}, tick_ms=0)
    start = {"topic": "logs", "partitions": {"0": 5}}
    clock.now = W + 100 * R
    assert src.latestOffset(start, source_module.ReadAllAvailable()) is start


def test_available_now_ends_with_one_tick_after_the_data(monkeypatch, clock):
    src = kafka_reader(monkeypatch, {0: 5}, tick_ms=1)  # --once: a 1 ms recheck (job.timers)
    src.prepareForTriggerAvailableNow()
    start = {"topic": "logs", "partitions": {"0": 0}}
    data = src.latestOffset(start, source_module.ReadAllAvailable())
    assert data == {"topic": "logs", "partitions": {"0": 5}, "timers": W + 12}
    clock.now += 50
    last = src.latestOffset(data, source_module.ReadAllAvailable())  # no boundary needed
    assert last == {**data, "tick": 1, "timers": W + 62}
    assert src.latestOffset(last, source_module.ReadAllAvailable()) is last  # the run ends
    # a run with nothing new: its one batch is the tick
    clock.now += 50
    again = kafka_reader(monkeypatch, {0: 5}, tick_ms=1)
    again.prepareForTriggerAvailableNow()
    assert again.latestOffset(last, source_module.ReadAllAvailable()) == {
        **data, "tick": 2, "timers": W + 112}
    assert clock.slept == []  # the timers of earlier batches were all due


def test_available_now_ticks_once_a_continuous_runs_timers_are_due(monkeypatch, clock):
    """A ``--once`` run within a minute of a continuous run: window keys without new logs
    keep the continuous run's timers (the next minute boundary), and a timer runs only once
    due, so the run's tick waits for them — then the tick batch runs every one (and looks at
    them again on the 1 ms clock)."""
    live = kafka_reader(monkeypatch, {0: 5})
    last = live.latestOffset({"topic": "logs", "partitions": {"0": 0}},
                             source_module.ReadAllAvailable())
    assert last["timers"] == W + R
    clock.now = W + 20_000  # stopped; --once starts
    ends = {0: 7}
    once = kafka_reader(monkeypatch, ends, tick_ms=1)
    once.prepareForTriggerAvailableNow()
    data = once.latestOffset(last, source_module.ReadAllAvailable())
    assert data == {"topic": "logs", "partitions": {"0": 7}, "timers": W + R}  # carried on
    assert clock.slept == []  # data does not wait
    tick = once.latestOffset(data, source_module.ReadAllAvailable())
    assert clock.slept == [R - 20_000 + 1] and clock.now == W + R + 1
    assert tick == {**data, "tick": 1, "timers": W + R + 3}
    assert once.latestOffset(tick, source_module.ReadAllAvailable()) is tick
    # timers far past a minute or two (a test's recheck that never ticks): not waited for
    far = kafka_reader(monkeypatch, ends, tick_ms=1)
    far.prepareForTriggerAvailableNow()
    assert far.latestOffset({**tick, "timers": clock.now + 10 * R},
                            source_module.ReadAllAvailable())["tick"] == 2
    assert clock.slept == [R - 20_000 + 1]


def test_a_stopping_source_does_not_tick(monkeypatch, clock, tmp_path):
    stop = tmp_path / "STOPPING"
    stop.write_text("")
    options = SourceOptions(topic="logs", kafka={"bootstrap.servers": "b:1"}, tick_ms=str(R),
                            stop_file=str(stop))
    src = KafkaStreamReader(options.spark_options(), None)  # type: ignore[arg-type]
    clock.now = W + 5 * R
    start = {"topic": "logs", "partitions": {"0": 5}}
    assert src.latestOffset(start, source_module.ReadAllAvailable()) is start


def test_ticked_counts_up_from_an_offset_without_ticks():
    assert ticked({"partitions": {"0": 1}, "ruleset": "v"}) == {
        "partitions": {"0": 1}, "ruleset": "v", "tick": 1}
    assert ticked({"partitions": {}, "tick": 7})["tick"] == 8


def memory_reader(folder: Path, tick_ms: int = R) -> MemoryStreamReader:
    rules, _ = load_text(textwrap.dedent("""\
        rules:
          - {id: n, name: n_total, kind: counter, query: "*", aggregation: count}
        """))
    return MemoryStreamReader({"path": str(folder), "partitions": "1",
                               "parsePlan": plan_for(rules).plan.to_json(),
                               "tickMs": str(tick_ms)})


def test_the_memory_source_ticks_as_the_kafka_source(tmp_path, clock):
    append(tmp_path, 0, [b"{}"], [W])
    src = memory_reader(tmp_path)
    start = src.initialOffset()
    data = src.latestOffset(start, None)
    assert data == {"partitions": {"0": 1}, "timers": W + R}
    assert src.latestOffset(data, None) is data
    clock.now = W + R
    tick = src.latestOffset(data, None)
    assert tick == {"partitions": {"0": 1}, "tick": 1, "timers": W + 2 * R}
    assert src.partitions(data, tick) == []
    append(tmp_path, 0, [b"{}"], [W])
    assert src.latestOffset(tick, None) == {"partitions": {"0": 2}, "tick": 1,
                                            "timers": W + 2 * R}
    once = memory_reader(tmp_path, tick_ms=1)
    once.prepareForTriggerAvailableNow()
    end = {"partitions": {"0": 2}, "tick": 1, "timers": W + 2 * R}
    last = once.latestOffset(end, None)
    assert clock.slept == [R + 1]  # the continuous run's timers were due first
    assert last == {**end, "tick": 2, "timers": W + 2 * R + 3}
    assert once.latestOffset(last, None) is last


def test_window_timers_are_due_on_multiples_of_the_recheck():
    """Every window key's timer is due at the next multiple of the recheck after the batch
    that looked at it, so one tick after that multiple runs them all; a key whose timer a
    longer recheck set (a continuous run's, before a ``--once`` run's of 1 ms) is looked at
    on the new clock."""
    def processor(recheck: int) -> tuple[MetricProcessor, tws.Store]:
        store = tws.Store()
        fn = MetricProcessor(CounterState(COUNTERS, ttl_ms=128_000),
                             GaugeState(GAUGES, recheck_ms=recheck, grace_ms=1_200_000))
        fn.init(tws.Handle(store))  # type: ignore[arg-type]
        return fn, store

    fn, store = processor(R)
    tws.call(fn, store, (0, W), [row("g", 0, window=W)], now=W + 7)
    tws.call(fn, store, (1, W + R), [row("g", 0, window=W + R)], now=W + 59_999)
    assert store.timers == {(0, W): {W + R}, (1, W + R): {W + R}}
    tws.fire(fn, store, now=W + R + 3, watermark=1)
    assert store.timers == {(0, W): {W + 2 * R}, (1, W + R): {W + 2 * R}}
    once, _ = processor(1)
    once.init(tws.Handle(store))  # type: ignore[arg-type]
    tws.call(once, store, (0, W), [row("g", 1, window=W)], now=W + R + 10)
    assert store.timers[(0, W)] == {W + R + 11}


def test_once_ticks_only_for_state_formats_that_publish_windows():
    """``--once``: format 7 looks at every window key in each batch (a 1 ms recheck) and the
    source ticks once after the data; format 2 publishes no final windows and its minute-long
    timeouts would not run in that tick: no tick. A continuous run ticks on its recheck
    whatever the format (format 2: to let closed windows go)."""
    assert timers(True, STATE_FORMAT, R) == (1, 1)
    for old in (BLOB_FORMAT,):
        assert timers(True, old, R) == (R, 0)
        assert timers(False, old, R) == (R, R)
    assert timers(False, STATE_FORMAT, R) == (R, R)
