"""The peer: the same logs-to-metrics job written with Quix Streams, the Kafka-Streams-style
Python library — a consumer group, RocksDB state, a repartition topic by series — run as one
process per core, draining the same backlog on the same broker.

Same rules' logic, written as a competent Quix user would: each process compiles every rule
once, at start, into plain Python closures (:mod:`benchmarks.predicates`) — the query tree
into a predicate built from its children's predicates (field paths pre-split, numbers
pre-parsed, patterns precompiled), plus the rule's account check, group-by labels and value
extraction — with exactly the semantics of the reference evaluator ``tests/support/reference.py``
(checked equal on random queries and the example rules). Per log: parse, pick the rules of
the log's account, run their predicates. Matches are re-keyed by series (group_by, a
repartition through Kafka), then counters are a stateful running total and gauges a
one-minute tumbling window with a 20-minute grace, like the old Kafka Streams aggregator.

Each process is ``python -m benchmarks.peer_quix worker ARGS`` with Quix Streams' own packages
first on its path (:mod:`benchmarks.peer_env`: Quix Streams pins an older confluent-kafka than
l2m's); it prints how many logs it processed as its last line."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

from benchmarks.peer_env import ensure_site, peer_environment
from benchmarks.predicates import CompiledRules
from l2m.semantics.values import lookup, parse_timestamp

ROOT = Path(__file__).resolve().parent.parent


def _matches(raw: bytes | None, rules: CompiledRules) -> list[dict[str, Any]]:
    """The matches of one raw log: one record per rule and series (per ``le`` bucket for a
    histogram), as ``tests.reference.rule_match`` would count it."""
    if not raw:
        return []
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(doc, dict):
        return []
    ts = parse_timestamp(lookup(doc, "@timestamp"))
    if ts is None:
        return []
    out = []
    for rule in rules.for_doc(doc):  # the log's account's rules: the account check is done
        if not rule.pred(doc):
            continue
        value = rule.value(doc)
        if value is None:
            continue
        labels = rule.labels(doc)
        rule_id = rule.rule.id
        kind = rule.rule.kind
        les: list[str | None] = [None]
        if rule.buckets:
            les = [le for le, bound in rule.buckets if value <= bound] + ["+Inf"]
        for le in les:
            series = orjson.dumps([rule_id, sorted(labels.items()), le]).decode()
            out.append({"rule": rule_id, "kind": kind, "series": series, "labels": labels,
                        "le": le, "v": value, "ts": ts})
    return out


def _worker(bootstrap: str, logs: str, metrics: str, partitions: int, group: str,
            state_dir: str, idle_s: float) -> int:
    """One peer process's run: consume until ``idle_s`` without a message; the number of
    logs it processed."""
    import logging

    from quixstreams import Application
    from quixstreams.models.topics import TopicConfig

    from l2m.rules.loader import load_rules

    logging.getLogger("quixstreams").setLevel(logging.ERROR)
    rules = CompiledRules([r for r in load_rules([ROOT / "benchmarks" / "rules.yaml"]).rules
                           if r.enabled])
    app = Application(broker_address=bootstrap, consumer_group=group,
                      auto_offset_reset="earliest", state_dir=state_dir, loglevel="ERROR",
                      consumer_extra_config={"log_level": 3},
                      producer_extra_config={"log_level": 3})
    # tansu's DescribeConfigs answers nothing: give Quix the topic configs it would read.
    retention = {"retention.ms": "-1", "retention.bytes": "-1"}
    topic_config = TopicConfig(num_partitions=partitions, replication_factor=1,
                               extra_config=retention)
    source = app.topic(logs, value_deserializer="bytes", config=topic_config)
    source.broker_config = topic_config
    sink_config = TopicConfig(num_partitions=1, replication_factor=1, extra_config=retention)
    sink = app.topic(metrics, value_serializer="json", config=sink_config)
    sink.broker_config = sink_config
    processed = [0]

    def explode(raw: bytes | None) -> list[dict[str, Any]]:
        processed[0] += 1
        return _matches(raw, rules)

    sdf = app.dataframe(source)
    sdf = sdf.apply(explode, expand=True)
    sdf = sdf.set_timestamp(lambda value, _key, _ts, _headers: value["ts"])
    sdf = sdf.group_by(lambda m: m["series"], name="series",
                       key_serializer="str", key_deserializer="str")

    def counter(m: dict[str, Any], state: Any) -> dict[str, Any]:
        total = state.get("total", 0.0) + (m["v"] if m["le"] is None else 1.0)
        n = state.get("n", 0) + 1
        ts = max(state.get("ts", 0), m["ts"])
        state.set("total", total)
        state.set("n", n)
        state.set("ts", ts)
        return {"name": m["rule"], "labels": m["labels"], "value": total, "timestamp": ts}

    counters = sdf.filter(lambda m: m["kind"] == "counter").apply(counter, stateful=True)
    counters.to_topic(sink)

    def init(m: dict[str, Any]) -> dict[str, Any]:
        return {"n": 1, "sum": m["v"], "min": m["v"], "max": m["v"]}

    def reduce(agg: dict[str, Any], m: dict[str, Any]) -> dict[str, Any]:
        return {"n": agg["n"] + 1, "sum": agg["sum"] + m["v"], "min": min(agg["min"], m["v"]),
                "max": max(agg["max"], m["v"])}

    gauges = (sdf.filter(lambda m: m["kind"] == "gauge")
              .tumbling_window(60_000, grace_ms=20 * 60_000).reduce(reduce, init).current())
    gauges.to_topic(sink)
    app.run(timeout=idle_s)
    return processed[0]


def run_peer(bootstrap: str, logs: str, partitions: int, records: int, processes: int,
             workdir: Path, idle_s: float = 10.0) -> dict[str, Any]:
    """Drain ``logs`` with ``processes`` Quix Streams processes in one consumer group.
    The drain time excludes the final idle wait that tells the processes the backlog is done."""
    from l2m.dev.broker import create_topics

    site = ensure_site()  # before the clock starts: a first run installs Quix Streams
    metrics = f"peer-metrics-{uuid.uuid4().hex[:6]}"
    create_topics(bootstrap, [metrics])
    group = f"peer-{uuid.uuid4().hex[:6]}"
    env = peer_environment(site, ROOT)
    started = time.monotonic()
    workers = [subprocess.Popen(
        [sys.executable, "-m", "benchmarks.peer_quix", "worker", json.dumps(
            [bootstrap, logs, metrics, partitions, group, str(workdir / f"quix-{group}-{i}"),
             idle_s])], env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
        for i in range(processes)]
    outputs = [w.communicate()[0] for w in workers]
    elapsed = max(0.001, time.monotonic() - started - idle_s)
    processed = []
    for out in outputs:
        last = out.strip().splitlines()[-1:] if out else []
        processed.append(int(json.loads(last[0])["processed"]) if last else 0)
    return {"processes": processes, "records": records, "processed": processed,
            "drain_s": round(elapsed, 2), "logs_per_s": round(records / elapsed),
            "exit_codes": [w.returncode for w in workers], "versions": _version(env)}


def _version(env: dict[str, str]) -> dict[str, str]:
    """The peer's library versions, as its processes import them."""
    out = subprocess.run([sys.executable, "-c", "import json, importlib.metadata as m; "
                          "print(json.dumps({p: m.version(p) for p in "
                          "('quixstreams', 'confluent-kafka')}))"],
                         env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out)


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    count = _worker(*json.loads(sys.argv[2]))
    print(json.dumps({"processed": count}), flush=True)
