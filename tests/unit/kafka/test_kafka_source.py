"""The Kafka source without a broker: the task plan (skew-aware splitting, admission
control), the options, and how a read task takes a fetch (l2m/kafka/offsets.py,
l2m/kafka/options.py, l2m/kafka/consumer.py)."""

from __future__ import annotations

from dataclasses import fields

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.config.job import SourceConfig
from l2m.errors import ConfigError
from l2m.kafka.consumer import PartitionReader, Records
from l2m.kafka.offsets import OffsetRange, plan_tasks, rate_limit
from l2m.kafka.options import OPTIONS, SourceOptions
from l2m.kafka.source import KafkaStreamReader


def test_balanced_plan_splits_hot_ranges_and_packs_small_ones():
    tasks = plan_tasks([OffsetRange(0, 0, 700), OffsetRange(1, 10, 110), OffsetRange(2, 5, 5)],
                       max_per_task=250)
    # 800 records, 4 tasks of 200 laid end to end: at most one piece per partition each
    assert tasks == [
        [OffsetRange(0, 0, 200)],
        [OffsetRange(0, 200, 400)],
        [OffsetRange(0, 400, 600)],
        [OffsetRange(0, 600, 700), OffsetRange(1, 10, 110)],
    ]
    # the classic plan: one task per partition range
    assert plan_tasks([OffsetRange(0, 0, 700), OffsetRange(1, 0, 5)], 250, balanced=False) == [
        [OffsetRange(0, 0, 700)], [OffsetRange(1, 0, 5)]]
    # small batch, two cores: two tasks share the partitions
    small = plan_tasks([OffsetRange(p, 0, 10) for p in range(16)], 100_000, min_tasks=2)
    assert [sum(r.size for r in t) for t in small] == [80, 80]


@pytest.mark.parametrize(("hot_share", "total"), [(0.7, 160_000), (0.7, 1_000_000),
                                                  (0.9, 50_000), (0.0625, 160_000)])
def test_balanced_plan_evens_out_a_hot_partition(hot_share, total):
    hot = int(total * hot_share)
    rest = (total - hot) // 15
    ranges = [OffsetRange(0, 0, hot)] + [OffsetRange(p, 0, rest) for p in range(1, 16)]
    tasks = plan_tasks(ranges, max_per_task=total // 16, min_tasks=2)
    loads = [sum(r.size for r in t) for t in tasks]
    assert sum(loads) == hot + 15 * rest
    assert max(loads) - min(loads) <= 1  # equal sizes
    assert all(len({r.partition for r in t}) == len(t) for t in tasks)
    classic = [r.size for t in plan_tasks(ranges, balanced=False) for r in t]
    if hot_share == 0.7:
        assert max(classic) / (sum(classic) / len(classic)) > 11


def test_rate_limit_shares_by_backlog_and_never_starves():
    start = {0: 0, 1: 100, 2: 50}
    latest = {0: 1000, 1: 110, 2: 50}
    assert rate_limit(start, latest, 101) == {0: 100, 1: 101, 2: 50}
    assert rate_limit(start, latest, 10_000) == latest
    # a tiny backlog still moves on
    assert rate_limit({0: 0, 1: 100}, {0: 10_000, 1: 101}, 100) == {0: 99, 1: 101}


def test_options_are_case_insensitive_and_secrets_stay_in_config():
    r = KafkaStreamReader({"kafka.bootstrap.servers": "127.0.0.1:1", "topic": "x",
                           "kafka.sasl.password": "s3cret", "MAXRECORDSPERTASK": "5"},
                          None)  # type: ignore[arg-type]
    assert r.source.max_records_per_task == 5
    assert r.config["sasl.password"] == "s3cret"
    assert "s3cret" not in repr(vars(r).get("topic"))


@pytest.mark.parametrize(("options", "problem"), [
    ({}, "option topic is required"),
    ({"topic": "t"}, "option kafka.bootstrap.servers is required"),
    ({"maxRecordsPerTask": "ten"}, "option maxRecordsPerTask: expected an integer"),
    ({"maxRecordsPerTrigger": "-5"}, "option maxRecordsPerTrigger: must be at least 1"),
    ({"maxRecordsPerTask": "99999999999"}, "option maxRecordsPerTask: must be at most"),
    ({"pollTimeoutMs": "0"}, "option pollTimeoutMs: must be at least 1"),
    ({"failOnDataLoss": "maybe"}, "option failOnDataLoss: expected true or false"),
    ({"planner": "random"}, "option planner: expected balanced or partition"),
    ({"startingOffsets": "soon"}, "option startingOffsets: expected earliest, latest"),
    ({"kafka.bootstrap_servers": "b:1"},
     "option kafka.bootstrap_servers: unknown client setting; did you mean "
     "'kafka.bootstrap.servers'"),
])
def test_source_options_are_checked_in_one_place(options, problem):
    base = {"topic": "t", "kafka.bootstrap.servers": "127.0.0.1:1"}
    raw = options if options in ({}, {"topic": "t"}) else {**base, **options}
    with pytest.raises(ConfigError) as err:  # an l2m error, code CONFIG (not [SPARK])
        SourceOptions.parse(raw)
    assert err.value.code == "CONFIG"
    assert problem in str(err.value)


def test_source_options_parse_what_the_job_sets():
    parsed = SourceOptions.parse({"topic": "logs", "kafka.bootstrap.servers": "b:1",
                                  "kafka.security.protocol": "SSL", "maxRecordsPerTask": "0",
                                  "minPartitions": "4", "planner": "PARTITION",
                                  "failOnDataLoss": "false", "pollTimeoutMs": "1500"})
    assert parsed.kafka == {"bootstrap.servers": "b:1", "security.protocol": "SSL"}
    src = parsed.source
    assert (src.max_records_per_task, src.min_partitions, src.planner) == (None, 4, "partition")
    assert (src.fail_on_data_loss, src.poll_timeout_ms) == (False, 1500)
    # absent options: SourceConfig's defaults, the same as a configuration file's
    assert SourceOptions.parse({"topic": "t", "kafka.bootstrap.servers": "b:1"}).source == \
        SourceConfig()


@pytest.mark.parametrize("source", [
    SourceConfig(),
    SourceConfig(starting_offsets='{"logs": {"0": 5, "1": -2}}', max_records_per_trigger=7,
                 max_records_per_task=None, min_partitions=3, planner="partition",
                 plan_log="/tmp/plan.jsonl", fail_on_data_loss=False, group_id="l2m",
                 poll_timeout_ms=1),
    SourceConfig(starting_offsets="latest", max_records_per_task=1),
])
def test_the_job_settings_come_back_from_the_spark_options_unchanged(source):
    # one type end to end: SourceConfig → format("l2m-kafka")'s options → the same SourceConfig
    options = SourceOptions(topic="logs", kafka={"bootstrap.servers": "b:1", "acks": "all"},
                            source=source, dead_letter_topic="dead", stop_file="/x/STOPPING",
                            routing="r")
    spark = options.spark_options()
    assert set(spark) - {"topic", "kafka.bootstrap.servers", "kafka.acks"} <= \
        {*OPTIONS, "deadLetterTopic", "stopFile", "routing", "parsePlan"}
    assert SourceOptions.parse(spark) == options
    assert SourceOptions.parse({k.lower(): v for k, v in spark.items()}) == options
    reader = KafkaStreamReader(spark, None)  # type: ignore[arg-type]
    assert reader.settings == options
    assert reader.source == source and reader.poll_timeout_s == source.poll_timeout_ms / 1000


def test_every_source_setting_has_one_option_name():
    assert sorted(OPTIONS.values()) == sorted(f.name for f in fields(SourceConfig))
    assert len(set(OPTIONS)) == len({name.lower() for name in OPTIONS})


class _Msg:
    def __init__(self, partition: int, offset: int, error: object = None) -> None:
        self._p, self._o, self._e = partition, offset, error

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def error(self) -> object:
        return self._e


def _take(messages: list[_Msg], whole: bool) -> tuple[list[_Msg], dict[int, int], list[int]]:
    def lost(message: str) -> None:
        raise AssertionError(message)

    reader = PartitionReader("logs", {}, [], 1.0, lost)
    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, Records()
    done = (PartitionReader._take_all(messages, position, ends, buffer) if whole
            else reader._take_each(messages, position, ends, buffer))
    assert done is not None
    return buffer.messages, position, sorted(done)


@pytest.mark.parametrize(("messages", "whole"), [
    ([_Msg(0, 5), _Msg(0, 6), _Msg(0, 7)], True),   # the usual fetch
    ([_Msg(0, 5), _Msg(1, 0), _Msg(0, 6), _Msg(1, 1)], True),  # partitions interleaved
    ([_Msg(0, 5), _Msg(0, 7)], True),                # a gap (compaction, markers)
    ([_Msg(0, 8), _Msg(0, 9), _Msg(0, 10), _Msg(0, 11)], True),  # past the range's end
    ([_Msg(2, 3), _Msg(2, 4), _Msg(1, 9), _Msg(0, 9)], True),  # three pieces read to the end
    ([_Msg(0, 4), _Msg(0, 5)], False),               # before the position
    ([_Msg(0, 6), _Msg(0, 5)], False),               # out of order
    ([_Msg(0, 5), _Msg(0, 6, error=object())], False),  # an error event (EOF, ...)
    ([_Msg(3, 0)], False),                           # a partition not assigned
    ([_Msg(0, 5), _Msg(1, 0), _Msg(2, 2)], False),   # one of several before its position
])
def test_a_fetch_is_taken_whole_exactly_as_one_message_at_a_time(messages, whole):
    """_take_all (numpy over the whole fetch) takes what the per-message path takes, or
    declines (None) and leaves everything untouched."""
    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, Records()
    taken = PartitionReader._take_all(messages, position, ends, buffer)
    if not whole:
        assert taken is None
        assert (len(buffer), position) == (0, {0: 5, 1: 0, 2: 3})
        return
    assert _take(messages, whole=True) == _take(messages, whole=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([0, 1, 2]), st.integers(0, 14)), max_size=12))
def test_random_fetches_are_taken_whole_exactly_as_one_message_at_a_time(fetch):
    # Kafka hands each partition's messages in offset order; interleaving is arbitrary.
    seen: set[tuple[int, int]] = set()
    messages = []
    for p, offset in fetch:
        if (p, offset) not in seen:
            seen.add((p, offset))
            messages.append((p, offset))
    by_partition = {p: sorted(o for q, o in messages if q == p) for p in (0, 1, 2)}
    ordered = [_Msg(p, by_partition[p].pop(0)) for p, _ in messages]
    position, ends, buffer = {0: 5, 1: 0, 2: 3}, {0: 10, 1: 10, 2: 4}, Records()
    if PartitionReader._take_all(ordered, position, ends, buffer) is None:
        assert not ordered or any(m.offset() < {0: 5, 1: 0, 2: 3}[m.partition()]
                                  for m in ordered)
        # Declined: nothing taken, no position moved (the per-message path starts afresh).
        assert (len(buffer), position) == (0, {0: 5, 1: 0, 2: 3})
        return
    assert _take(ordered, whole=True) == _take(ordered, whole=False)
