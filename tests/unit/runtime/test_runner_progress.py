"""Every micro-batch that ran reaches the progress lines and the metrics once, including the
one Spark ran under an id it had already reported for a trigger that found no data (it was
dropped, its records not counted); and the newest event time is a batch's with logs the
rules see (a batch of only blank or malformed records set it to 0: the flake of
tests/integration/test_prometheus.py)."""

from __future__ import annotations

import io
from types import SimpleNamespace
from typing import Any

from l2m.config.job import JobConfig, Topics
from l2m.runtime.progress import ran_a_batch
from l2m.runtime.runner import Runner
from l2m.runtime.telemetry import Telemetry

# A trigger that found no data, as Spark 4 reports it (measured: local file source, idle).
IDLE = {"latestOffset": 1, "triggerExecution": 1}
RAN = {"addBatch": 5, "commitOffsets": 1, "getBatch": 0, "latestOffset": 1,
       "queryPlanning": 2, "triggerExecution": 9, "walCommit": 1}


def _progress(batch: int, durations: dict[str, int], rows: int) -> dict[str, Any]:
    return {"batchId": batch, "durationMs": durations, "numInputRows": rows}


def _reported(*rounds: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(batch id, rows) of each progress the runner hands on, ``recentProgress`` growing by
    one round per look."""
    seen: list[tuple[int, int]] = []
    query = SimpleNamespace(name="l2m-metrics", recentProgress=[])
    runner = Runner(JobConfig(), [], out=io.StringIO(),
                    on_progress=lambda _name, p: seen.append((p["batchId"], p["numInputRows"])))
    runner.job = SimpleNamespace(queries=[query], counts=None)  # type: ignore[assignment]
    for more in rounds:
        query.recentProgress = [*query.recentProgress, *more]
        runner._report()
    return seen


def test_only_a_progress_with_an_add_batch_duration_ran_a_batch() -> None:
    assert not ran_a_batch(_progress(0, IDLE, 0))
    assert ran_a_batch(_progress(0, RAN, 2))
    assert not ran_a_batch({"batchId": 0})


def test_the_batch_run_under_an_idle_trigger_s_id_is_reported() -> None:
    # The job's first trigger finds no data (reported at once), then batch 0 runs with logs;
    # idle again 10 s later (batch 1's id, twice), then batch 1 runs.
    assert _reported([_progress(0, IDLE, 0)], [_progress(0, RAN, 500)],
                     [_progress(1, IDLE, 0), _progress(1, IDLE, 0)],
                     [_progress(1, RAN, 50)]) == [(0, 0), (0, 500), (1, 0), (1, 50)]


def test_a_progress_already_reported_is_not_reported_again() -> None:
    once = [_progress(0, RAN, 3), _progress(1, RAN, 4)]
    assert _reported(once, [], [_progress(1, IDLE, 0)]) == [(0, 3), (1, 4)]


def test_a_batch_of_only_logs_the_rules_do_not_see_leaves_the_newest_event_time() -> None:
    """Blank and malformed records carry event time 0 to the watermark: a batch of only those
    (the closers a test produces after its logs, under load a batch of their own) reports the
    epoch as its ``eventTime.max`` — measured on the memory source — and set the gauge to 0
    and the delay to 56 years (the flake of tests/integration/test_prometheus.py)."""
    t = Telemetry(JobConfig(topics=Topics(logs="logs")), [], clock=lambda: 1_795_341_600.0)
    logs = {"batchId": 1, "durationMs": RAN, "numInputRows": 1,
            "eventTime": {"max": "2026-11-22T09:59:30.000Z",
                          "watermark": "1970-01-01T00:00:00.000Z"},
            "sources": [{"startOffset": {"partitions": {"0": 0}},
                         "endOffset": {"partitions": {"0": 1}}}]}
    blanks = {"batchId": 2, "durationMs": RAN, "numInputRows": 2,
              "eventTime": {"max": "1970-01-01T00:00:00.000Z",
                            "watermark": "2026-11-22T09:40:01.000Z"},
              "sources": [{"startOffset": {"partitions": {"0": 1}},
                           "endOffset": {"partitions": {"0": 3}}}]}
    t.batch(logs)
    t.batch(blanks)
    value = t.registry.get_sample_value
    assert value("l2m_event_time_max_timestamp_seconds") == 1_795_341_570.0
    assert value("l2m_event_time_delay_seconds") == 30.0
    assert value("l2m_watermark_timestamp_seconds") == 1_795_340_401.0
    assert value("l2m_input_records_total") == 3.0
