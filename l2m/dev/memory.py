"""An in-memory stand-in for the Kafka source (``format("l2m-memory")``), for tests: records
(log bytes and a record timestamp, as a Kafka record has) that a test appends to a folder are
read, parsed, routed and pre-aggregated in the read task as Kafka's are (:mod:`l2m.engine.pipeline`)
and fed to the same state stage, without a broker. :class:`tests.streamtest.StreamTest` drives it.

Input: a folder with one sub-folder per logical partition (``p0``, ``p1``, …); each
:func:`append` writes one file ``<first offset>-<count>.jsonl`` of records
``{"v": base64 | null, "ts": ms | null}``, atomically (written, then renamed), so a reader
never sees half a file. Offsets are ``{"partitions": {"0": n, …}}``: records per partition,
like Kafka offsets. Output: with ``routing``, the task's partials (``PARTIAL_SCHEMA``); with
``parsePlan``, the rows of ``ParsePlan.schema()`` (the rules' field columns, ``_ts``,
``_status``, ``_error``) — by the same read task as the Kafka reader's
(:class:`l2m.engine.readtask.ReadTask`), with the record timestamps as fallback; one task per
partition with new records, so tasks run in parallel. Option ``tickMs``: ticks as the Kafka
source's (:class:`l2m.kafka.source.Ticker`), ``tick`` and ``timers`` in the offsets.

``read()`` is stateless — it needs only the folder and the offsets in its partition — because
Spark pickles the reader to a Python worker that is not the driver's."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from l2m.defaults import BATCH_ROWS
from l2m.engine.columns import STREAM_PARTIAL_SCHEMA
from l2m.engine.parse import ParsePlan
from l2m.engine.partials import PARTIAL_SCHEMA
from l2m.engine.readtask import ReadTask
from l2m.engine.rulesets import Versions, planned_version
from l2m.engine.streamtask import StreamTask
from l2m.kafka.source import Ticker, ticked

NAME = "l2m-memory"


def append(folder: str | Path, partition: int, values: Sequence[bytes | None],
           timestamps: Sequence[int | None]) -> tuple[int, int]:
    """Append records (``None`` value: a tombstone; ``None`` timestamp: a record without
    one) to one partition of a memory-source folder; returns their offsets ``[start, end)``.
    One writer at a time: the next offset is read from the folder."""
    part = Path(folder) / f"p{partition}"
    part.mkdir(parents=True, exist_ok=True)
    start = _end(part)
    lines = [json.dumps({"v": None if v is None else base64.b64encode(v).decode(), "ts": ts})
             for v, ts in zip(values, timestamps, strict=True)]
    if not lines:
        return start, start
    tmp = part / f".{start:012d}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(part / f"{start:012d}-{len(lines)}.jsonl")
    return start, start + len(lines)


def _files(part: Path) -> list[tuple[int, int, Path]]:
    """(first offset, count, path) of a partition's files, in offset order."""
    out = []
    for f in part.glob("*.jsonl"):
        first, count = f.stem.split("-")
        out.append((int(first), int(count), f))
    return sorted(out)


def _end(part: Path) -> int:
    files = _files(part)
    return files[-1][0] + files[-1][1] if files else 0


class MemoryPartition(InputPartition):
    """One task: records ``[start, end)`` of one partition."""

    def __init__(self, partition: int, start: int, end: int, ruleset: str | None = None) -> None:
        super().__init__((partition, start, end, ruleset))
        self.partition, self.start, self.end = partition, start, end
        self.ruleset = ruleset


class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        # Spark hands Python data sources their option names lower-cased.
        options = {k.lower(): v for k, v in options.items()}
        self.folder = Path(options["path"])
        self.partitions_n = int(options.get("partitions", "2"))
        self.routing = options.get("routing")
        self.parse_plan = options.get("parseplan")
        # Live rules, as the Kafka reader takes them (l2m.engine.rulesets).
        self.versions = Versions(options["ruleset"], self.routing) \
            if self.routing and options.get("ruleset") else None
        self.ruleset_file = options.get("rulesetfile")
        self.shards = int(options.get("shards") or 1)
        self.pack = options.get("pack") == "1"
        self._target: dict[str, int] | None = None
        self._latest: dict[str, int] | None = None
        # Ticks as the Kafka reader's (l2m.kafka.source.Ticker): a batch without rows for the
        # state's timers when the folder has nothing new.
        self.ticker = Ticker(int(options.get("tickms") or 0))

    def _offsets(self) -> dict[str, int]:
        return {str(p): _end(self.folder / f"p{p}") for p in range(self.partitions_n)}

    def initialOffset(self) -> dict[str, Any]:
        return {"partitions": {str(p): 0 for p in range(self.partitions_n)}}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._offsets()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        # No admission control: a test decides batch sizes by when it calls process().
        self._latest = self._target if self._target is not None else self._offsets()
        if self._latest == {p: int(o) for p, o in start["partitions"].items()}:
            if not self.ticker.due(self._target is not None, start):
                return start
            return self.ticker.stamp(ticked(start), start)
        self.ticker.data()
        out: dict[str, Any] = {"partitions": self._latest}
        if self.versions is not None:
            out["ruleset"] = planned_version(self.ruleset_file, self.versions.version)
        if start.get("tick"):
            out["tick"] = start["tick"]
        return self.ticker.stamp(out, start)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return None if self._latest is None else {"partitions": self._latest}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, until = start["partitions"], end["partitions"]
        return [MemoryPartition(int(p), int(begin.get(p, 0)), int(stop), end.get("ruleset"))
                for p, stop in sorted(until.items()) if int(stop) > int(begin.get(p, 0))]

    def commit(self, end: dict[str, Any]) -> None:
        pass  # the test owns the folder; nothing is ever deleted

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, MemoryPartition)
        values: list[bytes | None] = []
        stamps: list[int | None] = []
        for first, count, path in _files(self.folder / f"p{partition.partition}"):
            if first + count <= partition.start or first >= partition.end:
                continue
            for offset, line in enumerate(path.read_text().splitlines(), start=first):
                if partition.start <= offset < partition.end:
                    record = json.loads(line)
                    values.append(None if record["v"] is None
                                  else base64.b64decode(record["v"]))
                    stamps.append(record["ts"])
        # Batches of the Kafka reader's size, so a large add() reaches the pre-aggregation
        # in several Arrow batches as Kafka input would.
        if self.versions is not None:
            from pyspark import SparkFiles

            task: ReadTask | None = StreamTask(self.versions, partition.ruleset,
                                               SparkFiles.getRootDirectory(), self.shards,
                                               self.pack)
        else:
            task = ReadTask.from_options(self.routing, self.parse_plan)
        assert task is not None
        for i in range(0, len(values), BATCH_ROWS):
            yield from task.add(values[i:i + BATCH_ROWS], stamps[i:i + BATCH_ROWS])
        yield from task.finish()


class MemorySource(DataSource):
    """``spark.readStream.format("l2m-memory").option("path", folder)
    .option("partitions", n)`` and ``.option("routing", …)`` (partials, as the Kafka
    reader's) or ``.option("parsePlan", plan_json)`` (parsed logs)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        options = {k.lower(): v for k, v in self.options.items()}
        if options.get("routing"):
            return STREAM_PARTIAL_SCHEMA if options.get("ruleset") else PARTIAL_SCHEMA
        return ParsePlan.from_json(options["parseplan"]).spark_schema_ddl()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MemoryStreamReader(dict(self.options))
