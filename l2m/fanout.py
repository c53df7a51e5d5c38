"""Fan-out stage on Arrow: one parsed batch → one match row per (log, matching rule), plus
one status row per log — the rows :mod:`l2m.preaggregate` reduces, in the read task itself.

Input: a batch with ``ParsePlan.schema()`` (:func:`l2m.parse.parse_lines`) and the compiled
rules (:class:`l2m.route.Routing`). Output: a table with :data:`MATCH_SCHEMA` — ``rule``,
``series`` (the group-by values, length-prefixed as :func:`l2m.route.series_column` writes
them), ``le`` (a histogram's bucket; a status row's one-minute window), ``window`` (gauges:
the one-minute window start), ``ts`` (event time of logs that count), ``v`` — the same rows
the Spark route stage (:func:`l2m.route.route` with ``series``) produces, without leaving
Python.

Rules see only what can match them: a rule scoped to an account evaluates its query only on
that account's logs (one mask per account, shared by its rules), and every query node is
evaluated once per batch however many rules share it (:class:`l2m.match.Matcher`).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.match import Matcher
from l2m.parse import ROUTED, STATUS, STATUS_NAMES, TIMESTAMP, ParsePlan
from l2m.query import KeywordEquals
from l2m.route import STATUS_RULE, Routing
from l2m.rules import Rule

MATCH_SCHEMA = pa.schema([
    pa.field("rule", pa.string()),
    pa.field("series", pa.string()),
    pa.field("le", pa.string()),
    pa.field("window", pa.int64()),
    pa.field("ts", pa.int64()),
    pa.field("v", pa.float64()),
])
MINUTE = 60_000
# A status row's series: its status name, encoded as a one-value series.
_STATUS_SERIES = pa.array([f"{len(n)}:{n}" for n in STATUS_NAMES], pa.string())


class FanOut:
    """Match rows of one batch; series encodings and masks shared between rules."""

    def __init__(self, batch: pa.RecordBatch | pa.Table, routing: Routing) -> None:
        self.batch = batch
        self.plan: ParsePlan = routing.plan
        self.routing = routing
        self.matcher = Matcher(batch, routing.plan)
        self._series: dict[tuple[str, ...], pa.Array] = {}
        status = batch.column(STATUS)
        self._routed = _plain(pc.is_in(status, pa.array(ROUTED, status.type)))
        self.ts = _plain(batch.column(TIMESTAMP))

    def table(self, with_status: bool = True) -> pa.Table:
        """Every rule's match rows, then (``with_status``) the status rows."""
        parts = [self.rule_rows(rule) for rule in self.routing.rules]
        if with_status:
            parts.append(self.status_rows())
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return MATCH_SCHEMA.empty_table()
        return pa.concat_tables(parts)

    def condition(self, rule: Rule) -> pa.BooleanArray:
        """Routed logs that match the rule's query and account scope."""
        assert rule.compiled is not None
        masks = [self._routed, self.matcher.mask(rule.compiled.root)]
        if rule.account is not None:
            masks.append(self.matcher.mask(KeywordEquals("account", rule.account)))
        out = masks[0]
        for mask in masks[1:]:
            out = pc.and_(out, mask)
        return out

    def rule_rows(self, rule: Rule) -> pa.Table:
        """One row per log the rule matches."""
        rows = pc.indices_nonzero(self.condition(rule))
        n = len(rows)
        if not n:
            return MATCH_SCHEMA.empty_table()
        ts = self.ts.take(rows)
        if rule.aggregation == "count":
            v: pa.Array = pa.repeat(pa.scalar(1.0), n)
        else:
            assert rule.field is not None
            v = _plain(self.batch.column(self.plan.column(rule.field, "n"))).take(rows)
        le: pa.Array = pa.nulls(n, pa.string())
        if rule.aggregation == "histogram":
            le = _buckets(rule, v)
        window: pa.Array = pa.nulls(n, pa.int64())
        if rule.kind == "gauge":
            window = _minute(ts)
        return pa.table({
            "rule": pa.repeat(pa.scalar(rule.id), n),
            "series": self.series(tuple(f for _label, f in rule.group_labels)).take(rows),
            "le": le,
            "window": window,
            # Event time only of logs that count into the series: the sample's timestamp.
            "ts": pc.if_else(pc.is_valid(v), ts, pa.scalar(None, pa.int64())),
            "v": v,
        }, schema=MATCH_SCHEMA)

    def series(self, fields: tuple[str, ...]) -> pa.Array:
        """The series key of every log for these group-by fields (all rows; rules take theirs):
        each value as ``<length>:<value>``, ``-`` when absent."""
        found = self._series.get(fields)
        if found is None:
            if not fields:
                found = pa.repeat(pa.scalar(""), self.batch.num_rows)
            else:
                parts = [_encoded(_plain(self.batch.column(self.plan.column(f, "s"))))
                         for f in fields]
                found = parts[0] if len(parts) == 1 else pc.binary_join_element_wise(*parts, "")
            self._series[fields] = found
        return found

    def status_rows(self) -> pa.Table:
        """One row per log: its input status as the series, its one-minute window in ``le``
        when routed (the late-log count, :mod:`l2m.counters`), its event time."""
        status = _plain(self.batch.column(STATUS))
        n = len(status)
        minute = pc.if_else(self._routed, pc.cast(_minute(self.ts), pa.string()),
                            pa.scalar(None, pa.string()))
        return pa.table({
            "rule": pa.repeat(pa.scalar(STATUS_RULE), n),
            "series": _STATUS_SERIES.take(pc.cast(status, pa.int32())),
            "le": minute,
            "window": pa.nulls(n, pa.int64()),
            "ts": self.ts,
            "v": pa.repeat(pa.scalar(1.0), n),
        }, schema=MATCH_SCHEMA)


def fan_out(batch: pa.RecordBatch | pa.Table, routing: Routing,
            with_status: bool = True) -> pa.Table:
    """Match rows (and status rows) of one parsed batch; see the module docstring."""
    return FanOut(batch, routing).table(with_status)


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _encoded(values: pa.Array) -> pa.Array:
    """``<length in characters>:<value>``, ``-`` for null: unambiguous whatever the values."""
    length = pc.cast(pc.utf8_length(values), pa.string())
    return pc.fill_null(pc.binary_join_element_wise(length, values, ":"), "-")


def _minute(ts: pa.Array) -> pa.Array:
    """Start of the one-minute window holding each event time (ms), floored (also before
    1970); null stays null."""
    valid = pc.is_valid(ts).to_numpy(zero_copy_only=False)
    values = pc.fill_null(ts, 0).to_numpy(zero_copy_only=False)
    return pa.array(values // MINUTE * MINUTE, pa.int64(), mask=~valid)


def _buckets(rule: Rule, v: pa.Array) -> pa.Array:
    """Each value's bucket: the label of the first bound ≥ it, ``+Inf`` above them all or
    without a value."""
    labels = pa.array([*rule.bucket_labels, "+Inf"], pa.string())
    values = v.to_numpy(zero_copy_only=False)
    index = np.searchsorted(np.asarray(rule.buckets, np.float64), values, side="left")
    index[np.isnan(values)] = len(rule.buckets)  # null (NaN here) → +Inf
    return labels.take(pa.array(index, pa.int32()))
