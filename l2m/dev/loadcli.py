"""``l2m load``'s run, end to end: the watchers started, the logs produced, the job given time to
count them, the report printed.

Input: the checked plan (:class:`~l2m.dev.loadgen.LoadSpec`, the metrics side's client settings,
the metrics topic to watch or None) and the output choices, as :func:`l2m.cli.main` parsed
them. Output: progress lines on stderr, the report on stdout (:func:`l2m.dev.loadreport.table`
or, with ``--json``, :func:`l2m.dev.loadreport.json_text`), the ``--plot`` file, and the exit
code: 1 when Kafka did not take every log, else 0."""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping

from l2m.dev import loadgen, loadreport
from l2m.dev.loadwatch import MetricsWatcher, PrometheusWatcher


def run_load_command(spec: loadgen.LoadSpec, sink: Mapping[str, str], watch: str | None, *,
                     prometheus: str | None, drain_s: float, as_json: bool,
                     plot: str | None) -> int:
    """Produce ``spec``'s logs while watching ``watch`` (a metrics topic, read with ``sink``'s
    client settings) and ``prometheus`` (a URL), each if given; then wait up to ``drain_s``
    seconds for them to count every log sent, and print the report. Returns the exit code."""
    end = f"{spec.total:,} logs" if spec.logs is not None else \
        f"{spec.duration_s:g} s ({spec.total:,} logs)"
    print(f"l2m load: {spec.rate:,.6g} logs/s, {end} → topic {spec.topic} on "
          f"{spec.kafka.get('bootstrap.servers')}, skew {spec.skew.label}, "
          f"{spec.processes} process(es)" + (f"; watching {watch}" if watch else ""),
          file=sys.stderr, flush=True)

    def progress(p: loadgen.Progress) -> None:
        print(f"l2m load: {p.seconds:5.1f} s  {p.sent:,} sent  target {p.target_rate:,.0f}/s"
              f"  achieved {p.rate:,.0f}/s", file=sys.stderr, flush=True)

    start_ms = int(time.time() * 1000)
    watcher = MetricsWatcher(sink, watch, start_ms).start() if watch else None
    polling = PrometheusWatcher(prometheus, start_ms).start() if prometheus else None
    try:
        # through the module: the tests put a run without Kafka in its place
        summary = loadgen.run_load(spec, progress=progress)
        waiting = [w for w in (watcher, polling) if w is not None]
        if waiting:
            print(f"l2m load: sent {summary.sent:,}; waiting up to {drain_s:g} s for the "
                  "job to count them", file=sys.stderr, flush=True)
            deadline = time.monotonic() + drain_s
            for w in waiting:
                w.wait_processed(summary.sent, max(0.0, deadline - time.monotonic()))
    finally:
        watched = watcher.stop() if watcher is not None else None
        polled = polling.stop() if polling is not None else None
    report = loadreport.LoadReport(summary, watched, polled)
    print(loadreport.json_text(report) if as_json else loadreport.table(report), end="")
    if plot:
        loadreport.write_plot(report, plot)
        print(f"l2m load: wrote {plot}", file=sys.stderr)
    if summary.failed:
        print(f"l2m load: {summary.failed:,} log(s) were not delivered to Kafka",
              file=sys.stderr)
        return 1
    return 0
