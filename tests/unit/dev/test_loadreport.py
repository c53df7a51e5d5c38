"""l2m load's report: the exact terminal table, the --json document's keys and values, the
--plot PNG written (and the one-line error without matplotlib or a writable path)."""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from typing import Any

import pytest

from l2m.dev.loadgen import LoadSummary
from l2m.dev.loadreport import LoadReport, document, json_text, rate_series, table, write_plot
from l2m.dev.loadwatch import LatencyStats, PrometheusResult, SecondLatency, WatchResult
from l2m.dev.skew import Skew
from l2m.errors import ConfigError, InputError

T0 = 1_795_000_000.0
START_MS = int(T0 * 1000) - 500  # the watchers started half a second before the first log

SUMMARY = LoadSummary(topic="logs", target_rate=2000.0, partitions=4, processes=1,
                      skew=Skew("hot", 0.7), started=T0, seconds=2.5, sent=5000, failed=0,
                      partition_counts=[3500, 500, 500, 500],
                      timeline=[(T0, 0), (T0 + 1.0, 2000), (T0 + 2.0, 4000), (T0 + 2.5, 5000)])
WATCH = WatchResult(start_ms=START_MS, records=40, not_samples=1, samples=30, before_start=2,
                    negative=0, latency=LatencyStats(30, 1200, 1900, 2400, 2610, 800),
                    latency_series=[SecondLatency(1, 10, 1000.0, 1300),
                                    SecondLatency(2, 20, 1500.5, 2610)],
                    processed=[(T0 + 1.5, 1000), (T0 + 3.0, 4200), (T0 + 4.0, 5000)],
                    baseline_exact=True, error=None)
PROMETHEUS = PrometheusResult(start_ms=START_MS, polls=6, failed=1,
                              last_error="OSError: HTTP 503",
                              processed=[(T0 + 2.0, 2000), (T0 + 5.0, 5000)])
HEAD = """\
l2m load: topic logs, skew hot 70%, 4 partitions, 1 producer process
  rate        target 2,000/s, achieved 2,000/s
  sent        5,000 logs in 2.5 s
  partition        logs   share
          0       3,500   70.0%
          1         500   10.0%
          2         500   10.0%
          3         500   10.0%
"""


def test_table_without_watchers() -> None:
    assert table(LoadReport(SUMMARY)) == HEAD + \
        "  latency     not measured (--watch METRICS_TOPIC)\n"


def test_table_with_watchers() -> None:
    assert table(LoadReport(SUMMARY, WATCH, PROMETHEUS)) == HEAD + """\
  latency     p50 1.20 s, p90 1.90 s, p99 2.40 s, max 2.61 s (30 counter samples)
  lag         max 2,000 logs, oldest waiting 1.0 s at most, at the end 0 logs
  prometheus  every log queryable 2.5 s after the last was sent (6 queries, 1 failed)
              last error: OSError: HTTP 503
"""


def test_table_when_nothing_arrived() -> None:
    empty = WatchResult(start_ms=START_MS, records=0, not_samples=0, samples=0, before_start=0,
                        negative=3, latency=None, latency_series=[], processed=[],
                        baseline_exact=True, error="KafkaException: broker gone")
    quiet = PrometheusResult(start_ms=START_MS, polls=3, failed=0, last_error=None,
                             processed=[(T0 + 3.0, 10)])
    failed = LoadSummary(topic="ünï", target_rate=10.0, partitions=1, processes=2,
                         skew=Skew(), started=T0, seconds=0.0, sent=0, failed=12,
                         partition_counts=[0], timeline=[(T0, 0)])
    assert table(LoadReport(failed, empty, quiet)) == """\
l2m load: topic ünï, skew uniform, 1 partition, 2 producer processes
  rate        target 10/s, achieved 0/s
  sent        0 logs in 0.0 s (12 not taken by Kafka)
  partition        logs   share
          0           0    0.0%
  latency     no counter sample of a rule arrived
              3 samples dated after they arrived: the clocks of the job and this machine differ
  lag         no l2m_input_logs_total sample arrived
  watch       stopped early: KafkaException: broker gone
  prometheus  not every log queryable while watched (3 queries)
"""
    inexact = WatchResult(**{**WATCH.__dict__, "baseline_exact": False})
    assert "              (no input count from before the load: short by its first " \
        "micro-batch)\n" in table(LoadReport(SUMMARY, inexact))
    unanswered = PrometheusResult(start_ms=START_MS, polls=4, failed=4,
                                  last_error="URLError: refused", processed=[])
    assert table(LoadReport(SUMMARY, prometheus=unanswered)).endswith("""
  prometheus  no answer (4 queries, 4 failed)
              last error: URLError: refused
""")


def test_json_document() -> None:
    text = json_text(LoadReport(SUMMARY, WATCH, PROMETHEUS))
    assert text.endswith("}\n")
    doc = json.loads(text)
    assert doc == document(LoadReport(SUMMARY, WATCH, PROMETHEUS))
    assert list(doc) == ["report", "topic", "skew", "partitions", "processes", "started",
                         "seconds", "sent", "failed", "rate", "partition_counts", "rate_series",
                         "watch", "latency", "lag", "prometheus"]
    assert doc["skew"] == "hot:0.7" and doc["rate"] == {"target": 2000.0, "achieved": 2000.0}
    assert doc["rate_series"] == [[0, 2000.0], [1, 2000.0], [2, 2000.0]]
    assert doc["watch"] == {"records": 40, "not_samples": 1, "samples": 30, "before_start": 2,
                            "negative": 0, "error": None}
    # Watcher seconds are shifted to seconds since the first log (it started 0.5 s earlier).
    assert doc["latency"] == {"p50_ms": 1200, "p90_ms": 1900, "p99_ms": 2400, "max_ms": 2610,
                              "min_ms": 800, "series": [[0.5, 10, 1000.0, 1300],
                                                        [1.5, 20, 1500.5, 2610]]}
    assert doc["lag"] == {"max": 2000, "max_behind_s": 1.0, "end": 0, "baseline_exact": True,
                          "series": [[1.5, 3000, 1000, 2000, 1.0], [3.0, 5000, 4200, 800, 0.899],
                                     [4.0, 5000, 5000, 0, 0.0]]}
    assert doc["prometheus"] == {"polls": 6, "failed": 1, "last_error": "OSError: HTTP 503",
                                 "queryable_after_s": 2.5, "series": [[2.0, 1.0], [5.0, 2.5]]}
    bare = document(LoadReport(SUMMARY))
    assert (bare["watch"], bare["latency"], bare["lag"], bare["prometheus"]) == \
        (None, None, None, None)


def test_rate_series_of_an_uneven_run() -> None:
    uneven = LoadSummary(topic="t", target_rate=100.0, partitions=1, processes=1, skew=Skew(),
                         started=T0, seconds=1.5, sent=150, failed=0, partition_counts=[150],
                         timeline=[(T0, 0), (T0 + 1.0, 50), (T0 + 1.5, 150)])
    assert rate_series(uneven) == [(0, 50.0), (1, 200.0)]
    # A last fragment under half a second is left out.
    short = LoadSummary(**{**uneven.__dict__, "seconds": 1.25,
                           "timeline": [(T0, 0), (T0 + 1.0, 50), (T0 + 1.25, 150)]})
    assert rate_series(short) == [(0, 50.0)]


def test_plot_written(tmp_path: Path) -> None:
    path = tmp_path / "load.png"
    write_plot(LoadReport(SUMMARY, WATCH, PROMETHEUS), path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bare = tmp_path / "bare.png"
    write_plot(LoadReport(SUMMARY), bare)
    assert bare.stat().st_size > 1000


def test_plot_to_an_unwritable_path(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "x.png"
    with pytest.raises(InputError) as caught:
        write_plot(LoadReport(SUMMARY), path)
    assert caught.value.message == f"--plot {path}: No such file or directory"


def test_plot_without_matplotlib(monkeypatch: pytest.MonkeyPatch) -> None:
    real = builtins.__import__

    def no_matplotlib(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    with pytest.raises(ConfigError) as caught:
        write_plot(LoadReport(SUMMARY), "x.png")
    assert caught.value.render() == \
        "l2m: error [CONFIG]: --plot needs matplotlib: pip install 'l2m[bench]'"
