"""`l2m demo`: the embedded default. An in-memory Kafka-compatible broker, a generator of
realistic logs (some late, some malformed, optional partition skew), the streaming job with
the example rules, and a live view of the metrics it produces."""

from __future__ import annotations

import logging
import math
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from l2m.config.job import JobConfig, SourceConfig, Topics
from l2m.dev.broker import EmbeddedBroker, create_topics
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.engine.samples import HISTOGRAM_KEY
from l2m.rules.model import QUANTILE_LABEL, Rule
from l2m.runtime.runner import Runner

PARTITIONS = 4

# The demo's own Kafka clients log through this logger, not librdkafka's stderr printer: a
# client that notices the broker go away at the end (it is stopped last) must not leave a
# "Connection refused" line under the final table. Their errors surface as exceptions or
# failed deliveries all the same; attach a handler to this logger to see the rest.
CLIENT_LOG = logging.getLogger("l2m.demo.kafka")
CLIENT_LOG.addHandler(logging.NullHandler())
CLIENT_LOG.propagate = False


class LogProducer(threading.Thread):
    """Produces generated logs at about ``rate`` per second, each stamped with the wall clock
    when it is produced; round-robin over ``partitions``, or with ``hot_share`` that share of
    the logs on partition 0 (a hot partition)."""

    def __init__(self, bootstrap: str, topic: str, rate: float, partitions: int = PARTITIONS,
                 hot_share: float = 0.0, seed: int = 7, malformed_ratio: float = 0.005,
                 late_ratio: float = 0.02) -> None:
        super().__init__(name="l2m-log-producer", daemon=True)
        now = int(time.time() * 1000)
        self.gen = LogGenerator(GeneratorConfig(seed=seed, start_ms=now, rate_per_s=rate,
                                                malformed_ratio=malformed_ratio,
                                                late_ratio=late_ratio))
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5,
                                  "logger": CLIENT_LOG})
        self.topic = topic
        self.rate = rate
        self.partitions = partitions
        self.hot_share = hot_share
        self.sent = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopping.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                # Event time follows the wall clock, so windows close as they would live.
                self.gen.clock = time.time() * 1000
                line = self.gen.next_line()
                if self.hot_share and self.gen.rng.random() < self.hot_share:
                    partition = 0
                else:
                    partition = self.sent % self.partitions
                while True:
                    try:
                        self.producer.produce(self.topic, value=line, partition=partition)
                        break
                    except BufferError:  # the local queue is full: wait for deliveries
                        self.producer.poll(0.05)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.01)
        self.producer.flush(10)
        self.producer.close()  # gone before the broker is

    def finish(self) -> None:
        """Stop producing, deliver what is queued and close the producer."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout=15)


@dataclass
class MetricsView:
    """Latest sample per Kafka key, read from the metrics topic."""

    bootstrap: str
    topic: str
    latest: dict[bytes, dict[str, Any]] = field(default_factory=dict)
    received: int = 0

    def __post_init__(self) -> None:
        self.consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "l2m-demo",
                                  "enable.auto.commit": False, "logger": CLIENT_LOG})
        self.consumer.assign([TopicPartition(self.topic, 0, 0)])

    def close(self) -> None:
        self.consumer.close()

    def poll(self) -> None:
        for msg in self.consumer.consume(5000, timeout=0.2):
            key, value = msg.key(), msg.value()
            if msg.error() is None and key is not None and value is not None:  # samples
                self.latest[key] = orjson.loads(value)
                self.received += 1

    def render(self, rows: int, per_metric: int = 2, width: int | None = None) -> list[str]:
        return render_table(self.latest.values(), rows, per_metric, width)


def render_table(samples: Iterable[dict[str, Any]], rows: int, per_metric: int = 2,
                 width: int | None = None) -> list[str]:
    """The table of the live view: the newest sample of a few series of every metric
    (histogram buckets hidden: their ``_sum`` and ``_count`` stand for them), so every rule
    shows on one screen. A native histogram's sample shows its count and sum; a quantiles
    rule's samples of one series and window are one row, each quantile's value after it.

    Columns are as wide as their widest text. Labels are never cut off: when ``width`` (the
    terminal's) leaves the labels column less than the widest label text, a row's labels wrap
    onto continuation lines at the commas between labels, so two series always read
    differently. Values are plain numbers (:func:`format_value`)."""
    by_series: dict[tuple[str, str], dict[str, Any]] = {}
    for s in samples:
        if s["name"].endswith("_bucket") and "le" in s["labels"]:
            continue
        labels = s["labels"]
        quantile = labels.get(QUANTILE_LABEL) if HISTOGRAM_KEY not in s else None
        if quantile is not None:  # one row per series, its quantiles side by side
            labels = {k: v for k, v in labels.items() if k != QUANTILE_LABEL}
        series = (s["name"], _labels(labels))
        old = by_series.get(series)
        if old is not None and s["timestamp"] < old["timestamp"]:
            continue
        if quantile is None:
            by_series[series] = {**s, "text": _value_text(s)}
            continue
        if old is None or s["timestamp"] > old["timestamp"] or "quantiles" not in old:
            old = by_series[series] = {**s, "labels": labels, "quantiles": {}}
        old["quantiles"][quantile] = s["value"]
        old["text"] = "  ".join(f"q{q}: {format_value(v)}"
                                for q, v in sorted(old["quantiles"].items(), key=_q_order))
    ordered = sorted(by_series.values(), key=lambda s: (s["kind"], s["name"],
                                                         _labels(s["labels"])))
    shown: list[dict[str, Any]] = []
    per_name: dict[str, int] = {}
    for s in ordered:
        if per_name.get(s["name"], 0) < per_metric:
            per_name[s["name"]] = per_name.get(s["name"], 0) + 1
            shown.append(s)
    shown = shown[:rows]
    names = [s["name"] for s in shown]
    labels = [_labels(s["labels"]) for s in shown]
    values = [s["text"] for s in shown]
    kinds = [s["kind"] for s in shown]
    name_w = max([len("metric"), *map(len, names)])
    value_w = max([len("value"), *map(len, values)])
    kind_w = max([len("kind"), *map(len, kinds)])
    labels_w = max([len("labels"), *map(len, labels)])
    if width is not None:
        # metric, labels, value, kind, time (8) and the spaces between them
        room = width - (name_w + 1 + 1 + value_w + 2 + kind_w + 1 + 8)
        labels_w = max(MIN_LABELS_WIDTH, min(labels_w, room))
    lines = [f"{'metric':<{name_w}} {'labels':<{labels_w}} {'value':>{value_w}}  "
             f"{'kind':<{kind_w}} time"]
    for s, name, text, value, kind in zip(shown, names, labels, values, kinds, strict=True):
        stamp = time.strftime("%H:%M:%S", time.gmtime(s["timestamp"] / 1000))
        first, *more = wrap_labels(text, labels_w)
        lines.append(f"{name:<{name_w}} {first:<{labels_w}} {value:>{value_w}}  "
                     f"{kind:<{kind_w}} {stamp}")
        lines += [f"{'':<{name_w}} {part}" for part in more]
    hidden = len(by_series) - len(shown)
    if hidden > 0:
        lines.append(f"… {hidden} more series (histogram buckets not shown)")
    return lines


MIN_LABELS_WIDTH = 20


def wrap_labels(text: str, width: int) -> list[str]:
    """``k=v,k=v`` in lines of at most ``width`` characters, broken after the commas between
    labels (a label longer than a line is split across lines); joined back together they are
    ``text`` again. At least one line (``""`` for no labels)."""
    if len(text) <= width:
        return [text]
    pieces = [p + "," for p in text.split(",")]
    pieces[-1] = pieces[-1][:-1]
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > width:
            lines.append(line)
            line = ""
        line += piece
        while len(line) > width:
            lines.append(line[:width])
            line = line[width:]
    if line:
        lines.append(line)
    return lines


def format_value(value: float) -> str:
    """A sample's value as a plain number, never in scientific notation, thousands separated
    by commas: integers without decimals (``3,542,620``), others with two decimals
    (``15,649.58``), or three significant digits below 1 (``0.0123``)."""
    v = float(value)
    if not math.isfinite(v):
        return str(v)
    if v.is_integer():
        return f"{int(v):,}"
    if abs(v) >= 1:
        return f"{v:,.2f}"
    decimals = min(15, 2 - math.floor(math.log10(abs(v))))
    text = f"{v:.{decimals}f}".rstrip("0")
    return text + "0" if text.endswith(".") else text


def _value_text(s: dict[str, Any]) -> str:
    """A sample's value; a native histogram's observations and their sum."""
    histogram = s.get(HISTOGRAM_KEY)
    if isinstance(histogram, dict):
        total = histogram.get("sum", 0)  # "+Inf", "-Inf", "NaN" as the sample writes them
        return f"n={format_value(histogram.get('count', 0))} " \
               f"sum={total if isinstance(total, str) else format_value(total)}"
    return format_value(s.get("value", math.nan))


def _q_order(item: tuple[str, Any]) -> tuple[float, str]:
    try:
        return float(item[0]), item[0]
    except ValueError:
        return math.inf, item[0]


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def run_demo(rules: Sequence[Rule], duration: float | None = None, rate: float = 200.0,
             hot_share: float = 0.0, port: int | None = None, rows: int = 30,
             out: TextIO = sys.stdout) -> int:
    """Run the demo until Ctrl-C or ``duration`` seconds; returns the exit code."""
    workdir = Path(tempfile.mkdtemp(prefix="l2m-demo-"))
    tty = out.isatty()
    try:
        with EmbeddedBroker(port=port, log=workdir / "broker.log") as broker:
            topics = Topics()
            create_topics(broker.bootstrap, [topics.logs], partitions=PARTITIONS)
            create_topics(broker.bootstrap, [topics.metrics, topics.dead_letters])
            print(f"l2m demo: broker on {broker.bootstrap}, topics {topics.logs} "
                  f"({PARTITIONS} partitions), {topics.metrics}, {topics.dead_letters}; "
                  f"{rate:.0f} logs/s; Ctrl-C to stop", file=out, flush=True)
            producer = LogProducer(broker.bootstrap, topics.logs, rate, hot_share=hot_share)
            producer.start()
            cfg = JobConfig(kafka={"bootstrap.servers": broker.bootstrap}, topics=topics,
                            checkpoint=str(workdir / "checkpoint"), trigger_ms=2000,
                            source=SourceConfig(max_records_per_task=20_000),
                            master="local[2]", spark={"spark.sql.shuffle.partitions": "4"})
            status: dict[str, str] = {}
            runner = Runner(cfg, rules, out=None,
                            on_progress=lambda name, p: status.__setitem__(name, _short(p)))
            # A second Ctrl-C's hard stop exits without leaving these ``with``s: the broker
            # would live on, holding its port, and the scratch folder stay behind.
            runner.at_hard_stop += [lambda: broker.stop(timeout=2),
                                    lambda: shutil.rmtree(workdir, ignore_errors=True)]
            views: list[MetricsView] = []
            code = 1
            # Every Kafka client — the log producer, the two views, Spark's (in its Python
            # workers) — is gone before the broker stops (leaving the ``with``), so none of
            # them reports the broker's port refusing connections under the final table.
            try:
                # a Ctrl-C while Spark starts stops the demo; Runner.start installs the
                # handlers again over the one pyspark's SparkContext sets
                runner.install_signals()
                print("l2m demo: starting Spark (about 10 s)…", file=out, flush=True)
                runner.start()
                view = MetricsView(broker.bootstrap, topics.metrics)
                views.append(view)
                dead = MetricsView(broker.bootstrap, topics.dead_letters)
                views.append(dead)
                last_draw = [0.0]

                def tick() -> None:
                    view.poll()
                    _count_only(dead)
                    if time.monotonic() - last_draw[0] >= 2.0:
                        last_draw[0] = time.monotonic()
                        _draw(out, tty, view, producer.sent, dead.received, status, rows)

                code = runner.wait(duration=duration, poll=0.5, on_tick=tick)
                producer.finish()
                view.poll()
                _draw(out, tty, view, producer.sent, dead.received, status, rows, final=True)
            finally:
                producer.finish()
                for v in views:
                    v.close()
                if runner.spark is not None:
                    runner.spark.stop()
                runner.closed()
            print(f"l2m demo: stopped; {producer.sent} logs produced, {view.received} samples "
                  f"received, {dead.received} dead letters", file=out, flush=True)
            return code
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _count_only(view: MetricsView) -> None:
    for msg in view.consumer.consume(5000, timeout=0.05):
        if msg.error() is None:
            view.received += 1


def _short(progress: dict[str, Any]) -> str:
    from l2m.runtime.progress import input_records, lag

    behind = lag(progress)
    return (f"batch {progress.get('batchId')}: {input_records(progress)} logs in "
            f"{progress.get('durationMs', {}).get('triggerExecution', 0)} ms, lag "
            f"{behind if behind is not None else '?'}")


def _draw(out: TextIO, tty: bool, view: MetricsView, produced: int, dead: int,
          status: dict[str, str], rows: int, final: bool = False) -> None:
    """Live: redraw the screen (terminal) or print the status lines (pipe); ``final``: the
    whole table either way."""
    lines = [f"l2m demo — {time.strftime('%H:%M:%S')} — logs produced {produced}, "
             f"samples received {view.received}, dead letters {dead}"]
    lines += [f"  {name}: {text}" for name, text in sorted(status.items())]
    lines.append("")
    lines += view.render(rows, width=shutil.get_terminal_size().columns if tty else None)
    if tty and not final:
        out.write("\x1b[H\x1b[2J" + "\n".join(lines) + "\n")
    elif final:
        out.write("\n".join(lines) + "\n")
    else:
        out.write("\n".join(lines[: 1 + len(status)]) + "\n")
    out.flush()


def demo_rules_path() -> str:
    return os.environ.get("L2M_DEMO_RULES", str(Path(__file__).resolve().parents[2] / "rules"))
