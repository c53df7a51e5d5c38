"""The machine's ceiling for read + parse, two ways:

* **timed apart** (:func:`consume_rate`, :func:`parse_rate`): raw confluent-kafka consume rate
  of a backlog (one process per core) and pyarrow's JSON parse rate of the same logs,
  combined as if each core did both in turn;
* **together** (:func:`consume_parse_rate`, issue 21): one process per core consuming its
  share of the backlog and ``orjson.loads`` of every record, in the same loop — what any
  consumer that looks at each log must pay at least."""

from __future__ import annotations

import io
import multiprocessing as mp
import time
import uuid

import orjson
import pyarrow.json as pj
from confluent_kafka import Consumer, TopicPartition

from benchmarks.load import LoadSpec, preload
from l2m.dev.broker import create_topics
from l2m.dev.generator import GeneratorConfig, LogGenerator


def _consume(bootstrap: str, topic: str, partitions: list[int], expected: int,
             parse: bool = False) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"lim-{uuid.uuid4().hex}",
                         "enable.auto.commit": False, "fetch.max.bytes": 64 << 20,
                         "max.partition.fetch.bytes": 16 << 20,
                         "queued.max.messages.kbytes": 262144, "log_level": "3"})
    consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
    seen = 0
    idle = 0
    while seen < expected and idle < 10:
        messages = consumer.consume(10_000, timeout=0.5)
        idle = 0 if messages else idle + 1
        for msg in messages:
            if msg.error() is None:
                value = msg.value()
                if value is not None:
                    seen += 1
                    if parse and value:
                        orjson.loads(value)
    consumer.close()
    return seen


def consume_rate(bootstrap: str, records: int, partitions: int, processes: int,
                 parse: bool = False, topic: str | None = None) -> dict:
    """Records per second of a backlog of ``records`` logs over ``partitions``, consumed by
    ``processes`` processes (and each record parsed with ``orjson.loads`` when ``parse``):
    the load generator's logs on a topic of its own, or ``topic``'s backlog when given (one
    preloaded with ``records`` logs, as :func:`benchmarks.load.preload` closes them)."""
    if topic is None:
        topic = f"limit-{uuid.uuid4().hex[:6]}"
        create_topics(bootstrap, [topic], partitions=partitions)
        preload(LoadSpec(bootstrap, topic, partitions, records))
    groups = [list(range(partitions))[i::processes] for i in range(processes)]
    share = [sum(records // partitions + (1 if p < records % partitions else 0) for p in g)
             for g in groups]
    ctx = mp.get_context("spawn")
    started = time.monotonic()
    with ctx.Pool(processes) as pool:
        seen = sum(pool.starmap(_consume, [(bootstrap, topic, g, n + len(g), parse)
                                           for g, n in zip(groups, share, strict=True)]))
    elapsed = time.monotonic() - started
    return {"records": seen, "seconds": round(elapsed, 2), "per_s": round(seen / elapsed),
            "processes": processes, "parsed": parse}


def consume_parse_rate(bootstrap: str, records: int, partitions: int, processes: int,
                       topic: str | None = None) -> dict:
    """The ceiling measured together: consume + ``orjson.loads`` of every record, one process
    per core (issue 21's reference, 261.7k logs/s on def2d50's machine); of ``topic``'s
    backlog when given (another corpus's, issue 58), else of the load generator's logs."""
    return consume_rate(bootstrap, records, partitions, processes, parse=True, topic=topic)


def parse_rate(records: int) -> dict:
    """pyarrow infers one type per column, so the generator's deliberate mixed types (epoch
    and ISO timestamps, numeric and string status codes) are made uniform first; the size and
    shape of the logs are unchanged."""
    gen = LogGenerator(GeneratorConfig(seed=3))
    lines = []
    for _ in range(records):
        doc = gen.next_doc()
        doc["@timestamp"] = str(doc.get("@timestamp", ""))
        if "http" in doc:
            doc["http"]["status"] = int(doc["http"]["status"])
        lines.append(orjson.dumps(doc))
    data = b"\n".join(lines) + b"\n"
    started = time.monotonic()
    table = pj.read_json(io.BytesIO(data))
    elapsed = time.monotonic() - started
    return {"records": table.num_rows, "bytes": len(data), "seconds": round(elapsed, 3),
            "per_s": round(table.num_rows / elapsed),
            "mb_per_s": round(len(data) / elapsed / 1e6, 1),
            "avg_log_bytes": round(len(data) / records)}
