"""The read task: one task's records → what the task hands Spark, whatever the records' source
(the Kafka reader, the in-memory test source, backfill's file splits).

Input: batches of records — log bytes, and for streaming each record's own timestamp (the
Kafka time, the fallback event time). Output, by mode: with a :class:`~l2m.engine.routing.
Routing` the task's partials (:data:`~l2m.engine.partials.PARTIAL_ARROW`, through
:class:`~l2m.engine.pipeline.TaskPipeline`); with only a :class:`~l2m.engine.parse.ParsePlan`
the parsed, typed logs (``ParsePlan.schema()``). Records the parse stage dead-letters are
handed to ``dead_letter(index, reason)`` (the Kafka reader's dead-letter topic)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.parse import ERROR, STATUS, ParsePlan, parse_lines
from l2m.engine.pipeline import TaskPipeline, routing_from_option
from l2m.engine.routing import Routing
from l2m.engine.status import DEAD_LETTERED

DeadLetter = Callable[[int, str], None]
_DEAD_LETTERED = pa.array([int(s) for s in DEAD_LETTERED], pa.int8())


class ReadTask:
    """Parses a task's record batches and either yields them (parsed mode) or pre-aggregates
    them into the task's partials, yielded by :meth:`finish` (routed mode)."""

    def __init__(self, plan: ParsePlan, routing: Routing | None = None) -> None:
        self.plan = plan
        self.pipeline = TaskPipeline(routing) if routing is not None else None

    @staticmethod
    def from_options(routing: str | None, parse_plan: str | None) -> ReadTask | None:
        """The read task of a source's options: ``routing`` (:func:`~l2m.engine.pipeline.
        routing_option`) or ``parse_plan`` (JSON); None when neither (raw records)."""
        if routing:
            rules = routing_from_option(routing)
            return ReadTask(rules.plan, rules)
        if parse_plan:
            return ReadTask(ParsePlan.from_json(parse_plan))
        return None

    @property
    def routed(self) -> bool:
        return self.pipeline is not None

    def add(self, values: Sequence[bytes | str | None],
            timestamps: Sequence[int | None] | None = None,
            dead_letter: DeadLetter | None = None) -> Iterator[pa.RecordBatch]:
        """One batch of records. ``timestamps`` (streaming): each record's own time, the
        fallback event time and the reference for future-dated logs; without them (backfill)
        a log without a usable event time is skipped. Yields the parsed batch in parsed
        mode, nothing in routed mode."""
        now_ms = int(time.time() * 1000) if timestamps is not None else None
        batch = parse_lines(values, self.plan, fallback_ts=timestamps, now_ms=now_ms)
        if dead_letter is not None:
            # Only the dead-lettered rows are visited (few or none in a batch of 10,000).
            rows = pc.indices_nonzero(pc.is_in(batch.column(STATUS), _DEAD_LETTERED)).to_pylist()
            if rows:
                errors = batch.column(ERROR).take(rows).to_pylist()
                for i, error in zip(rows, errors, strict=True):
                    dead_letter(i, error or "malformed")
        if self.pipeline is None:
            yield batch
        else:
            self.pipeline.add(batch)

    def finish(self) -> Iterator[pa.RecordBatch]:
        """Routed mode: the task's partials, once all its records are in."""
        if self.pipeline is not None:
            yield from self.pipeline.finish()
