"""The driver's metrics from a recorded query progress and accumulator values (no JVM), and
the HTTP endpoint that serves them."""

from __future__ import annotations

import pickle
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from typing import Any

from prometheus_client import generate_latest

from l2m.config.job import JobConfig, MonitoringConfig, Topics
from l2m.rules.model import Rule
from l2m.runtime.endpoint import Endpoint
from l2m.runtime.sparkstatus import ExecutorLoad
from l2m.runtime.telemetry import Telemetry, expected_executors
from l2m.state.tally import (
    CUMULATIVE,
    InputCount,
    LateCount,
    Latest,
    MatchCount,
    SeriesCount,
)
from tests.support.web import post

RULES = [Rule(id="a", name="a_total", kind="counter", query="*", aggregation="count"),
         Rule(id="b", name="b", kind="gauge", query="*", aggregation="max", field="x")]
CFG = JobConfig(topics=Topics(logs="logs"), trigger_ms=10_000)

# A micro-batch's progress as Spark reports it (the fields the metrics read).
PROGRESS = {
    "id": "q", "runId": "r", "batchId": 7, "timestamp": "2026-11-22T10:00:00.000Z",
    "numInputRows": 1500, "inputRowsPerSecond": 150.0, "processedRowsPerSecond": 750.0,
    "durationMs": {"triggerExecution": 2000, "addBatch": 1500},
    "eventTime": {"watermark": "2026-11-22T09:40:00.000Z", "max": "2026-11-22T09:59:30.000Z"},
    "stateOperators": [{"numRowsTotal": 42, "memoryUsedBytes": 4096}],
    "sources": [{"description": "l2m-kafka", "startOffset": {"partitions": {"0": 0, "1": 0}},
                 "endOffset": '{"partitions": {"0": 1000, "1": 500}}',
                 "latestOffset": {"partitions": {"0": 1200, "1": 500}},
                 "numInputRows": 1500}],
}


@dataclass
class Value:
    value: Any


@dataclass
class FakeReduction:
    rows_in: Value
    rows_out: Value
    matches: Value | None


@dataclass
class FakeCounts:
    reduction: FakeReduction
    tally: Value | None
    activity: Value | None = None


def counts(rows_in: int, rows_out: int, matches: dict[Any, float],
           tally: dict[Any, float], activity: dict[Any, float] | None = None) -> FakeCounts:
    return FakeCounts(FakeReduction(Value(rows_in), Value(rows_out), Value(matches)),
                      Value(tally), Value(activity or {}))


def sample(t: Telemetry, name: str, **labels: str) -> float | None:
    return t.registry.get_sample_value(name, labels)


def test_a_batch_sets_the_batch_partition_executor_and_state_metrics():
    t = Telemetry(CFG, RULES, clock=lambda: 1_795_341_600.0)  # 2026-11-22T10:00:00Z
    t.batch(PROGRESS, {"1": ExecutorLoad(3, 1000), "2": ExecutorLoad(1, 500)}, registered=2)
    assert sample(t, "l2m_batches_total") == 1
    assert sample(t, "l2m_last_batch_duration_seconds") == 2.0
    assert sample(t, "l2m_batch_duration_seconds_bucket", le="2.0") == 1
    assert sample(t, "l2m_batch_duration_seconds_bucket", le="1.0") == 0
    assert sample(t, "l2m_last_batch_timestamp_seconds") == 1_795_341_602.0
    assert sample(t, "l2m_last_batch_id") == 7
    assert sample(t, "l2m_input_records_total") == 1500
    assert sample(t, "l2m_batch_input_records") == 1500
    assert sample(t, "l2m_input_records_per_second") == 150
    assert sample(t, "l2m_processed_records_per_second") == 750
    assert sample(t, "l2m_trigger_interval_seconds") == 10
    assert sample(t, "l2m_source_committed_offset", topic="logs", partition="0") == 1000
    assert sample(t, "l2m_source_latest_offset", topic="logs", partition="0") == 1200
    assert sample(t, "l2m_source_lag_records", topic="logs", partition="0") == 200
    assert sample(t, "l2m_source_lag_records", topic="logs", partition="1") == 0
    assert sample(t, "l2m_executors") == 2
    assert sample(t, "l2m_executor_batch_tasks", executor="1") == 3
    assert sample(t, "l2m_executor_batch_records", executor="2") == 500
    assert sample(t, "l2m_batch_executor_records_max") == 1000
    assert sample(t, "l2m_batch_executor_records_mean") == 750
    assert sample(t, "l2m_batch_executor_tasks_max") == 3
    assert sample(t, "l2m_batch_executor_tasks_mean") == 2
    assert sample(t, "l2m_watermark_timestamp_seconds") == 1_795_340_400.0
    assert sample(t, "l2m_event_time_max_timestamp_seconds") == 1_795_341_570.0
    assert sample(t, "l2m_event_time_delay_seconds") == 30.0
    assert sample(t, "l2m_state_rows") == 42
    assert sample(t, "l2m_state_memory_bytes") == 4096
    assert sample(t, "l2m_rules") == 2

    # The next batch: executor 2 ran nothing (0, not its old load); a replayed batch has no
    # latest offsets, so the lag keeps its last known value.
    replayed = {**PROGRESS, "batchId": 8, "sources": [{**PROGRESS["sources"][0],
                                                       "latestOffset": None}]}
    t.batch(replayed, {"1": ExecutorLoad(2, 10)})
    assert sample(t, "l2m_executor_batch_tasks", executor="2") == 0
    assert sample(t, "l2m_batch_executor_records_max") == 10
    assert sample(t, "l2m_source_lag_records", topic="logs", partition="0") == 200
    assert sample(t, "l2m_batches_total") == 2


def test_state_backed_counters_are_exact_and_accumulators_add_up_across_restarts():
    t = Telemetry(CFG, RULES)
    first = counts(100, 10, {MatchCount("a"): 60, MatchCount("__status__"): 50},
                   {InputCount("ok"): 48, InputCount("malformed"): 2, LateCount(): 3,
                    SeriesCount("a", 0, -1): 4, SeriesCount("a", 1, -1): 5,
                    SeriesCount("b", 0, 1_795_341_600_000): 2})
    t.started(first)
    t.batch(PROGRESS)
    assert sample(t, "l2m_input_logs_total", status="ok") == 48
    assert sample(t, "l2m_input_logs_total", status="future") == 0
    assert sample(t, "l2m_dead_letters_total", reason="malformed") == 2
    assert sample(t, "l2m_dead_letters_total", reason="future") == 0
    assert sample(t, "l2m_late_logs_total") == 3
    assert sample(t, "l2m_rule_matches_total", rule="a") == 60
    assert sample(t, "l2m_rule_matches_total", rule="b") == 0
    assert sample(t, "l2m_rule_series", rule="a") == 9
    assert sample(t, "l2m_rule_series", rule="b") == 2
    assert sample(t, "l2m_preaggregate_rows_in_total") == 100

    # A restart (after a Kafka outage): new accumulators start at zero. Rates keep adding;
    # the state's counts are absolute and replace the old ones; a window that closed is 0.
    t.stopping()
    t.restarted("KAFKA_UNAVAILABLE")
    second = counts(30, 3, {MatchCount("a"): 7},
                    {InputCount("ok"): 58, SeriesCount("b", 0, 1_795_341_600_000): 0})
    t.started(second)
    t.batch(PROGRESS)
    assert sample(t, "l2m_preaggregate_rows_in_total") == 130
    assert sample(t, "l2m_preaggregate_rows_out_total") == 13
    assert sample(t, "l2m_rule_matches_total", rule="a") == 67
    assert sample(t, "l2m_input_logs_total", status="ok") == 58
    assert sample(t, "l2m_input_logs_total", status="malformed") == 2
    assert sample(t, "l2m_rule_series", rule="b") == 0
    assert sample(t, "l2m_query_restarts_total", code="KAFKA_UNAVAILABLE") == 1


def test_closed_gauge_windows_leave_the_drivers_tallies_and_restarts_forget_windows():
    """A closed window reports 0 once and never again: kept, one key per gauge rule and
    window would pile up for months, read by every batch and every scrape."""
    w = 1_795_341_600_000
    driver = Latest(drops_closed_windows=True)
    tally: dict[Any, float] = {SeriesCount("a", 0, CUMULATIVE): 5, SeriesCount("b", 0, w): 2,
                               SeriesCount("b", 1, w): 3}
    # A task's own copy keeps its 0s: they are what the driver learns the window closed by.
    task = pickle.loads(pickle.dumps(driver))
    sent = task.addInPlace(task.zero({}), {SeriesCount("a", 0, CUMULATIVE): 0,
                                           SeriesCount("b", 0, w): 0, InputCount("ok"): 0})
    assert sent == {SeriesCount("a", 0, CUMULATIVE): 0, SeriesCount("b", 0, w): 0,
                    InputCount("ok"): 0}
    assert driver.addInPlace(tally, sent) == {SeriesCount("a", 0, CUMULATIVE): 0,
                                              SeriesCount("b", 1, w): 3, InputCount("ok"): 0}
    t = Telemetry(CFG, RULES)
    t.started(counts(1, 1, {}, {SeriesCount("a", 0, CUMULATIVE): 4, SeriesCount("b", 1, w): 3}))
    t.batch(PROGRESS)
    t.stopping()
    t.restarted("KAFKA_UNAVAILABLE")
    # The new query reports its counter keys again on its first sweep, its open windows as
    # they are touched: the old query's windows are not carried over (they may have closed).
    t.started(counts(0, 0, {}, {}))
    t.batch(PROGRESS)
    assert sample(t, "l2m_rule_series", rule="a") == 4
    assert sample(t, "l2m_rule_series", rule="b") == 0


def test_readiness_and_health_follow_the_runner():
    t = Telemetry(CFG, RULES)
    assert t.healthy() and not t.ready
    t.started(None)
    assert t.ready and sample(t, "l2m_query_active") == 1
    t.failed_batch("SINK")
    t.stopping()
    assert not t.ready and t.healthy()  # waiting out an outage is healthy
    assert sample(t, "l2m_sink_failures_total") == 1
    t.failed_job()
    assert not t.healthy()


def test_expected_executors_follow_the_configuration():
    k8s = replace(CFG, master="k8s://https://kubernetes.default.svc",
                  spark={"spark.executor.instances": "8"})
    assert expected_executors(CFG) == 0
    assert expected_executors(k8s) == 8
    assert expected_executors(replace(k8s, spark={"spark.dynamicAllocation.enabled": "true",
                                                  "spark.dynamicAllocation.minExecutors": "3"}
                                      )) == 3
    assert expected_executors(replace(CFG, master="local-cluster[2,1,1024]")) == 2


def get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.headers["Content-Type"], exc.read().decode()


def test_the_endpoint_serves_metrics_health_and_readiness():
    cfg = replace(CFG, monitoring=MonitoringConfig(port=0, host="127.0.0.1"))
    t = Telemetry(cfg, RULES)
    with Endpoint(t, "127.0.0.1", 0) as endpoint:
        base = f"http://127.0.0.1:{endpoint.port}"
        assert get(f"{base}/healthz")[::2] == (200, "ok\n")
        assert get(f"{base}/readyz")[::2] == (503, "not ready\n")
        t.started(None)
        assert get(f"{base}/readyz")[::2] == (200, "ready\n")
        status, content_type, body = get(f"{base}/metrics")
        assert status == 200 and content_type.startswith("text/plain; version=0.0.4")
        assert "\nl2m_trigger_interval_seconds 10.0\n" in body
        assert 'l2m_rule_matches_total{rule="a"} 0.0' in body
        assert get(f"{base}/nothing")[0] == 404


def test_reload_over_http_answers_with_the_outcome_and_only_where_live_rules_run():
    """``POST /-/reload`` (live rules): the watcher's answer — 200, 422 with the problems;
    404 where nothing reloads (``--once``, ``l2m deliver``)."""
    t = Telemetry(CFG, RULES)
    answers = iter([(200, "l2m run: rules reloaded"), (422, "rules/a.yaml:2:9: bad")])
    with Endpoint(t, "127.0.0.1", 0, reload=lambda: next(answers)) as endpoint:
        base = f"http://127.0.0.1:{endpoint.port}"
        assert post(f"{base}/-/reload") == (200, "l2m run: rules reloaded\n")
        assert post(f"{base}/-/reload") == (422, "rules/a.yaml:2:9: bad\n")
        assert post(f"{base}/elsewhere")[0] == 404
    with Endpoint(t, "127.0.0.1", 0) as endpoint:
        status, text = post(f"http://127.0.0.1:{endpoint.port}/-/reload")
        assert status == 404 and "live rules are off" in text


def test_the_live_rule_metrics_follow_the_watcher():
    from l2m.runtime.reload import ReloadStatus

    t = Telemetry(CFG, RULES)
    t.reload = ReloadStatus(version="0123456789abcdef", loaded_at=1700000000.0, rules=2,
                            successes=3, failures=1, last_ok=False, last_at=1700000100.0)
    body = generate_latest(t.registry).decode()
    for line in ('l2m_rules_version_info{version="0123456789abcdef"} 1.0',
                 "l2m_rules_loaded_timestamp_seconds 1.7e+09",
                 'l2m_rules_reloads_total{result="success"} 3.0',
                 'l2m_rules_reloads_total{result="failure"} 1.0',
                 "l2m_rules_last_reload_successful 0.0",
                 "l2m_rules_last_reload_timestamp_seconds 1.7000001e+09"):
        assert line in body.splitlines(), line
