"""What an idle `l2m run` costs, with and without the source's ticks (issue 53, deliverable 5):
CPU seconds of the whole process tree (driver JVM, the driver's Python processes, the
executors' workers) per idle minute, after a small burst of logs.

    .venv/bin/python -m benchmarks.idle [--minutes 3] [--no-tick]

It starts the embedded broker, writes 300 logs over three minutes of event time, starts
`l2m run` (local[2], a 5 s trigger, recheck 60 s) on a fresh checkpoint, waits for the burst's
samples on the metrics topic, then reads the tree's CPU time once a minute while no log
comes; also how many batches ran (the checkpoint's commit log) and how many gauge windows
were published final. ``--no-tick`` runs the job with the ticks turned off (the job's code as
before them), for the comparison."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from l2m.dev.broker import EmbeddedBroker, create_topics

T0 = 1_795_341_600_000
NO_TICK = ("import sys, l2m.streaming.job as j; f = j.rule_options; "
           "j.rule_options = lambda *a, **k: {x: y for x, y in f(*a, **k).items() "
           "if x != 'tickMs'}; from l2m.cli import main; sys.exit(main())")


def tree_cpu(root: int) -> float:
    """CPU seconds (user + system) of ``root`` and every descendant alive now, and of the
    descendants they have reaped."""
    parents: dict[int, int] = {}
    ticks = os.sysconf("SC_CLK_TCK")
    cpu: dict[int, float] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parents[int(entry.name)] = int(fields[1])
        # its own time and its reaped children's (a Python worker that ended is not lost)
        cpu[int(entry.name)] = sum(int(f) for f in fields[11:15]) / ticks
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += cpu.get(pid, 0.0)
        todo += [p for p, parent in parents.items() if parent == pid]
    return total


def finals(bootstrap: str, topic: str) -> int:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "idle-bench",
                         "enable.auto.commit": False, "log_level": "2"})
    consumer.assign([TopicPartition(topic, 0, 0)])
    count, empty = 0, 0
    while empty < 3:
        msg = consumer.poll(1.0)
        if msg is None:
            empty += 1
            continue
        if msg.error():
            continue
        empty = 0
        if dict(msg.headers() or []).get("l2m-mark") == b"final":
            count += 1
    consumer.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=int, default=3)
    parser.add_argument("--no-tick", action="store_true")
    args = parser.parse_args()
    from confluent_kafka import Producer

    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as folder:
        create_topics(broker.bootstrap, ["logs", "metrics", "dead"])
        producer = Producer({"bootstrap.servers": broker.bootstrap})
        now = int(time.time() * 1000)
        for i in range(300):  # three minutes of event time, ending now
            at = now - 180_000 + i * 600
            producer.produce("logs", orjson.dumps({"@timestamp": at, "ms": i % 17}),
                             timestamp=at)
        producer.flush(30)
        rules = Path(folder) / "rules.yaml"
        rules.write_text("rules:\n  - {id: g, name: g_max, kind: gauge, query: '*', "
                         "aggregation: max, field: ms}\n"
                         "  - {id: c, name: c_total, kind: counter, query: '*', "
                         "aggregation: count}\n")
        config = Path(folder) / "job.yaml"
        config.write_text(json.dumps({
            "kafka": {"bootstrap.servers": broker.bootstrap},
            "topics": {"logs": "logs", "metrics": "metrics", "dead_letters": "dead"},
            "rules": [str(rules)], "checkpoint": f"{folder}/checkpoint",
            "trigger": "5 seconds", "grace": "1 minute", "publish_delay": "0 seconds",
            "counter_shards": 2, "source": {"starting_offsets": "earliest"},
            "spark": {"master": "local[2]", "spark.sql.shuffle.partitions": "2"}}))
        code = NO_TICK if args.no_tick else "import sys; from l2m.cli import main; sys.exit(main())"
        log = Path(tempfile.gettempdir()) / f"l2m-idle-{'no-tick' if args.no_tick else 'tick'}.log"
        with log.open("w") as out:  # the job's lines, for a run that goes wrong
            run = subprocess.Popen([sys.executable, "-c", code, "run", "--config", str(config)],
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        commits = Path(folder) / "checkpoint" / "metrics" / "commits"
        try:
            deadline = time.monotonic() + 300
            while not (commits.exists() and any(commits.iterdir())) \
                    and time.monotonic() < deadline:
                time.sleep(1)
            time.sleep(15)  # the burst's batch done, its account samples written
            batches = len([p for p in commits.iterdir() if p.name.isdigit()])
            start = tree_cpu(run.pid)
            began = time.monotonic()
            per_minute = []
            last = start
            for minute in range(args.minutes):
                time.sleep(max(0.0, began + 60 * (minute + 1) - time.monotonic()))
                cpu = tree_cpu(run.pid)
                per_minute.append(round(cpu - last, 2))
                last = cpu
            after = len([p for p in commits.iterdir() if p.name.isdigit()])
            print(json.dumps({"tick": not args.no_tick, "cpu_s_per_idle_minute": per_minute,
                              "cpu_s_total": round(last - start, 2),
                              "batches_before_idle": batches,
                              "batches_while_idle": after - batches,
                              "windows_published_final": finals(broker.bootstrap, "metrics")}))
        finally:
            os.killpg(run.pid, signal.SIGTERM)
            run.wait(120)


if __name__ == "__main__":
    main()
