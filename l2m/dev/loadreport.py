"""``l2m load``'s report: what a run sent and what a user of the job felt, three ways.

Input: a :class:`LoadReport` — the load's :class:`~l2m.dev.loadgen.LoadSummary` and, when
watched, the :class:`~l2m.dev.loadwatch.WatchResult` of the metrics topic and the
:class:`~l2m.dev.loadwatch.PrometheusResult`. Output: the terminal table (:func:`table`), the
``--json`` document (:func:`document`, :func:`json_text`) and the ``--plot`` PNG
(:func:`write_plot`: rate and latency over time; matplotlib, the ``bench`` extra, imported
only then).

Times in the document and the plot are seconds since the load's first log (``started``).

The ``--json`` document (``"report": 1``; keys are stable, new ones may be added)::

    report            1, this layout's version
    topic             the topic the logs went to
    skew              the skew as --skew writes it (uniform, hot:0.7, zipf:1.2)
    partitions        partitions written to
    processes         producer processes
    started           wall time of the first log, s since the epoch
    seconds           first to last log, s
    sent, failed      logs Kafka took / did not take
    rate              {"target": logs/s, "achieved": logs/s}
    partition_counts  logs per partition, partition 0 first
    rate_series       [[t, logs/s sent in the second from t]], one per second (a last part
                      of a second only from half a second on, scaled to a second)
    watch             null without --watch, else {"records": records read since the start,
                      "not_samples": of those not sample records, "samples": counter samples
                      of users' rules measured, "before_start": such samples dated before the
                      start (not measured), "negative": latencies below 0 (clocks apart),
                      "error": why the watcher stopped early, or null}
    latency           null (no watcher or no sample) or {"p50_ms", "p90_ms", "p99_ms",
                      "max_ms", "min_ms": nearest-rank over every sample measured, "series":
                      [[t, samples, mean_ms, max_ms]] per second of arrival}
    lag               null (no watcher, or no l2m_input_logs_total sample) or {"max": most
                      logs sent and not yet processed, "max_behind_s": the longest a log sent
                      waited unprocessed (as far as the samples tell), "end": the lag at
                      the last sample, "baseline_exact": false when the input counter's value
                      before the load was unknown (the count is then short by the first
                      micro-batch), "series": [[t, sent, processed, lag, behind_s]]}
    prometheus        null without --prometheus, else {"polls", "failed", "last_error",
                      "queryable_after_s": from the last log's production until the query
                      counted every log (null: not while watched), "series": [[t, delay_s]]
                      per answer that counted new logs}
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from l2m.dev.loadwatch import (
    LagPoint,
    PrometheusResult,
    WatchResult,
    lag_points,
    sent_at,
)
from l2m.errors import ConfigError, InputError

if TYPE_CHECKING:
    from l2m.dev.loadgen import LoadSummary

REPORT_VERSION = 1
BENCH_EXTRA = "pip install 'l2m[bench]'"


@dataclass(frozen=True)
class LoadReport:
    """What a run of ``l2m load`` reports: the load, and what each watcher (if any) saw."""

    summary: LoadSummary
    watch: WatchResult | None = None
    prometheus: PrometheusResult | None = None


def rate_series(summary: LoadSummary) -> list[tuple[int, float]]:
    """Logs sent in each whole second from the first log; a last part of a second, if the run
    ended at least half a second into it, scaled to a full second (a shorter one says little:
    a few logs more or less are a large share of it)."""
    out: list[tuple[int, float]] = []
    t0 = summary.started
    seconds = summary.seconds
    t = 0
    while t < seconds:
        span = min(1.0, seconds - t)
        if span < 0.5 and t > 0:
            break
        sent = sent_at(summary.timeline, t0 + t + span) - sent_at(summary.timeline, t0 + t)
        out.append((t, round(sent / span, 1)))
        t += 1
    return out


def _lag(summary: LoadSummary, watch: WatchResult) -> list[LagPoint]:
    return lag_points(watch.processed, summary.timeline, round(summary.started * 1000))


def _shift(watch: WatchResult | PrometheusResult, summary: LoadSummary) -> float:
    """Seconds to add to a watcher's times (since its start) for times since the first log."""
    return watch.start_ms / 1000 - summary.started


def document(report: LoadReport) -> dict[str, Any]:
    """The ``--json`` document (its keys: the module's docstring)."""
    summary, watch, prometheus = report.summary, report.watch, report.prometheus
    doc: dict[str, Any] = {
        "report": REPORT_VERSION,
        "topic": summary.topic,
        "skew": summary.skew.text,
        "partitions": summary.partitions,
        "processes": summary.processes,
        "started": round(summary.started, 3),
        "seconds": round(summary.seconds, 3),
        "sent": summary.sent,
        "failed": summary.failed,
        "rate": {"target": summary.target_rate, "achieved": round(summary.rate, 1)},
        "partition_counts": list(summary.partition_counts),
        "rate_series": [list(p) for p in rate_series(summary)],
        "watch": None, "latency": None, "lag": None, "prometheus": None,
    }
    if watch is not None:
        doc["watch"] = {"records": watch.records, "not_samples": watch.not_samples,
                        "samples": watch.samples, "before_start": watch.before_start,
                        "negative": watch.negative, "error": watch.error}
        shift = _shift(watch, summary)
        stats = watch.latency
        if stats is not None:
            doc["latency"] = {
                "p50_ms": stats.p50, "p90_ms": stats.p90, "p99_ms": stats.p99,
                "max_ms": stats.max, "min_ms": stats.min,
                "series": [[round(s.t + shift, 3), s.count, round(s.mean_ms, 1), s.max_ms]
                           for s in watch.latency_series]}
        lag = _lag(summary, watch)
        if lag:
            doc["lag"] = {"max": max(p.lag for p in lag),
                          "max_behind_s": max(p.behind_s for p in lag),
                          "end": lag[-1].lag, "baseline_exact": watch.baseline_exact,
                          "series": [[p.t, p.sent, p.processed, p.lag, p.behind_s]
                                     for p in lag]}
    if prometheus is not None:
        shift = _shift(prometheus, summary)
        doc["prometheus"] = {
            "polls": prometheus.polls, "failed": prometheus.failed,
            "last_error": prometheus.last_error,
            "queryable_after_s": prometheus.queryable_after(summary.timeline),
            "series": [[round(t + shift, 3), d] for t, d in prometheus.delays(summary.timeline)]}
    return doc


def json_text(report: LoadReport) -> str:
    """:func:`document` as indented JSON, one line feed last."""
    return json.dumps(document(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def _n(value: float) -> str:
    return f"{value:,.0f}"


def _ms(ms: float) -> str:
    """A latency as people read it: ``850 ms``, ``1.20 s``."""
    return f"{ms:.0f} ms" if abs(ms) < 1000 else f"{ms / 1000:.2f} s"


def table(report: LoadReport) -> str:
    """The terminal table: rate target and achieved, logs sent, per-partition counts,
    latency percentiles, lag, and Prometheus' delay (each line saying why when not
    measured); one line feed after each line."""
    summary, watch, prometheus = report.summary, report.watch, report.prometheus
    processes = f"{summary.processes} producer process" + ("es" if summary.processes != 1
                                                          else "")
    lines = [f"l2m load: topic {summary.topic}, skew {summary.skew.label}, "
             f"{summary.partitions} partition{'s' if summary.partitions != 1 else ''}, "
             f"{processes}",
             f"  rate        target {_n(summary.target_rate)}/s, achieved "
             f"{_n(summary.rate)}/s",
             f"  sent        {_n(summary.sent)} logs in {summary.seconds:.1f} s"
             + (f" ({_n(summary.failed)} not taken by Kafka)" if summary.failed else ""),
             "  partition        logs   share"]
    total = sum(summary.partition_counts)
    for p, count in enumerate(summary.partition_counts):
        share = count / total if total else 0.0
        lines.append(f"  {p:>9}  {_n(count):>10}  {share:6.1%}")
    lines += _watch_lines(summary, watch)
    lines += _prometheus_lines(summary, prometheus)
    return "".join(line + "\n" for line in lines)


def _watch_lines(summary: LoadSummary, watch: WatchResult | None) -> list[str]:
    if watch is None:
        return ["  latency     not measured (--watch METRICS_TOPIC)"]
    lines = []
    stats = watch.latency
    if stats is None:
        lines.append("  latency     no counter sample of a rule arrived")
    else:
        lines.append(f"  latency     p50 {_ms(stats.p50)}, p90 {_ms(stats.p90)}, "
                     f"p99 {_ms(stats.p99)}, max {_ms(stats.max)} "
                     f"({_n(stats.count)} counter samples)")
    if watch.negative:
        lines.append(f"              {_n(watch.negative)} samples dated after they arrived: "
                     "the clocks of the job and this machine differ")
    lag = _lag(summary, watch)
    if not lag:
        lines.append("  lag         no l2m_input_logs_total sample arrived")
    else:
        lines.append(f"  lag         max {_n(max(p.lag for p in lag))} logs, oldest waiting "
                     f"{max(p.behind_s for p in lag):.1f} s at most, at the end "
                     f"{_n(lag[-1].lag)} logs")
        if not watch.baseline_exact:
            lines.append("              (no input count from before the load: short by its "
                         "first micro-batch)")
    if watch.error is not None:
        lines.append(f"  watch       stopped early: {watch.error}")
    return lines


def _prometheus_lines(summary: LoadSummary, prometheus: PrometheusResult | None) -> list[str]:
    if prometheus is None:
        return []
    after = prometheus.queryable_after(summary.timeline)
    failed = f", {_n(prometheus.failed)} failed" if prometheus.failed else ""
    polls = f"({_n(prometheus.polls)} queries{failed})"
    if not prometheus.processed and prometheus.failed == prometheus.polls:
        line = f"  prometheus  no answer {polls}"
    elif after is None:
        line = f"  prometheus  not every log queryable while watched {polls}"
    else:
        line = f"  prometheus  every log queryable {after:.1f} s after the last was sent {polls}"
    lines = [line]
    if prometheus.last_error is not None:
        lines.append(f"              last error: {prometheus.last_error}")
    return lines


def write_plot(report: LoadReport, path: str | Path) -> None:
    """Write the PNG: the rate (target and achieved per second) above, the latency (per
    second's mean and max; Prometheus' delay) below. Without matplotlib a
    :class:`~l2m.errors.ConfigError` naming the ``bench`` extra; a file that cannot be written
    an :class:`~l2m.errors.InputError`."""
    try:
        import matplotlib
    except ImportError:
        raise ConfigError(f"--plot needs matplotlib: {BENCH_EXTRA}") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = report.summary
    doc = document(report)
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    try:
        series = doc["rate_series"]
        # The last step drawn as wide as it was (steps-post ends at a step's start).
        xs = [p[0] for p in series] + ([summary.seconds] if series else [])
        ys = [p[1] for p in series] + ([series[-1][1]] if series else [])
        top.plot(xs, ys, drawstyle="steps-post", label="achieved")
        top.axhline(summary.target_rate, linestyle="--", color="grey", label="target")
        top.set_ylim(bottom=0)  # from 0: a 0.1% wobble is not a cliff
        top.set_ylabel("logs/s")
        top.set_title(f"l2m load: {summary.topic}, {summary.skew.label}")
        top.legend(loc="lower right")
        if doc["latency"] is not None:
            lat = doc["latency"]["series"]
            bottom.plot([p[0] for p in lat], [p[2] / 1000 for p in lat],
                        label="metrics topic, mean per second")
            bottom.plot([p[0] for p in lat], [p[3] / 1000 for p in lat],
                        label="metrics topic, max per second")
        if doc["prometheus"] is not None and doc["prometheus"]["series"]:
            prom = doc["prometheus"]["series"]
            bottom.plot([p[0] for p in prom], [p[1] for p in prom], ".",
                        label="queryable in Prometheus")
        if doc["latency"] is None and not (doc["prometheus"] or {}).get("series"):
            bottom.text(0.5, 0.5, "latency not measured", ha="center", va="center",
                        transform=bottom.transAxes)
        else:
            bottom.legend(loc="best")
        if doc["latency"] is None or doc["latency"]["min_ms"] >= 0:
            bottom.set_ylim(bottom=0)
        bottom.set_ylabel("latency (s)")
        bottom.set_xlabel("seconds since the first log")
        fig.tight_layout()
        try:
            fig.savefig(str(path), format="png", dpi=100)
        except OSError as exc:
            raise InputError(f"--plot {path}: {exc.strerror or exc}") from None
    finally:
        plt.close(fig)

