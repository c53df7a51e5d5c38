"""`l2m backfill`: the rules over JSON-lines files as one Spark batch job (SPEC §3–5).

per task, in Python: read its split of the files (:mod:`l2m.batch.lines`) → on Arrow: parse →
route → pre-aggregate (the streaming job's read task, :mod:`l2m.engine.readtask`) → shuffle
by window (an admission domain) → per task, merge the partials by (rule, series, le, window)
with the read tasks' own merge (:func:`l2m.engine.partials.merge`), admit series under the
caps and build the samples as JSON lines (:mod:`l2m.batch.finals`) → the driver sorts the
lines into the output's order and writes them, one per gauge series-window and one per
counter series. One pass over the input yields both the samples and the run's summary
(status rows, :mod:`l2m.engine.status`).

Input: the rules, JSON-lines files or directories (plain, ``.gz``, ``.bz2``, other Hadoop
codecs through Spark's text source) and an output path. Output: the samples file (atomically)
and a :class:`BackfillSummary`; an :class:`~l2m.errors.InputError` for inputs it cannot read
as asked.

No input line can fail the job: lines are read as bytes (invalid UTF-8 is a malformed line,
not a decoding error), and every ``.gz`` file is checked first, in parallel — a corrupt or
truncated one is reported by name and skipped (``--strict``: the job fails instead). The
output is written to ``<output>.partial`` and renamed at the end; a failed run removes it."""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from l2m.batch.finals import FINAL_ARROW, final_rows, ordered_lines
from l2m.batch.lines import (
    SPARK_CODECS,
    Split,
    check_inputs_exist,
    compressed,
    input_files,
    open_compressed,
    plan_splits,
    read_split,
    split_size,
)
from l2m.batch.local import DEFAULT_LIMITS, per_rule_caps, routing_for, within_caps
from l2m.batch.packs import PACKED_SCHEMA, pack, partition_keys, unpack
from l2m.batch.progress import JobProgress
from l2m.batch.summary import BackfillSummary, tally
from l2m.defaults import (
    BATCH_ROWS,
    MAX_LABEL_VALUE_LENGTH,
    TIMESTAMP_FIELD,
)
from l2m.engine.admission import (
    beyond_rule_caps,
)
from l2m.engine.pipeline import routing_from_option, routing_option
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing
from l2m.errors import InputError
from l2m.policy.limits import Limits, check_label_limit
from l2m.rules.model import Rule
from l2m.semantics.windows import MINUTE_MS


def check_paths(inputs: Sequence[str], output: str | Path) -> None:
    """Refuse inputs that do not exist, and an output that is an input file or lies inside an
    input directory (it would be overwritten, or read by the next run)."""
    check_inputs_exist(inputs)
    out = Path(output).resolve()
    for item in inputs:
        path = Path(item).resolve()
        if out == path:
            raise InputError(f"--output {output} is the input file {item}: it would be "
                             "overwritten; write the samples somewhere else")
        if path.is_dir() and path in out.parents:
            raise InputError(f"--output {output} is inside the input directory {item}: the "
                             "next run would read it as logs; write it somewhere else")
    if out.is_dir():
        raise InputError(f"--output {output} is a directory; give a file name")


def _check_compressed(path: str) -> str | None:
    """Why a compressed file cannot be read to its end, or None. Runs in a Spark task."""
    import zlib

    try:
        with open_compressed(path) as f:
            while f.read(1 << 20):
                pass
    except (OSError, EOFError, zlib.error) as exc:
        return str(exc) or type(exc).__name__
    return None


def corrupt_compressed_files(spark: SparkSession, files: Sequence[Path]
                             ) -> list[tuple[str, str]]:
    """(path, reason) of every ``.gz`` or ``.bz2`` file that does not decompress to its end,
    checked in parallel: reading it would fail the whole job, after reading part of it."""
    packed = [str(f) for f in files if compressed(f)]
    if not packed:
        return []
    checked = spark.sparkContext.parallelize(packed, len(packed)).map(
        lambda p: (p, _check_compressed(p))).collect()
    return [(path, reason) for path, reason in checked if reason is not None]


def _format(path: str) -> str:
    return "bzip2" if path.endswith(".bz2") else "gzip"


def read_lines(spark: SparkSession, files: Sequence[Path]) -> DataFrame:
    """The lines of files as bytes, read by Spark's text source: only for compression
    formats Python's standard library cannot read (:data:`l2m.batch.lines.SPARK_CODECS`). A line
    that is not valid UTF-8 stays a line (malformed for the parse stage)."""
    parallelism = spark.sparkContext.defaultParallelism
    # Spark's default (128 MB splits) gives a 400 MB file three tasks, one of them alone at
    # the end: the same split size as l2m's own reader instead.
    split = split_size(sum(f.stat().st_size for f in files), parallelism)
    spark.conf.set("spark.sql.files.maxPartitionBytes", str(split))
    raw = spark.read.text([str(f) for f in files]).select(F.col("value").cast("binary"))
    # gzip is not splittable: spread a few big files over all cores before parsing.
    if raw.rdd.getNumPartitions() < parallelism:
        raw = raw.repartition(parallelism)
    return raw


def _partials(routing: str, lines_of: Callable[[pa.RecordBatch], Iterable[list[bytes]]],
              tasks: int) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one task: the lines ``lines_of`` gives for each input
    batch → the task's partials, packed (:mod:`l2m.batch.packs`) for the last stage's
    ``tasks`` tasks, given the routing option (:func:`l2m.engine.pipeline.routing_option`)."""

    cut = beyond_rule_caps  # taken here, on the driver: the function the tasks run

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        task = ReadTask.from_options(routing, None)
        assert task is not None
        capped = per_rule_caps(routing_from_option(routing))
        for batch in batches:
            for lines in lines_of(batch):
                for i in range(0, len(lines), BATCH_ROWS):
                    # Backfill has no record times: a log without an event time is skipped.
                    # Routed: the task keeps its partials until finish().
                    for _ in task.add(lines[i:i + BATCH_ROWS]):
                        pass
        yield from packed_domains(within_caps(list(task.finish()), capped, cut), tasks)

    return run


def packed_domains(table: pa.Table, tasks: int) -> Iterator[pa.RecordBatch]:
    """A read task's partials packed per last-stage task: a window (an admission domain)
    goes whole to one task, consecutive minutes to consecutive tasks, the counters (window
    null, one domain) to the first."""
    if not table.num_rows:
        return
    keys = partition_keys(tasks)
    windows = table.column("window").fill_null(0).to_numpy()
    destination = (windows // MINUTE_MS) % tasks
    for task in np.unique(destination).tolist():
        rows = table.filter(pa.array(destination == task)) if tasks > 1 else table
        yield from pack(rows, keys[task])


def _text_lines(batch: pa.RecordBatch) -> Iterable[list[bytes]]:
    return [batch.column(0).to_pylist()]


def _split_lines(batch: pa.RecordBatch) -> Iterable[list[bytes]]:
    for row in batch.to_pylist():
        yield from read_split(Split(**row))


def task_partials(routing: str, tasks: int) -> Callable[[Iterator[pa.RecordBatch]],
                                                        Iterator[pa.RecordBatch]]:
    """Over lines Spark's text source read (:func:`read_lines`)."""
    return _partials(routing, _text_lines, tasks)


def split_partials(routing: str, tasks: int) -> Callable[[Iterator[pa.RecordBatch]],
                                                         Iterator[pa.RecordBatch]]:
    """Over split descriptors (:data:`SPLIT_SCHEMA`): the task reads its splits' lines
    itself, so no log passes through the JVM."""
    return _partials(routing, _split_lines, tasks)


SPLIT_SCHEMA = "path string, start bigint, end bigint, stripe int, stripes int"


def final_samples(spark: SparkSession, files: Sequence[Path], routing: Routing) -> DataFrame:
    """The samples of all the files and the run's tallies (:data:`l2m.batch.finals.FINAL_ARROW`
    rows, packed: :mod:`l2m.batch.packs`):
    the read tasks' partials shuffled so that each window — an admission domain; counters,
    window null, are one — is whole in one task, merged there
    (:func:`l2m.engine.partials.merge`: an exact sum is known only where every task's was)
    and turned into samples (:func:`l2m.batch.finals.final_rows`)."""
    option = routing_option(routing)
    ours = [f for f in files if f.suffix not in SPARK_CODECS]
    theirs = [f for f in files if f.suffix in SPARK_CODECS]
    # As many last-stage tasks as twice the cores: a few big windows (10,000 series each)
    # would otherwise run one after another.
    tasks = 2 * spark.sparkContext.defaultParallelism
    parts: list[DataFrame] = []
    if ours:
        splits = plan_splits(ours, spark.sparkContext.defaultParallelism)
        rows = [dataclasses.astuple(s) for s in splits]
        descriptors = spark.createDataFrame(
            spark.sparkContext.parallelize(rows, len(rows)), SPLIT_SCHEMA)
        parts.append(descriptors.mapInArrow(split_partials(option, tasks), PACKED_SCHEMA))
    if theirs:
        parts.append(read_lines(spark, theirs).mapInArrow(task_partials(option, tasks),
                                                          PACKED_SCHEMA))
    partials = functools.reduce(DataFrame.unionByName, parts)
    # A number of partitions, or adaptive execution coalesces a small shuffle into fewer
    # tasks than cores. Each read task's rows for a last-stage task are one pack, keyed for
    # that task's partition (l2m.batch.packs.partition_keys).
    return partials.repartition(tasks, "key").mapInArrow(final_rows(option), PACKED_SCHEMA)


def write_lines(out: BinaryIO, lines: list[bytes]) -> None:
    """Samples' JSON lines appended to the output."""
    out.write(b"\n".join(lines) + b"\n")


def run_backfill(spark: SparkSession, rules: Sequence[Rule], inputs: Sequence[str],
                 output: str | Path, timestamp_field: str = TIMESTAMP_FIELD,
                 progress: bool = True, strict: bool = False,
                 max_label_value_length: int = MAX_LABEL_VALUE_LENGTH,
                 limits: Limits | None = DEFAULT_LIMITS) -> BackfillSummary:
    """Run enabled ``rules`` over ``inputs`` and write the final samples to ``output``
    (atomically: a partial file never replaces a previous result, and is removed when the run
    fails). Corrupt ``.gz`` files are skipped and listed in the summary, or with ``strict``
    fail the run (:class:`InputError`). Label values longer than ``max_label_value_length``
    characters are cut and counted (:mod:`l2m.engine.labels`), and series past ``limits``
    counted into overflow series (:mod:`l2m.engine.admission`), as in streaming (None: no
    caps)."""
    started = time.monotonic()
    check_paths(inputs, output)
    check_label_limit(max_label_value_length)
    routing = routing_for(rules, timestamp_field, max_label_value_length, limits)
    summary = BackfillSummary.for_rules(routing.rules, max_label_value_length)
    files = input_files(inputs)
    summary.skipped_files = corrupt_compressed_files(spark, files)
    if summary.skipped_files and strict:
        path, reason = summary.skipped_files[0]
        raise InputError(f"{path}: corrupt or truncated {_format(path)} ({reason}); "
                         f"{len(summary.skipped_files)} such file(s) (without --strict they "
                         "are skipped and listed)")
    if summary.skipped_files and progress:
        for path, reason in summary.skipped_files:
            print(f"l2m backfill: skipping {path}: corrupt or truncated {_format(path)} "
                  f"({reason})",
                  file=sys.stderr, flush=True)
    bad = {path for path, _ in summary.skipped_files}
    files = [f for f in files if str(f) not in bad]
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    partial = output.with_name(output.name + ".partial")
    try:
        with JobProgress(spark.sparkContext, "backfill", enabled=progress), \
                partial.open("wb") as out:
            if files:
                samples, tallies = ordered_lines(unpack(
                    final_samples(spark, files, routing).toArrow().to_batches(), FINAL_ARROW))
                for batch in samples.to_batches(max_chunksize=BATCH_ROWS):
                    write_lines(out, batch.column("line").to_pylist())
                tally(summary, samples, tallies)
        os.replace(partial, output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    summary.seconds = time.monotonic() - started
    return summary
