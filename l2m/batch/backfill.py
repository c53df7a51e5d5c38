"""`l2m backfill`: the rules over JSON-lines files as one Spark batch job (SPEC §3–5).

per task, in Python: read its split of the files (:mod:`l2m.batch.lines`) → on Arrow: parse →
route → pre-aggregate (the streaming job's read task, :mod:`l2m.engine.readtask`) → shuffle
and merge the partials by (rule, series, le, window) with the read tasks' own merge
(:func:`l2m.engine.partials.merge`) → final samples written by the driver as JSON lines,
one per gauge series-window and one per counter series. One pass over the input yields both
the samples and the run's summary (status rows, :mod:`l2m.engine.status`).

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
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from l2m.batch.lines import (
    SPARK_CODECS,
    Split,
    compressed,
    open_compressed,
    plan_splits,
    read_split,
    split_size,
)
from l2m.batch.progress import JobProgress
from l2m.defaults import (
    BATCH_ROWS,
    MAX_LABEL_VALUE_LENGTH,
    MIN_LABEL_VALUE_LENGTH,
    TIMESTAMP_FIELD,
)
from l2m.engine.admission import (
    OVERFLOW_SERIES,
    Admission,
    Limit,
    RuleCaps,
    beyond_rule_caps,
    redirected,
)
from l2m.engine.labels import CUT_RULE
from l2m.engine.partials import KEY, PARTIAL_SCHEMA, Partial, merge_batches
from l2m.engine.pipeline import OUT_ROWS, routing_from_option, routing_option
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing, plan_for
from l2m.engine.samples import is_finite_sample, rule_samples, series_labels
from l2m.engine.status import STATUS_RULE, status_label
from l2m.errors import ConfigError, InputError
from l2m.limits import Limits
from l2m.rules.model import Rule

DEFAULT_LIMITS = Limits()


@dataclass
class BackfillSummary:
    """What a backfill read and wrote."""

    logs: int = 0  # non-blank lines
    parsed: int = 0
    malformed: int = 0
    no_timestamp: int = 0
    blank_lines: int = 0
    samples: int = 0
    nonfinite: int = 0  # samples whose value left the double range (+Inf, -Inf, NaN)
    seconds: float = 0.0
    matches: dict[str, int] = field(default_factory=dict)
    series: dict[str, int] = field(default_factory=dict)
    # Label values cut to the limit, per rule (l2m.engine.labels); only rules with cuts.
    cut: dict[str, int] = field(default_factory=dict)
    # Logs counted into an overflow series, per "rule (limit)" (l2m.engine.admission).
    refused: dict[str, int] = field(default_factory=dict)
    max_label_value_length: int = MAX_LABEL_VALUE_LENGTH
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)

    def count_status(self, status: str, count: int) -> None:
        if status == "blank":
            self.blank_lines += count
            return
        self.logs += count
        if status == "ok":
            self.parsed += count
        elif status == "malformed":
            self.malformed += count
        elif status == "no_timestamp":
            self.no_timestamp += count

    def render(self) -> str:
        rate = self.logs / self.seconds if self.seconds else 0.0
        lines = [
            f"logs read:          {self.logs}",
            f"malformed lines:    {self.malformed}",
            f"without timestamp:  {self.no_timestamp} (skipped)",
            f"corrupt files:      {len(self.skipped_files)} (skipped)",
            *[f"  {path}: {reason}" for path, reason in self.skipped_files],
            f"samples written:    {self.samples}"
            + (f" ({self.nonfinite} non-finite: +Inf/-Inf/NaN)" if self.nonfinite else ""),
            f"label values cut:   {sum(self.cut.values())} (longer than "
            f"{self.max_label_value_length} characters)",
            *[f"  {rule}: {count}" for rule, count in self.cut.items()],
            f"series refused:     {sum(self.refused.values())} logs (counted into overflow "
            "series, l2m_overflow=\"true\")",
            *[f"  {rule}: {count}" for rule, count in sorted(self.refused.items())],
            f"time:               {self.seconds:.1f}s ({rate:,.0f} logs/s)",
            "matches per rule:",
        ]
        width = max((len(r) for r in self.matches), default=0)
        lines += [f"  {rule.ljust(width)}  {count:>10}  ({self.series.get(rule, 0)} samples)"
                  for rule, count in self.matches.items()]
        return "\n".join(lines)


def check_paths(inputs: Sequence[str], output: str | Path) -> None:
    """Refuse inputs that do not exist, and an output that is an input file or lies inside an
    input directory (it would be overwritten, or read by the next run)."""
    missing = [p for p in inputs if not Path(p).exists()]
    if missing:
        raise InputError("; ".join(f"{p}: no such file or directory" for p in missing))
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


def check_label_limit(limit: int) -> None:
    """Refuse a label value limit too short to keep anything of a cut value (a usage error,
    code CONFIG)."""
    if limit < MIN_LABEL_VALUE_LENGTH:
        raise ConfigError(f"the label value limit must be at least {MIN_LABEL_VALUE_LENGTH} "
                         f"characters, got {limit}")


def input_files(inputs: Sequence[str]) -> list[Path]:
    """Every file to read, in a stable order: files as given, directories recursively
    (skipping names that start with ``.`` or ``_``, as Spark does). An unreadable file or
    directory is an :class:`InputError`."""
    files: list[Path] = []
    seen: set[Path] = set()

    def add(path: Path) -> None:
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot read (permission denied)")
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            files.append(path)

    def unreadable(exc: OSError) -> None:
        raise InputError(f"{exc.filename}: cannot read directory ({exc.strerror})")

    for item in inputs:
        path = Path(item)
        if not path.is_dir():
            add(path)
            continue
        for root, dirs, names in os.walk(path, onerror=unreadable):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            for name in sorted(names):
                if not name.startswith((".", "_")):
                    add(Path(root) / name)
    return files


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


def _partials(routing: str, lines_of: Callable[[pa.RecordBatch], Iterable[list[bytes]]]
              ) -> Callable[[Iterator[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function of one task: the lines ``lines_of`` gives for each input
    batch → the task's partials (``PARTIAL_SCHEMA``), given the routing option
    (:func:`l2m.engine.pipeline.routing_option`)."""

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
        yield from _within_caps(list(task.finish()), capped, cut)

    return run


def per_rule_caps(routing: Routing) -> dict[str, int]:
    """Each capped rule's per-rule cap (what :func:`~l2m.engine.admission.beyond_rule_caps`
    takes)."""
    return {rule_id: caps.rule for rule_id, caps in routing.caps.items() if caps.rule}


def _within_caps(batches: list[pa.RecordBatch], capped: Mapping[str, int],
                 cut: Callable[[pa.Table, Mapping[str, int]], pa.Table]
                 ) -> Iterator[pa.RecordBatch]:
    """A read task's partials (all of them: the ranking is over the task's series) with the
    series a rule's cap refuses for certain merged into its overflow series before they leave
    the task: a series ranked past the cap among the task's own series of its (rule, window)
    is ranked at least as far among all of them, so it is refused whatever the other tasks
    hold (:func:`~l2m.engine.admission.beyond_rule_caps`). A rule grouping by a unique id
    then sends its cap's worth of series per task through the shuffle instead of one per
    log."""
    rows = sum(b.num_rows for b in batches)
    if not capped or rows <= min(capped.values()):
        yield from batches
        return
    yield from cut(pa.Table.from_batches(batches), capped).to_batches(max_chunksize=OUT_ROWS)


def _text_lines(batch: pa.RecordBatch) -> Iterable[list[bytes]]:
    return [batch.column(0).to_pylist()]


def _split_lines(batch: pa.RecordBatch) -> Iterable[list[bytes]]:
    for row in batch.to_pylist():
        yield from read_split(Split(**row))


def task_partials(routing: str) -> Callable[[Iterator[pa.RecordBatch]],
                                            Iterator[pa.RecordBatch]]:
    """Over lines Spark's text source read (:func:`read_lines`)."""
    return _partials(routing, _text_lines)


def split_partials(routing: str) -> Callable[[Iterator[pa.RecordBatch]],
                                             Iterator[pa.RecordBatch]]:
    """Over split descriptors (:data:`SPLIT_SCHEMA`): the task reads its splits' lines
    itself, so no log passes through the JVM."""
    return _partials(routing, _split_lines)


SPLIT_SCHEMA = "path string, start bigint, end bigint, stripe int, stripes int"


def final_aggregates(spark: SparkSession, files: Sequence[Path], routing: Routing) -> DataFrame:
    """One merged partial per (rule, series, le, window) over all the files
    (:func:`l2m.engine.partials.merge`: an exact sum is known only where every task's was)."""
    option = routing_option(routing)
    ours = [f for f in files if f.suffix not in SPARK_CODECS]
    theirs = [f for f in files if f.suffix in SPARK_CODECS]
    parts: list[DataFrame] = []
    if ours:
        splits = plan_splits(ours, spark.sparkContext.defaultParallelism)
        rows = [dataclasses.astuple(s) for s in splits]
        descriptors = spark.createDataFrame(
            spark.sparkContext.parallelize(rows, len(rows)), SPLIT_SCHEMA)
        parts.append(descriptors.mapInArrow(split_partials(option), PARTIAL_SCHEMA))
    if theirs:
        parts.append(read_lines(spark, theirs).mapInArrow(task_partials(option),
                                                          PARTIAL_SCHEMA))
    partials = functools.reduce(DataFrame.unionByName, parts)
    # The same merge as the end of every read task (l2m.engine.partials.merge), after a
    # shuffle that brings each key's partials together.
    capped = per_rule_caps(routing)
    if not capped:
        return partials.repartition(*KEY).mapInArrow(merge_batches, PARTIAL_SCHEMA)
    # Each (rule, window) whole in one task, so that the series a rule's cap refuses for
    # certain are merged into its overflow series there, not on the driver
    # (l2m.engine.admission.beyond_rule_caps).
    return partials.repartition("rule", "window").mapInArrow(
        functools.partial(merge_batches, then=functools.partial(beyond_rule_caps, caps=capped)),
        PARTIAL_SCHEMA)


def _le_order(le: str) -> float:
    return float("inf") if le == "+Inf" else float(le) if le else 0.0


def arrow_rows(frame: DataFrame) -> Iterator[dict[str, Any]]:
    """A DataFrame's rows as dicts, collected as Arrow: Spark's ``Row`` objects cost ≈ 15 µs
    each to build (25.6 s of a 41 s backfill with 1.76M merged partials, benchmarks/README.md),
    columns from Arrow a fraction of that."""
    for batch in frame.toArrow().to_batches():
        columns = batch.to_pydict()
        names = list(columns)
        for values in zip(*columns.values(), strict=True):
            yield dict(zip(names, values, strict=True))


def _count_collapsed(admission: Admission, rule_id: str,
                     rows: list[tuple[str, str, Partial]]) -> None:
    """Count the logs of the series :func:`~l2m.engine.admission.beyond_rule_caps` merged into
    the overflow series before admission: refused for the reason of the rule's own first
    refusal (after it every later series is refused alike), or its per-rule cap when its
    candidates all got in."""
    logs = [part for name, _, part in rows if name == OVERFLOW_SERIES]
    if not logs:
        return
    reasons = [limit for rule, limit in admission.refused if rule == rule_id]
    reason = reasons[0] if reasons else Limit.RULE
    for part in logs:
        admission.count(rule_id, reason, part.matches, part.ts)


def samples_from_rows(rows: Iterable[Mapping[str, Any]], rules: Sequence[Rule],
                      summary: BackfillSummary,
                      caps: Mapping[str, RuleCaps] | None = None) -> Iterator[dict[str, Any]]:
    """Merged partials → samples in output order (rules as loaded, then labels, window and
    bucket bound), counting status rows into ``summary``. With ``caps``, series past a cap
    go to their rule's overflow series as in streaming (:mod:`l2m.engine.admission`): as if
    every log came in one micro-batch — per window (counters: one domain), rules in id order,
    a rule's new series in key order."""
    by_id = {r.id: r for r in rules}
    order = {r.id: i for i, r in enumerate(rules)}
    domains: dict[int | None, dict[str, list[tuple[str, str, Partial]]]] = {}
    for row in rows:
        rule_id = row["rule"]
        if rule_id == STATUS_RULE:
            summary.count_status(status_label(row["series"]), row["matches"])
            continue
        if rule_id == CUT_RULE:
            cut_rule = status_label(row["series"])
            summary.cut[cut_rule] = summary.cut.get(cut_rule, 0) + row["matches"]
            continue
        # "" outside histograms, as the state stage reads partials (frame_partials)
        domains.setdefault(row["window"], {}).setdefault(rule_id, []).append(
            (row["series"], row["le"] or "", Partial.from_row(row)))
    families: dict[tuple[str, tuple[tuple[str, str], ...], int | None],
                   dict[str, Partial]] = {}
    for window, by_rule in domains.items():
        admission = Admission(caps, {}) if caps else None
        for rule_id in sorted(by_rule):
            rows_of = by_rule[rule_id]
            for name, le, part in redirected(rows_of, {}, admission, rule_id):
                labels = tuple(series_labels(by_id[rule_id], name))
                parts_of = families.setdefault((rule_id, labels, window), {})
                parts_of[le] = part.merge(parts_of[le]) if le in parts_of else part
            if admission is not None:
                _count_collapsed(admission, rule_id, rows_of)
        for (rule_id, limit), (logs, _ts) in (admission.refused if admission else {}).items():
            key = f"{rule_id} ({limit})"
            summary.refused[key] = summary.refused.get(key, 0) + logs
    for (rule_id, labels, window), parts in sorted(
            families.items(), key=lambda kv: (order[kv[0][0]], kv[0][1], kv[0][2] or 0)):
        rule = by_id[rule_id]
        parts = dict(sorted(parts.items(), key=lambda kv: _le_order(kv[0])))
        summary.matches[rule.id] += sum(p.matches for p in parts.values())
        produced = rule_samples(rule, labels, window, parts)
        summary.series[rule.id] += len(produced)
        yield from produced


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
    routing = plan_for(rules, timestamp_field, max_label_value_length=max_label_value_length,
                       limits=limits)
    summary = BackfillSummary(matches={r.id: 0 for r in routing.rules},
                              series={r.id: 0 for r in routing.rules},
                              max_label_value_length=max_label_value_length)
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
                frame = final_aggregates(spark, files, routing)
                rows = arrow_rows(frame)
                for sample in samples_from_rows(rows, routing.rules, summary, routing.caps):
                    out.write(orjson.dumps(sample) + b"\n")
                    summary.samples += 1
                    summary.nonfinite += not is_finite_sample(sample)
        os.replace(partial, output)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    summary.seconds = time.monotonic() - started
    return summary
