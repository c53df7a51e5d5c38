"""End-to-end streaming throughput: a pre-loaded backlog on the embedded broker drained by
`l2m run --once`-style processing, measured from the first planned batch to
the last sample on the metrics topic.

    python -m benchmarks.e2e --logs 300000 --per-batch 50000

Prints a table, writes benchmarks/results/e2e.json, names the machine."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Producer

from l2m.config.job import JobConfig, SourceConfig, Topics
from l2m.dev.broker import EmbeddedBroker, create_topics
from l2m.dev.generator import GeneratorConfig, LogGenerator
from l2m.rules.loader import load_rules
from l2m.runtime.runner import session_for
from l2m.streaming.job import start_job

ROOT = Path(__file__).resolve().parent.parent


def machine() -> dict[str, object]:
    import pyspark

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"cpus": os.cpu_count(), "memory_gib": round(mem, 1),
            "python": platform.python_version(), "pyspark": pyspark.__version__,
            "platform": platform.platform()}


def preload(bootstrap: str, topic: str, n: int, partitions: int, seed: int = 1) -> float:
    """Produce n generated logs round-robin; returns seconds. Two producer threads."""
    def part(k: int) -> None:
        gen = LogGenerator(GeneratorConfig(seed=seed + k, rate_per_s=500))
        producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                             "batch.num.messages": 10000, "log_level": "3"})
        for i in range(k, n, 2):
            producer.produce(topic, value=gen.next_line(), partition=i % partitions)
            if i % 10000 == k:
                producer.poll(0)
        producer.flush(120)

    started = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(part, range(2)))
    closer = Producer({"bootstrap.servers": bootstrap, "log_level": "3"})
    for p in range(partitions):
        closer.produce(topic, value=b"", partition=p)
        closer.flush(30)
    return time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--logs", type=int, default=300_000)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--per-batch", type=int, default=50_000)
    ap.add_argument("--per-task", type=int, default=25_000)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "e2e.json"))
    args = ap.parse_args(argv)
    rules = load_rules([ROOT / "rules"]).rules
    with tempfile.TemporaryDirectory() as tmp, EmbeddedBroker() as broker:
        topics = Topics()
        create_topics(broker.bootstrap, [topics.logs], partitions=args.partitions)
        create_topics(broker.bootstrap, [topics.metrics, topics.dead_letters])
        load_s = preload(broker.bootstrap, topics.logs, args.logs, args.partitions)
        print(f"preloaded {args.logs} logs in {load_s:.1f}s", file=sys.stderr)
        cfg = JobConfig(kafka={"bootstrap.servers": broker.bootstrap}, topics=topics,
                        checkpoint=f"{tmp}/ck", counter_shards=args.shards, master="local[2]",
                        spark={"spark.sql.shuffle.partitions": "2"},
                        source=SourceConfig(max_records_per_trigger=args.per_batch,
                                            max_records_per_task=args.per_task))
        spark = session_for(cfg)
        spark.range(1).count()  # JVM warm-up outside the measurement
        started = time.monotonic()
        job = start_job(spark, cfg, rules, once=True)
        for q in job.queries:
            q.awaitTermination()
            if q.exception():
                raise SystemExit(f"query failed: {q.exception()}")
        elapsed = time.monotonic() - started
        assert job.counts is not None
        reduction = job.counts.reduction
        rows_in, rows_out = reduction.rows_in.value, reduction.rows_out.value
        result = {"machine": machine(), "logs": args.logs, "seconds": round(elapsed, 2),
                  "logs_per_s": round(args.logs / elapsed), "queries": {},
                  "preaggregation": {"match_rows_in": rows_in, "partials_out": rows_out,
                                              "reduction": round(rows_in / max(rows_out, 1), 1)}}
        for q in job.queries:
            batches = [p for p in q.recentProgress if p["numInputRows"]]
            durations = [p["durationMs"]["triggerExecution"] for p in batches]
            result["queries"][q.name] = {
                "batches": len(batches),
                "median_batch_ms": statistics.median(durations) if durations else None,
                "max_batch_ms": max(durations) if durations else None,
                "add_batch_ms_median": statistics.median(
                    p["durationMs"].get("addBatch", 0) for p in batches) if batches else None,
            }
        spark.stop()
    print(f"{'query':<14} {'batches':>7} {'median ms':>10} {'max ms':>8}")
    for name, q in result["queries"].items():
        print(f"{name:<14} {q['batches']:>7} {q['median_batch_ms']:>10} {q['max_batch_ms']:>8}")
    pre = result["preaggregation"]
    print(f"pre-aggregation: {pre['match_rows_in']} match rows -> "
          f"{pre['partials_out']} partials ({pre['reduction']}x fewer rows into the shuffle)")
    print(f"end to end: {args.logs} logs in {elapsed:.1f}s = {args.logs / elapsed:,.0f} logs/s "
          f"({result['machine']['cpus']} cores)")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
