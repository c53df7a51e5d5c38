"""An in-memory stand-in for the Kafka source (``format("l2m-memory")``), for tests: records
(log bytes and a record timestamp, as a Kafka record has) that a test appends to a folder are
read, parsed and fed to the same route → pre-aggregate → state stages as Kafka's, without a
broker. :class:`tests.streamtest.StreamTest` drives it.

Input: a folder with one sub-folder per partition (``p0``, ``p1``, …); each :func:`append`
writes one file ``<first offset>-<count>.jsonl`` of records ``{"v": base64 | null, "ts": ms}``,
atomically (written, then renamed). Offsets are ``{"partitions": {"0": n, …}}``, records per
partition. Output: the rows of ``ParsePlan.schema()``, parsed by :func:`l2m.parse.parse_lines`
with the record timestamps as fallback, exactly as the Kafka reader parses."""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow
from pyspark.sql.types import StructType

from l2m.parse import ParsePlan, parse_lines


def append(folder: str | Path, partition: int, values: Sequence[bytes | None],
           timestamps: Sequence[int]) -> None:
    """Append records to one partition of a memory-source folder."""
    part = Path(folder) / f"p{partition}"
    part.mkdir(parents=True, exist_ok=True)
    start = _end(part)
    lines = [json.dumps({"v": None if v is None else base64.b64encode(v).decode(), "ts": ts})
             for v, ts in zip(values, timestamps, strict=True)]
    tmp = part / f".{start:012d}.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(part / f"{start:012d}-{len(lines)}.jsonl")


def _files(part: Path) -> list[tuple[int, int, Path]]:
    out = []
    for f in part.glob("*.jsonl"):
        first, count = f.stem.split("-")
        out.append((int(first), int(count), f))
    return sorted(out)


def _end(part: Path) -> int:
    files = _files(part)
    return files[-1][0] + files[-1][1] if files else 0


class MemoryPartition(InputPartition):
    def __init__(self, partition: int, start: int, end: int) -> None:
        super().__init__((partition, start, end))
        self.partition, self.start, self.end = partition, start, end


class MemoryStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    def __init__(self, options: dict[str, str]) -> None:
        options = {k.lower(): v for k, v in options.items()}
        self.folder = Path(options["path"])
        self.partitions_n = int(options.get("partitions", "2"))
        self.plan = ParsePlan.from_json(options["parseplan"])
        self._target: dict[str, int] | None = None

    def _latest(self) -> dict[str, int]:
        return {str(p): _end(self.folder / f"p{p}") for p in range(self.partitions_n)}

    def initialOffset(self) -> dict[str, Any]:
        return {"partitions": {str(p): 0 for p in range(self.partitions_n)}}

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def latestOffset(self, start: dict[str, Any], limit: Any) -> dict[str, Any]:
        return {"partitions": self._target if self._target is not None else self._latest()}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        begin, until = start["partitions"], end["partitions"]
        return [MemoryPartition(int(p), int(begin.get(p, 0)), int(stop))
                for p, stop in sorted(until.items()) if int(stop) > int(begin.get(p, 0))]

    def commit(self, end: dict[str, Any]) -> None:
        pass

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
        if values:
            yield parse_lines(values, self.plan, fallback_ts=stamps,
                              now_ms=int(time.time() * 1000))


class MemorySource(DataSource):
    """``spark.readStream.format("l2m-memory").option("path", folder)
    .option("partitions", n).option("parsePlan", plan_json)``."""

    @classmethod
    def name(cls) -> str:
        return "l2m-memory"

    def schema(self) -> str:
        return ParsePlan.from_json(self.options["parsePlan"] if "parsePlan" in self.options
                                   else self.options["parseplan"]).spark_schema_ddl()

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return MemoryStreamReader(dict(self.options))
