"""Remote write beside the Kafka sink (issue 22, deliverable 6): how fast ``l2m deliver`` turns
the metrics topic into remote-write requests, and what running it beside the aggregation costs
the drain.

Input: the broker, a warm Spark session, ``series`` counter series re-emitted over
``batches`` micro-batches (the first marked ``new``: delivery adds their zeros), and the
drain case. Output:

- the Kafka sink: the same sample rows written by the job's own writer
  (:func:`l2m.kafka.sink.write_batch`, Spark ``local[2]``), samples/s;
- remote write from that topic (:func:`l2m.runtime.deliver.deliver`, one endpoint, the default
  ``max_samples_per_send``) to a receiver that only counts (what l2m itself costs) and to
  Debian's Prometheus 2.42 (when ``.tools/prometheus`` has it): samples/s, requests/s, bytes
  per sample on the wire (snappy-compressed protobuf, as sent), consumer start included;
- the drain with ``l2m deliver`` running as its own process (as the Deployment runs it) to
  the counting receiver, against the same drain without it."""

from __future__ import annotations

import contextlib
import http.server
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson
import pandas as pd
from pyspark.sql import SparkSession

from benchmarks.drain import DrainCase, run_drain
from benchmarks.load import fresh_topics
from l2m.config.job import JobConfig, RemoteWriteConfig, RemoteWriteEndpoint, Topics
from l2m.engine.samples import NEW, series_key
from l2m.kafka.sink import write_batch
from l2m.rules.model import Rule
from l2m.runtime.deliver import deliver
from l2m.state.output import OUTPUT_SCHEMA
from l2m.streaming.job import register

ROOT = Path(__file__).resolve().parent.parent
PROMETHEUS = ROOT / ".tools" / "prometheus" / "usr" / "bin" / "prometheus"
BATCH_MS = 10_000  # the micro-batches' spacing: the trigger of a busy job
IDLE_S = 0.5  # delivery --once ends after the topic gave nothing this long (not counted)


def sample_rows(series: int, batches: int, start_ms: int) -> pd.DataFrame:
    """The state stage's output rows for ``series`` counters over ``batches`` micro-batches:
    20 rules' metrics, labels like the example rules' (service, status, route), every series
    in every batch, its value growing; the first batch's samples marked new."""
    keys, values, times, marks = [], [], [], []
    for batch in range(batches):
        at = start_ms + batch * BATCH_MS
        for i in range(series):
            sample = {"name": f"rule{i % 20}_requests_total", "kind": "counter",
                      "labels": {"service": f"svc-{i % 37}", "status": str(200 + i % 5),
                                 "route": f"/api/v1/items/{i // 185}"},
                      "value": float((batch + 1) * (1 + i % 7)), "timestamp": at - 2_000,
                      "account": f"acct-{i % 10}", "rule": f"rule{i % 20}"}
            keys.append(series_key(sample).decode())
            values.append(orjson.dumps(sample).decode())
            times.append(at)
            marks.append(NEW if batch == 0 else None)
    return pd.DataFrame({"key": keys, "value": values, "time": pd.Series(times, dtype="int64"),
                         "mark": pd.Series(marks, dtype="object"),
                         "pack": pd.Series([None] * len(keys), dtype="object")})


class _Counting(http.server.BaseHTTPRequestHandler):
    """A receiver that reads each request and answers 204: requests and bytes."""

    requests = 0
    bytes = 0

    def do_POST(self) -> None:
        size = int(self.headers["Content-Length"])
        self.rfile.read(size)
        type(self).requests += 1
        type(self).bytes += size
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_: Any) -> None:
        pass


@contextlib.contextmanager
def counting_receiver() -> Iterator[tuple[str, type[_Counting]]]:
    """A local counting receiver while the block runs: its push URL and its counts."""
    handler = type("Counting", (_Counting,), {"requests": 0, "bytes": 0})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/write", handler
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def prometheus(folder: Path) -> Iterator[str | None]:
    """Debian's Prometheus with the remote-write receiver and a 30-minute out-of-order window
    (docs/prometheus.md), or None when tools/prometheus.sh has not installed it."""
    if not PROMETHEUS.is_file():
        yield None
        return
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = folder / "prometheus.yml"
    config.write_text("storage: {tsdb: {out_of_order_time_window: 30m}}\n")
    process = subprocess.Popen(
        [str(PROMETHEUS), f"--config.file={config}", f"--storage.tsdb.path={folder / 'tsdb'}",
         "--web.enable-remote-write-receiver", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/-/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("Prometheus did not become ready in 60 s")
            time.sleep(0.2)
        yield f"{base}/api/v1/write"
    finally:
        process.terminate()
        process.wait(timeout=30)


def _job(bootstrap: str, topics: Topics, url: str, name: str) -> JobConfig:
    return JobConfig(kafka={"bootstrap.servers": bootstrap},
                     topics=topics,
                     remote_write=RemoteWriteConfig(
                         endpoints=(RemoteWriteEndpoint(url=url, name=name, tenant_header=None),),
                         poll_ms=200))


def _deliver_rate(job: JobConfig, name: str, rows: int) -> dict[str, Any]:
    started = time.monotonic()
    tally = deliver(job, once=True, once_idle_s=IDLE_S)[name]
    seconds = time.monotonic() - started - IDLE_S
    if tally.refused or tally.skipped:
        raise RuntimeError(f"remote write benchmark: refused {tally.refused}, skipped "
                           f"{tally.skipped}")
    return {"records": rows, "samples": tally.sent, "seconds": round(seconds, 2),
            "samples_per_s": round(tally.sent / seconds)}


def run_throughput(spark: SparkSession, bootstrap: str, series: int,
                   batches: int) -> dict[str, Any]:
    """The Kafka sink's and remote write's rates over the same samples."""
    register(spark)
    topics = fresh_topics(bootstrap, "rw", 4)
    # Timestamps end now: Prometheus takes them into its head block.
    start_ms = int(time.time() * 1000) - batches * BATCH_MS
    frame = spark.createDataFrame(sample_rows(series, batches, start_ms), OUTPUT_SCHEMA)
    frame = frame.repartition(2).cache()
    rows = frame.count()
    # The better of two writes (each into its own topic; delivery reads the first).
    sink_s = []
    for into in (topics, fresh_topics(bootstrap, "rw", 4)):
        started = time.monotonic()
        write_batch(frame, into.metrics, {"bootstrap.servers": bootstrap})
        sink_s.append(time.monotonic() - started)
    frame.unpersist()
    out: dict[str, Any] = {"series": series, "batches": batches,
                           "kafka_sink": {"samples": rows, "seconds": round(min(sink_s), 2),
                                          "samples_per_s": round(rows / min(sink_s)),
                                          "runs": [round(rows / x) for x in sink_s]}}
    with counting_receiver() as (url, counts):
        rate = _deliver_rate(_job(bootstrap, topics, url, "null"), "null", rows)
        out["remote_write_null"] = {**rate, "requests": counts.requests,
                                    "requests_per_s": round(counts.requests / rate["seconds"], 1),
                                    "bytes": counts.bytes,
                                    "bytes_per_sample": round(counts.bytes / rate["samples"], 2)}
    with tempfile.TemporaryDirectory() as tmp, prometheus(Path(tmp)) as prom:
        if prom is not None:
            rate = _deliver_rate(_job(bootstrap, topics, prom, "prometheus"), "prometheus", rows)
            out["remote_write_prometheus"] = {
                **rate, "requests_per_s": round(out["remote_write_null"]["requests"]
                                                / rate["seconds"], 1)}
    return out


@contextlib.contextmanager
def delivering(topics: Topics, bootstrap: str, folder: Path, url: str) -> Iterator[None]:
    """``l2m deliver`` as its own process on ``topics``' metrics topic while the block runs."""
    config = folder / f"deliver-{topics.metrics}.yaml"
    config.write_text("\n".join([
        f'kafka: {{bootstrap.servers: "{bootstrap}"}}',
        f"topics: {{logs: {topics.logs}, metrics: {topics.metrics}, "
        f"dead_letters: {topics.dead_letters}}}",
        f"rules: [{ROOT / 'benchmarks' / 'rules.yaml'}]",
        f"checkpoint: {folder / 'unused'}",
        f'remote_write: {{poll: 200 ms, endpoints: [{{url: "{url}", name: null-receiver, '
        "tenant_header: null}]}",
    ]) + "\n")
    process = subprocess.Popen([sys.executable, "-m", "l2m.cli", "deliver", "--config",
                                str(config)], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(3.0)  # started and polling before the drain's clock starts
    if process.poll() is not None:
        raise RuntimeError(f"l2m deliver exited: {process.stderr.read().decode()[-2000:]}"
                           if process.stderr else "l2m deliver exited")
    try:
        yield
    finally:
        process.terminate()
        process.wait(timeout=30)


def run_drain_alongside(spark: SparkSession, bootstrap: str, case: DrainCase,
                        rules: list[Rule], workdir: Path, runs: int = 2) -> dict[str, Any]:
    """The drain without and with ``l2m deliver`` beside it, alternating, ``runs`` each: every
    rate, and the ratio of their medians (and of their bests)."""
    off: list[int] = []
    on: list[int] = []
    delivered = 0
    with counting_receiver() as (url, counts):
        for _ in range(runs):
            off.append(run_drain(spark, bootstrap, case, rules, workdir)["logs_per_s"])
            before = counts.requests
            result = run_drain(spark, bootstrap, case, rules, workdir,
                               alongside=lambda topics: delivering(topics, bootstrap, workdir,
                                                                   url))
            on.append(result["logs_per_s"])
            delivered += counts.requests - before
    if not delivered:
        raise RuntimeError("the drain with delivery on sent no remote-write request")
    # Medians: this machine's drains vary by ±15% run to run, more than what a best-of-few
    # could tell apart.
    return {"case": replace(case).name, "records": case.records, "off": off, "on": on,
            "off_median": statistics.median(off), "on_median": statistics.median(on),
            "ratio": round(statistics.median(on) / statistics.median(off), 3),
            "best_ratio": round(max(on) / max(off), 3), "requests": delivered}
