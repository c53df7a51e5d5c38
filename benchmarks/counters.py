"""Counter stage under 100k active series: every micro-batch touches every series.

    python -m benchmarks.counters --series 100000 --batches 4

The rule set has counters only. Prints per-batch durations, writes
benchmarks/results/counters.json, names the machine."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import orjson
from confluent_kafka import Producer

from benchmarks.e2e import machine
from l2m.config.job import JobConfig, SourceConfig, Topics
from l2m.dev.broker import EmbeddedBroker, create_topics
from l2m.rules.loader import load_text
from l2m.runtime.runner import session_for
from l2m.streaming.job import start_job

ROOT = Path(__file__).resolve().parent.parent
RULES = """\
rules:
  - {id: requests, name: requests_total, kind: counter, query: "*", aggregation: count,
     group_by: [user]}
  - {id: bytes, name: bytes_total, kind: counter, query: "*", aggregation: sum, field: bytes,
     group_by: [user]}
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--series", type=int, default=100_000)
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--shards", type=int, default=16)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "counters.json"))
    args = ap.parse_args(argv)
    rules, _ = load_text(RULES)
    n = args.series * args.batches
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        topics = Topics()
        create_topics(broker.bootstrap, [topics.logs], partitions=args.partitions)
        create_topics(broker.bootstrap, [topics.metrics, topics.dead_letters])
        producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 20,
                             "log_level": "3"})
        for i in range(n):
            producer.produce(topics.logs, partition=i % args.partitions, value=orjson.dumps(
                {"@timestamp": 1795341600000 + i, "user": f"u{i % args.series}", "bytes": i % 977}))
            if i % 10000 == 0:
                producer.poll(0)
        producer.flush(120)
        for p in range(args.partitions):
            producer.produce(topics.logs, partition=p, value=b"")
            producer.flush(30)
        cfg = JobConfig(kafka={"bootstrap.servers": broker.bootstrap}, topics=topics,
                        checkpoint=f"{tmp}/ck", counter_shards=args.shards, master="local[2]",
                        spark={"spark.sql.shuffle.partitions": "4"},
                        source=SourceConfig(max_records_per_trigger=args.series,
                                            max_records_per_task=args.series // 4))
        spark = session_for(cfg)
        started = time.monotonic()
        query = start_job(spark, cfg, rules, once=True).query
        query.awaitTermination()
        elapsed = time.monotonic() - started
        batches = [p for p in query.recentProgress if p["numInputRows"] >= args.series // 2]
        durations = [p["durationMs"]["triggerExecution"] for p in batches]
        state_rows = [sum(s["numRowsTotal"] for s in p["stateOperators"]) for p in batches]
        spark.stop()
    steady = durations[1:] or durations
    result = {
        "machine": machine(), "series": args.series, "shards_per_rule": args.shards,
        "rules": 2, "logs_per_batch": args.series, "batches_ms": durations,
        "median_steady_batch_ms": statistics.median(steady),
        "steady_logs_per_s": round(args.series / (statistics.median(steady) / 1000)),
        "state_rows": state_rows, "total_seconds": round(elapsed, 1),
    }
    print(f"{'batch':>5} {'logs':>8} {'ms':>7} {'state rows':>10}")
    for i, (d, s) in enumerate(zip(durations, state_rows, strict=True)):
        print(f"{i:>5} {args.series:>8} {d:>7} {s:>10}")
    print(f"{args.series:,} active series x 2 rules, every series updated in every batch: "
          f"median steady batch {result['median_steady_batch_ms']} ms "
          f"({result['steady_logs_per_s']:,} logs/s); {result['machine']['cpus']} cores")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
