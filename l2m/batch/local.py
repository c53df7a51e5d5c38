"""The rules over logs in this process, without a JVM: backfill's stages — parse, route,
pre-aggregate (the read task), the per-rule cut before the shuffle, merge by key, admit
under the caps and build the samples (:func:`l2m.batch.finals.domain_samples`), the output's
order — run one after the other, so that ``l2m test`` and ``l2m validate --estimate`` give
exactly what ``l2m backfill`` gives for the same logs and settings (held by
``tests/spark/test_differential.py``).

Spark's backfill runs one read task per split and one last-stage task per group of windows;
here there is one of each. Both decide the same: a partial aggregate merges exactly whatever
the split, every window (an admission domain) is whole in the one last stage, and a series
the read task cuts past its rule's cap is past it among all (:func:`within_caps`).

Input: the rules' :class:`~l2m.engine.routing.Routing` (or rules and settings) and lines of
logs (bytes or str, one log each). Output: a :class:`LocalRun` — the samples' JSON lines in
the output's order, each with its rule, and the run's :class:`~l2m.batch.summary.
BackfillSummary`."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from l2m.batch.finals import FINAL_ARROW, Tallies, domain_samples, ordered_lines, tally_table
from l2m.batch.lines import (
    SPARK_CODECS,
    Split,
    check_inputs_exist,
    compressed,
    input_files,
    read_split,
)
from l2m.batch.summary import BackfillSummary, tally
from l2m.defaults import BATCH_ROWS, MAX_LABEL_VALUE_LENGTH, TIMESTAMP_FIELD
from l2m.engine.admission import beyond_rule_caps
from l2m.engine.partials import PARTIAL_ARROW, merge
from l2m.engine.readtask import ReadTask
from l2m.engine.routing import Routing, plan_for
from l2m.errors import InputError
from l2m.policy.limits import Limits
from l2m.process.collector import collector_paused
from l2m.rules.model import Rule

DEFAULT_LIMITS = Limits()


def per_rule_caps(routing: Routing) -> dict[str, int]:
    """Each capped rule's per-rule cap (what :func:`~l2m.engine.admission.beyond_rule_caps`
    takes)."""
    return {rule_id: caps.rule for rule_id, caps in routing.caps.items() if caps.rule}


def within_caps(batches: list[pa.RecordBatch], capped: Mapping[str, int],
                cut: Callable[[pa.Table, Mapping[str, int]], pa.Table]) -> pa.Table:
    """A read task's partials (all of them: the ranking is over the task's series) with the
    series a rule's cap refuses for certain merged into its overflow series before they leave
    the task: a series ranked past the cap among the task's own series of its (rule, window)
    is ranked at least as far among all of them, so it is refused whatever the other tasks
    hold (:func:`~l2m.engine.admission.beyond_rule_caps`). A rule grouping by a unique id
    then sends its cap's worth of series per task through the shuffle instead of one per
    log."""
    table = pa.Table.from_batches(batches, schema=PARTIAL_ARROW)
    if not capped or table.num_rows <= min(capped.values()):
        return table
    return cut(table, capped)


@dataclass(frozen=True)
class LocalRun:
    """What the rules made of the lines: ``samples`` (``line``: a sample's JSON, ``rule``,
    ``finite``, ``sort``: its sort key; in the output's order, as ``l2m backfill`` writes
    them) and the summary."""

    samples: pa.Table
    summary: BackfillSummary

    @property
    def lines(self) -> list[bytes]:
        """The samples' JSON lines, as the backfill's output file holds them."""
        return self.samples.column("line").to_pylist()


@dataclass(frozen=True)
class RunSettings:
    """The job settings besides the query fields (applied when the rules are loaded) that
    change what the rules make of logs: the event-time field, the longest label value a log
    may give, and the series caps (None: no caps)."""

    timestamp_field: str = TIMESTAMP_FIELD
    max_label_value_length: int = MAX_LABEL_VALUE_LENGTH
    limits: Limits | None = DEFAULT_LIMITS

    def routing(self, rules: Sequence[Rule]) -> Routing:
        """The routing ``l2m backfill`` plans for ``rules`` under these settings."""
        return routing_for(rules, self.timestamp_field, self.max_label_value_length,
                           self.limits)


def routing_for(rules: Sequence[Rule], timestamp_field: str = TIMESTAMP_FIELD,
                max_label_value_length: int = MAX_LABEL_VALUE_LENGTH,
                limits: Limits | None = DEFAULT_LIMITS) -> Routing:
    """The routing ``l2m backfill`` plans for ``rules`` under these settings (None: no
    caps)."""
    return plan_for(rules, timestamp_field, max_label_value_length=max_label_value_length,
                    limits=limits)


def file_lines(inputs: Sequence[str | Path]) -> Iterator[bytes]:
    """The lines of JSON-lines files or directories (plain, ``.gz``, ``.bz2``), read as the
    backfill's tasks read them (:func:`~l2m.batch.lines.read_split`). A codec only Spark's
    text source reads is an :class:`~l2m.errors.InputError` naming ``l2m backfill``."""
    check_inputs_exist(inputs)
    for path in input_files([str(p) for p in inputs]):
        if path.suffix in SPARK_CODECS:
            raise InputError(f"{path}: {path.suffix} files are read by Spark: run l2m backfill "
                             "on it, or decompress it (plain, .gz and .bz2 are read here)")
        whole = Split(str(path)) if compressed(path) else Split(str(path), 0, path.stat().st_size)
        for lines in read_split(whole):
            yield from lines


def run_local(routing: Routing, lines: Iterable[bytes | str]) -> LocalRun:
    """Every line through the backfill's stages in this process (module docstring). A line
    is one log; a blank line is counted as blank, as in a file."""
    started = time.monotonic()
    summary = BackfillSummary.for_rules(routing.rules, routing.max_label_value_length)
    task = ReadTask(routing.plan, routing)
    chunk: list[bytes | str] = []
    for line in lines:
        chunk.append(line)
        if len(chunk) == BATCH_ROWS:
            for _ in task.add(chunk):  # routed: the task keeps its partials until finish()
                pass
            chunk = []
    if chunk:
        for _ in task.add(chunk):
            pass
    partials = within_caps(list(task.finish()), per_rule_caps(routing), beyond_rule_caps)
    tallies = Tallies()
    with collector_paused():
        rows = domain_samples(merge([partials], unique=False), routing.rules, routing.caps,
                              tallies) if partials.num_rows else None
    counted = sorted(tallies.counts.items())
    samples, tally_rows = ordered_lines(_final_table(rows, counted))
    tally(summary, samples, tally_rows)
    summary.seconds = time.monotonic() - started
    return LocalRun(samples, summary)


def _final_table(samples: pa.Table | None, counted: list[tuple[tuple[str, str], int]]
                 ) -> pa.Table:
    parts = [t for t in (samples, tally_table(counted) if counted else None) if t is not None]
    return pa.concat_tables(parts) if parts else FINAL_ARROW.empty_table()
