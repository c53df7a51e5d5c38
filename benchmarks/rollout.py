"""Rule roll-out: the gap a rule change costs a running ``l2m run``, as Kubernetes makes it.

A ConfigMap change rolls the driver Deployment (``strategy: Recreate``): the old pod gets
SIGTERM, finishes its batch and exits, the new one starts on the same checkpoint with the
changed rules. This scenario does exactly that with two processes on this machine (what the
scheduler and the image pull add on a cluster is not here) while logs keep arriving, and
splits each roll-out into phases seen from outside, through the job's own endpoints:

- ``stop``: SIGTERM → the old process has exited (graceful: the batch in flight finishes);
- ``python``: exec of the new process → ``/healthz`` answers (imports, config, rules);
- ``spark``: → ``/readyz`` says ready (JVM, session, query started);
- ``first batch``: → the first sample of the new rule is on the metrics topic.

Input: an embedded broker's bootstrap. Output: a dict per roll-out and their medians
(``python -m benchmarks.rollout`` prints a table, writes ``rollout.json`` and ``rollout.png``).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
from confluent_kafka import Consumer, Producer, TopicPartition

from benchmarks.load import fresh_topics
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.rules.loader import is_rule_file

ROOT = Path(__file__).resolve().parent.parent
PHASES = ("stop", "python", "spark", "first batch")
NEW_RULE = """\
rules:
  - id: rollout-{n}
    name: rollout_{n}_logs_total
    kind: counter
    query: "*"
    aggregation: count
    group_by: [service]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _status(port: int, path: str) -> int | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=0.5) as r:
            return int(r.status)
    except urllib.error.HTTPError as e:
        return int(e.code)
    except OSError:
        return None


class _Feed(threading.Thread):
    """Logs at a steady rate with current event times, as a live system sends them."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, rate: float) -> None:
        super().__init__(daemon=True)
        self.producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                                  "log_level": "3"})
        self.topic, self.partitions, self.rate = topic, partitions, rate
        self.gen = LogGenerator(GeneratorConfig(seed=11))
        self.halt = threading.Event()
        self.sent = 0

    def run(self) -> None:
        started = time.monotonic()
        while not self.halt.is_set():
            due = int((time.monotonic() - started) * self.rate)
            while self.sent < due:
                doc = self.gen.next_doc()
                doc["@timestamp"] = int(time.time() * 1000)
                self.producer.produce(self.topic, orjson.dumps(doc),
                                      partition=self.sent % self.partitions)
                self.sent += 1
            self.producer.poll(0)
            time.sleep(0.02)
        self.producer.flush(30)


class _Samples(threading.Thread):
    """Watches the metrics topic: when (wall clock, as seen here) each rule's first sample
    arrived, and the longest silence between samples."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True)
        self.consumer = Consumer({"bootstrap.servers": bootstrap, "log_level": "3",
                                  "group.id": f"rollout-{uuid.uuid4().hex}",
                                  "enable.auto.commit": False, "fetch.wait.max.ms": 20})
        self.consumer.assign([TopicPartition(topic, 0, 0)])
        self.first: dict[str, float] = {}
        self.arrivals: list[float] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            for msg in self.consumer.consume(10_000, timeout=0.05):
                if msg.error() is not None:
                    continue
                now = time.time()
                self.arrivals.append(now)
                rule = orjson.loads(msg.value())["rule"]
                self.first.setdefault(rule, now)
        self.consumer.close()


def _config(folder: Path, bootstrap: str, topics: Any, port: int, trigger: str) -> Path:
    rules = folder / "rules"
    shutil.copytree(ROOT / "rules", rules)
    path = folder / "job.yaml"
    path.write_text(
        f"kafka: {{bootstrap.servers: '{bootstrap}'}}\n"
        f"topics: {{logs: {topics.logs}, metrics: {topics.metrics}, "
        f"dead_letters: {topics.dead_letters}}}\n"
        f"rules: [rules]\ncheckpoint: {folder / 'checkpoint'}\ntrigger: {trigger}\n"
        "counter_shards: 8\n"
        f"monitoring: {{port: {port}, host: 127.0.0.1}}\n"
        "spark: {master: 'local[2]', spark.sql.shuffle.partitions: 2}\n")
    return path


def _start(config: Path, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-m", "l2m.cli", "run", "--config", str(config)],
                            stdout=subprocess.DEVNULL, stderr=log.open("ab"),
                            start_new_session=True)


def _wait(predicate: Any, timeout: float, what: str, proc: subprocess.Popen[bytes]) -> float:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return time.time()
        if proc.poll() is not None:
            raise RuntimeError(f"l2m run exited with {proc.returncode} while waiting for {what}")
        time.sleep(0.02)
    raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}")


def run_rollout(bootstrap: str, workdir: Path, rollouts: int = 3, rate: float = 500.0,
                partitions: int = 4, trigger: str = "10 seconds",
                settle_s: float = 3.0) -> dict[str, Any]:
    """Start ``l2m run``, then ``rollouts`` times: add a rule, SIGTERM, start again, and time
    the phases until the new rule's first sample; ``settle_s``: steady batches before the
    first change, and ``5 s`` of them between two changes."""
    from l2m.runtime import jvm as jvmcache

    # As in the image (k8s/scripts/jvm-cache.sh): the class-data archive exists before the
    # first start, instead of being built beside the job being measured.
    archive = jvmcache.archive()
    if archive is not None and not archive.exists():
        jvmcache.build(archive)
    folder = Path(tempfile.mkdtemp(prefix="rollout-", dir=workdir))
    topics = fresh_topics(bootstrap, "roll", partitions)
    port = _free_port()
    config = _config(folder, bootstrap, topics, port, trigger)
    log = folder / "l2m.log"
    feed = _Feed(bootstrap, topics.logs, partitions, rate)
    samples = _Samples(bootstrap, topics.metrics)
    feed.start()
    samples.start()
    proc = _start(config, log)
    rows: list[dict[str, Any]] = []
    try:
        # Steady state first: a sample of every example counter rule has come out.
        _wait(lambda: len(samples.first) >= 3, 180, "the first samples", proc)
        time.sleep(settle_s)
        for n in range(rollouts):
            (folder / "rules" / f"rollout-{n}.yaml").write_text(NEW_RULE.format(n=n))
            t_term = time.time()
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=300)
            t_exit = time.time()
            code = proc.returncode
            proc = _start(config, log)
            t_exec = time.time()
            t_health = _wait(lambda: _status(port, "/healthz") is not None, 120, "/healthz", proc)
            t_ready = _wait(lambda: _status(port, "/readyz") == 200, 180, "/readyz", proc)
            t_first = _wait(lambda n=n: f"rollout-{n}" in samples.first, 180,
                            f"the first sample of rollout-{n}", proc)
            t_first = samples.first[f"rollout-{n}"]
            times = samples.arrivals
            silence = max((b - a for a, b in itertools.pairwise(times)
                           if a >= t_term - 60), default=0.0)
            row = {"rollout": n, "exit_code": code,
                   "phases_s": {"stop": round(t_exit - t_term, 2),
                                "python": round(t_health - t_exec, 2),
                                "spark": round(t_ready - t_health, 2),
                                "first batch": round(t_first - t_ready, 2)},
                   "gap_s": round(t_first - t_term, 2),
                   "longest_silence_s": round(silence, 2)}
            rows.append(row)
            print(f"roll-out {n}: gap {row['gap_s']} s, " + ", ".join(
                f"{k} {v}" for k, v in row["phases_s"].items()), file=sys.stderr)
            if n < rollouts - 1:
                time.sleep(5)  # a few steady batches before the next change
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        feed.halt.set()
        samples.halt.set()
        feed.join(60)
        samples.join(10)
    med = {p: round(statistics.median(r["phases_s"][p] for r in rows), 2) for p in PHASES}
    return {"rollouts": rows, "rate": rate, "partitions": partitions, "trigger": trigger,
            "rules": sum(1 for p in (ROOT / "rules").iterdir() if is_rule_file(p.name)),
            "median_phases_s": med,
            "median_gap_s": round(statistics.median(r["gap_s"] for r in rows), 2),
            "max_gap_s": max(r["gap_s"] for r in rows),
            "jvm_archive": archive is not None and archive.exists(),
            "log": str(log)}


def plot(result: dict[str, Any], path: Path) -> str:
    """One stacked bar per roll-out: where the gap went."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 3.6))
    rows = result["rollouts"]
    left = [0.0] * len(rows)
    labels = [f"roll-out {r['rollout']}" for r in rows]
    for phase, colour in zip(PHASES, ("#fdae6b", "#9ecae1", "#3182bd", "#31a354"), strict=True):
        widths = [r["phases_s"][phase] for r in rows]
        ax.barh(labels, widths, left=left, color=colour, label=phase)
        left = [a + b for a, b in zip(left, widths, strict=True)]
    ax.axvline(15, color="grey", linestyle="--", label="target 15 s")
    ax.axvline(45, color="#de2d26", linestyle=":", label="replaced system 45 s")
    ax.set_xlabel("seconds from SIGTERM to the new rule's first sample")
    ax.set_title(f"Rule roll-out gap ({result['rate']:.0f} logs/s, trigger {result['trigger']})")
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path.name


def main(argv: list[str] | None = None) -> int:
    from benchmarks.__main__ import RESULTS, machine
    from l2m.dev.broker import EmbeddedBroker

    ap = argparse.ArgumentParser(prog="python -m benchmarks.rollout")
    ap.add_argument("--rollouts", type=int, default=3)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp, \
            EmbeddedBroker(log=Path(tmp) / "broker.log") as broker:
        result = run_rollout(broker.bootstrap, Path(tmp), rollouts=args.rollouts)
        result["machine"] = machine()
        result["plot"] = plot(result, out / "rollout.png")
    result.pop("log")
    (out / "rollout.json").write_text(json.dumps(result, indent=2))
    print(f"{'roll-out':<9}" + "".join(f"{p:>13}" for p in PHASES) + f"{'gap':>8}")
    for r in result["rollouts"]:
        print(f"{r['rollout']:<9}" + "".join(f"{r['phases_s'][p]:>13}" for p in PHASES)
              + f"{r['gap_s']:>8}")
    print(f"median gap {result['median_gap_s']} s (target 15 s; the replaced system 45 s); "
          f"machine: {result['machine']['cpus']} cores, {result['machine']['platform']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
