"""Fan-out stage on Arrow: one parsed batch → one match row per (log, matching rule), plus
one status row per log — the rows :mod:`l2m.engine.preaggregate` reduces, in the read task itself.

Input: a batch with ``ParsePlan.schema()`` (:func:`l2m.engine.parse.parse_lines`) and the compiled
rules (:class:`l2m.engine.routing.Routing`). Output: a table with :data:`MATCH_SCHEMA` — ``rule``,
``series`` (the group-by values, each ``<length>:<value>``, ``-`` when absent or empty: an
empty value is no label), ``le`` (a classic histogram's bound, a native bucket's key —
:mod:`l2m.engine.nativebuckets`; a rule asking for both has a row in each —; a status row's
one-minute window), ``window`` (gauges: the one-minute
window start), ``ts`` (event time of logs that count), ``v`` (the value; null when the log
has none: it counts as a match only). Group-by values longer than the routing's
``max_label_value_length`` are cut (:mod:`l2m.engine.labels`); each cut label value adds a cut
row (rule ``__cut__``, series: the rule's id encoded as a one-value series, ``v`` 1), given
with the status rows. The read task takes them dictionary-encoded
(:data:`CODED_MATCH_SCHEMA`, ``fan_out(..., coded=True)``): a shape's series are codes into
its group-by fields' distinct keys, so no string is built per match row.

Rules see only what can match them: the routed logs of accounts with scoped rules are sorted
by account once, and a rule scoped to an account takes its query's matches only from that
account's slice — with a thousand accounts, a log meets its own account's rules, not all of
them. Every query node is evaluated once per batch however many rules share it
(:class:`l2m.engine.match.Matcher`); each distinct scoped query's matching rows are listed
once, and every (account, rule)'s share is found by binary search in that list, for all
pairs at once (:meth:`_Scoped.account_rows`, on :attr:`l2m.engine.routing.Routing.scoped`'s
arrays) — a numpy call per pair made 10,000 accounts of 10 rules cost 0.3–0.5 s per 40,000
logs. Rules of one shape (kind, aggregation, value field, buckets, group-by) get their rows
together. """

from __future__ import annotations

import functools
from typing import cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.labels import CUT_RULE, encoded_codes, one_value_series_column
from l2m.engine.match import Matcher
from l2m.engine.nativebuckets import bucket_key_codes
from l2m.engine.parse import STATUS, TIMESTAMP, Form, ParsePlan
from l2m.engine.routing import Routing, Shape, shape_of
from l2m.engine.status import ROUTED, STATUS_NAMES, STATUS_RULE, status_series
from l2m.query.nodes import Node
from l2m.rules.model import Aggregation, Kind, Rule
from l2m.semantics.windows import MINUTE_MS

MATCH_SCHEMA = pa.schema([
    pa.field("rule", pa.string()),
    pa.field("series", pa.string()),
    pa.field("le", pa.string()),
    pa.field("window", pa.int64()),
    pa.field("ts", pa.int64()),
    pa.field("v", pa.float64()),
])
# The same rows as the read task builds them: rule, series and le dictionary-encoded, each
# part with its own dictionary — a shape's series are its group-by fields' distinct keys taken
# by code, not a string per match row — so that the pre-aggregation
# (:func:`l2m.engine.preaggregate.preaggregate`) groups integers, not strings, per row.
_CODED = pa.dictionary(pa.int32(), pa.string())
CODED_MATCH_SCHEMA = pa.schema([
    pa.field("rule", _CODED),
    pa.field("series", _CODED),
    pa.field("le", _CODED),
    pa.field("window", pa.int64()),
    pa.field("ts", pa.int64()),
    pa.field("v", pa.float64()),
])


def _coded(indices: pa.Array | np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(indices, pa.int32()), dictionary)


def _one(value: str, n: int) -> pa.DictionaryArray:
    """``value`` in each of ``n`` rows."""
    return _coded(np.zeros(n, np.int32), pa.array([value], pa.string()))


def _none(n: int) -> pa.DictionaryArray:
    return _coded(pa.nulls(n, pa.int32()), pa.array([], pa.string()))


@functools.cache
def _status_series() -> pa.Array:
    """A status row's series: its status name, encoded as a one-value series. Built on first
    use: a process's first ``pa.array`` imports pandas (0.25 s), which the source's planner
    process, importing this module on every query start, never needs."""
    return pa.array([status_series(n) for n in STATUS_NAMES], pa.string())


class FanOut:
    """Match rows of one batch; series encodings and masks shared between rules."""

    def __init__(self, batch: pa.RecordBatch | pa.Table, routing: Routing) -> None:
        self.batch = batch
        self.plan: ParsePlan = routing.plan
        self.routing = routing
        self.matcher = Matcher(batch, routing.plan)
        self._codes: dict[tuple[str, ...], tuple[pa.Array, pa.Array]] = {}
        # Per group-by field: each row's code into its encoded series parts, the parts ("-"
        # for absent and empty values) and which rows were cut (None: none).
        self._fields: dict[str, tuple[np.ndarray, pa.Array, np.ndarray | None]] = {}
        # Per group-by fields: how many of each row's values were cut (None: none was).
        self._cuts: dict[tuple[str, ...], np.ndarray | None] = {}
        self._cut_parts: list[pa.Table] = []
        self._numpy: dict[object, np.ndarray] = {}
        status = batch.column(STATUS)
        self._routed = _plain(pc.is_in(status, pa.array(ROUTED, status.type)))
        self.ts = _plain(batch.column(TIMESTAMP))

    def table(self, with_status: bool = True) -> pa.Table:
        """Every rule's match rows, then (``with_status``) the status rows."""
        matches: list[tuple[Rule, np.ndarray]] = []
        if self.routing.unscoped:
            routed = self._mask_np(None)
            for rule in self.routing.unscoped:
                assert rule.compiled is not None
                hit = np.logical_and(routed, self._mask_np(rule.compiled.root))
                matches.append((rule, np.flatnonzero(hit)))
        parts = self.rows(matches)
        scoped = self.scoped()
        if scoped is not None:
            parts += scoped.account_rows()
        if with_status:
            parts.append(self.status_rows())
            parts += self._cut_parts
            if scoped is not None:
                parts += scoped._cut_parts
        parts = [p for p in parts if p.num_rows]
        if not parts:
            return CODED_MATCH_SCHEMA.empty_table()
        return pa.concat_tables(parts)

    def scoped(self) -> _Scoped | None:
        """The routed logs of accounts that have rules, sorted by account, with each
        account's slice; None when no log here can reach a scoped rule."""
        by_account = self.routing.by_account
        if not by_account or not self.batch.num_rows:
            return None
        account = self.plan.column("account", Form.STRING)
        encoded = pc.dictionary_encode(_plain(self.batch.column(account)))
        names = encoded.dictionary.to_pylist()
        wanted = np.array([i for i, name in enumerate(names) if name in by_account], np.int64)
        if not len(wanted):
            return None
        codes = pc.if_else(self._routed, pc.fill_null(encoded.indices, -1), -1)
        codes = np.asarray(codes.to_numpy(zero_copy_only=False), np.int64)
        rows = np.flatnonzero(np.isin(codes, wanted))
        rows = rows[np.argsort(codes[rows], kind="stable")]
        sorted_codes = codes[rows]
        starts = np.searchsorted(sorted_codes, wanted, side="left")
        ends = np.searchsorted(sorted_codes, wanted, side="right")
        slices = [(names[code], lo, hi) for code, lo, hi in
                  zip(wanted.tolist(), starts.tolist(), ends.tolist(), strict=True) if hi > lo]
        return _Scoped(self.batch.take(pa.array(rows, pa.int64())), self.routing, slices)

    def _mask_np(self, node: object) -> np.ndarray:
        """A node's mask (None: the routed logs) as a numpy array, converted once."""
        found = self._numpy.get(node)
        if found is None:
            mask = self._routed if node is None else self.matcher.mask(cast(Node, node))
            found = self._numpy[node] = np.asarray(mask.to_numpy(zero_copy_only=False), bool)
        return found

    def rows(self, matches: list[tuple[Rule, np.ndarray]]) -> list[pa.Table]:
        """Match rows of rules given the rows of this batch each matched: one table per
        rule shape, built with one ``take`` per column."""
        shapes: dict[Shape, list[tuple[Rule, np.ndarray]]] = {}
        for rule, hit in matches:
            if len(hit):
                shapes.setdefault(shape_of(rule), []).append((rule, hit))
        return [self._shape_rows(group) for group in shapes.values()]

    def _shape_rows(self, group: list[tuple[Rule, np.ndarray]]) -> pa.Table:
        counts = np.fromiter((len(hit) for _rule, hit in group), np.int64, len(group))
        return self._rows_of(group[0][0], [r.id for r, _hit in group],
                             np.concatenate([hit for _rule, hit in group]), counts)

    def _rows_of(self, rule: Rule, ids: list[str], hits: np.ndarray,
                 counts: np.ndarray) -> pa.Table:
        """The match rows of rules of ``rule``'s shape: rule ``ids[i]`` matched the next
        ``counts[i]`` rows of ``hits``."""
        rows = pa.array(hits, pa.int64())
        n = len(rows)
        rule_ids = _coded(np.repeat(np.arange(len(ids), dtype=np.int32), counts),
                          pa.array(ids, pa.string()))
        ts = self.ts.take(rows)
        if rule.aggregation == Aggregation.COUNT:
            v: pa.Array = pa.repeat(pa.scalar(1.0), n)
        else:
            assert rule.field is not None
            v = _plain(self.batch.column(self.plan.column(rule.field, Form.NUMBER))).take(rows)
        les: list[pa.Array] = [_none(n)]
        if rule.bucketed:
            les = []
            if rule.classic:
                les.append(value_buckets(rule, v))
            if rule.native_schema is not None:  # with classic buckets too: a row in each
                les.append(native_bucket_keys(rule.native_schema, v))
        window: pa.Array = pa.nulls(n, pa.int64())
        if rule.kind == Kind.GAUGE:
            window = _minute(ts)
        fields = tuple(f for _label, f in rule.group_labels)
        codes, keys = self._series_codes(fields)
        cuts = self._cuts[fields]
        if cuts is not None:
            self._cut_rows(cuts[np.asarray(rows)], rule_ids, ts)
        series = _coded(codes.take(rows), keys)
        # Event time only of logs that count into the series: the sample's timestamp.
        counted = pc.if_else(pc.is_valid(v), ts, pa.scalar(None, pa.int64()))
        return pa.concat_tables([pa.table({
            "rule": rule_ids, "series": series, "le": le, "window": window, "ts": counted,
            "v": v}, schema=CODED_MATCH_SCHEMA) for le in les])

    def _series_codes(self, fields: tuple[str, ...]) -> tuple[pa.Array, pa.Array]:
        """Each log's series key for these fields as a code into the distinct keys (both
        once per batch): a shape's rows take codes. The fields' codes are combined as
        integers, and a key is built only for each distinct combination."""
        found = self._codes.get(fields)
        if found is None:
            n = self.batch.num_rows
            cuts: np.ndarray | None = None
            if not fields:
                found = (pa.array(np.zeros(n, np.int32)), pa.array([""], pa.string()))
            else:
                parts = [self._field(f) for f in fields]
                if len(parts) == 1:  # one field: its own codes and keys
                    codes, keys, cut = parts[0]
                    found = (pa.array(codes, pa.int32()), keys)
                    cuts = None if cut is None else cut.astype(np.int64)
                else:
                    found = _combined(parts)
                    for _codes, _keys, cut in parts:
                        if cut is not None:
                            cuts = cut.astype(np.int64) if cuts is None else cuts + cut
            self._codes[fields] = found
            self._cuts[fields] = cuts
        return found

    def series(self, fields: tuple[str, ...]) -> pa.Array:
        """The series key of every log for these group-by fields (all rows; rules take theirs):
        each value as ``<length>:<value>``, ``-`` when absent or empty, cut past the routing's
        ``max_label_value_length`` (:mod:`l2m.engine.labels`)."""
        codes, keys = self._series_codes(fields)
        return keys.take(codes)

    def _field(self, name: str) -> tuple[np.ndarray, pa.Array, np.ndarray | None]:
        found = self._fields.get(name)
        if found is None:
            column = _plain(self.batch.column(self.plan.column(name, Form.STRING)))
            found = self._fields[name] = encoded_codes(column,
                                                       self.routing.max_label_value_length)
        return found

    def _cut_rows(self, cuts: np.ndarray, rule_ids: pa.DictionaryArray, ts: pa.Array) -> None:
        """One cut row per cut label value of these match rows (``cuts``: how many of each
        row's values were cut): rule ``__cut__``, the matching rule's id as the series, the
        log's event time."""
        if not cuts.any():
            return
        index = pa.array(np.repeat(np.arange(len(cuts)), cuts), pa.int64())
        n = len(index)
        self._cut_parts.append(pa.table({
            "rule": _one(CUT_RULE, n),
            "series": _coded(rule_ids.indices.take(index),
                             one_value_series_column(rule_ids.dictionary)),
            "le": _none(n),
            "window": pa.nulls(n, pa.int64()),
            "ts": ts.take(index),
            "v": pa.repeat(pa.scalar(1.0), n),
        }, schema=CODED_MATCH_SCHEMA))

    def status_rows(self) -> pa.Table:
        """One row per log: its input status as the series, its one-minute window in ``le``
        when routed (the late-log count, :mod:`l2m.state.counters`), its event time."""
        status = _plain(self.batch.column(STATUS))
        n = len(status)
        minute = pc.if_else(self._routed, pc.cast(_minute(self.ts), pa.string()),
                            pa.scalar(None, pa.string()))
        return pa.table({
            "rule": _one(STATUS_RULE, n),
            "series": _coded(pc.cast(status, pa.int32()), _status_series()),
            "le": pc.dictionary_encode(minute),
            "window": pa.nulls(n, pa.int64()),
            "ts": self.ts,
            "v": pa.repeat(pa.scalar(1.0), n),
        }, schema=CODED_MATCH_SCHEMA)


class _Scoped(FanOut):
    """The routed logs of accounts with scoped rules, sorted by account: every query node is
    evaluated once over all of them (the same ``level:error`` of a thousand tenants), and a
    rule reads only its account's slice of the mask."""

    def __init__(self, batch: pa.Table | pa.RecordBatch, routing: Routing,
                 slices: list[tuple[str, int, int]]) -> None:
        super().__init__(batch, routing)
        self.slices = slices

    def account_matches(self) -> list[tuple[Rule, np.ndarray]]:
        """Per (account, rule) with matches, in slice and rule order: the rows it matched.
        What :meth:`account_rows` computes with arrays; kept as its reference (tests)."""
        matches = []
        for account, lo, hi in self.slices:
            for rule in self.routing.by_account[account]:
                assert rule.compiled is not None
                hit = np.flatnonzero(self._mask_np(rule.compiled.root)[lo:hi])
                if len(hit):
                    matches.append((rule, hit + lo))
        return matches

    def account_rows(self) -> list[pa.Table]:
        """``self.rows(self.account_matches())``, the same rows in the same order, without a
        numpy call per (account, rule): each distinct query's matching rows are found once
        and every rule's share of them cut out by binary search over its account's slice."""
        index = self.routing.scoped
        if not self.slices:
            return []
        spans = np.array([index.span[account] for account, _lo, _hi in self.slices], np.int64)
        bounds = np.array([(lo, hi) for _account, lo, hi in self.slices], np.int64)
        per_slice = spans[:, 1] - spans[:, 0]
        rule = _ranges(spans[:, 0], per_slice)  # every (account, rule) pair, in order
        lo = np.repeat(bounds[:, 0], per_slice)
        hi = np.repeat(bounds[:, 1], per_slice)
        node = index.node[rule]
        start = np.empty(len(rule), np.int64)
        count = np.empty(len(rule), np.int64)
        found, offset = [], 0
        for pairs in _groups(node):
            mask = self._mask_np(index.nodes[node[pairs[0]]])
            if len(pairs) == 1:  # a query of one rule (a tenant's own): its slice alone
                at_lo, at_hi = int(lo[pairs[0]]), int(hi[pairs[0]])
                hits = np.flatnonzero(mask[at_lo:at_hi]) + at_lo
                start[pairs], count[pairs] = offset, len(hits)
            else:
                # Matches among its own accounts' logs only: a query of many tenants must
                # not cost the logs of accounts without it (memory and time).
                first_lo, at = np.unique(lo[pairs], return_index=True)
                rows = _ranges(first_lo, hi[pairs][at] - first_lo)
                hits = rows[mask[rows]]
                first = np.searchsorted(hits, lo[pairs], side="left")
                count[pairs] = np.searchsorted(hits, hi[pairs], side="left") - first
                start[pairs] = first + offset
            found.append(hits)
            offset += len(hits)
        keep = np.flatnonzero(count > 0)
        if not len(keep):
            return []
        hits = np.concatenate(found)
        rule, start, count = rule[keep], start[keep], count[keep]
        tables = []
        for pairs in _groups(index.shape[rule]):
            rules = rule[pairs]
            counts = count[pairs]
            tables.append(self._rows_of(index.rules[rules[0]],
                                        [index.ids[r] for r in rules.tolist()],
                                        hits[_ranges(start[pairs], counts)], counts))
        return tables


def fan_out(batch: pa.RecordBatch | pa.Table, routing: Routing,
            with_status: bool = True, coded: bool = False) -> pa.Table:
    """Match rows (and status rows) of one parsed batch; see the module docstring. ``coded``:
    as the read task takes them (:data:`CODED_MATCH_SCHEMA`), else plain strings
    (:data:`MATCH_SCHEMA`)."""
    table = FanOut(batch, routing).table(with_status)
    return table if coded else table.cast(MATCH_SCHEMA)


def _combined(parts: list[tuple[np.ndarray, pa.Array, np.ndarray | None]]
              ) -> tuple[pa.Array, pa.Array]:
    """Several fields' codes (each row's code into its field's keys) → one code per row into
    the distinct combinations' series keys, each key built once."""
    combined, span = parts[0][0], len(parts[0][1])
    for codes, keys, _cut in parts[1:]:
        if span * len(keys) >= 2**62:  # renumbered densely first: the radix cannot overflow
            dense = pc.dictionary_encode(pa.array(combined))
            combined, span = np.asarray(dense.indices, np.int64), len(dense.dictionary)
        combined = combined * len(keys) + codes
        span *= len(keys)
    dense = pc.dictionary_encode(pa.array(combined))
    first = np.empty(len(dense.dictionary), np.int64)
    first[np.asarray(dense.indices, np.int64)] = np.arange(len(combined))  # a row of each
    keys_of = [keys.take(pa.array(codes[first])) for codes, keys, _cut in parts]
    return dense.indices, pc.binary_join_element_wise(*keys_of, "")


def _groups(values: np.ndarray) -> list[np.ndarray]:
    """The positions of each distinct value, ascending, the groups in order of their first
    position: one sort, not a scan per value."""
    order = np.argsort(values, kind="stable")
    groups = np.split(order, np.flatnonzero(np.diff(values[order])) + 1)
    return sorted((g for g in groups if len(g)), key=lambda g: int(g[0]))


def _ranges(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """``starts[i], starts[i] + 1, …`` (``counts[i]`` of them) for every ``i``, concatenated."""
    total = int(counts.sum())
    if not total:
        return np.zeros(0, np.int64)
    ends = np.cumsum(counts)
    return np.arange(total, dtype=np.int64) + np.repeat(starts - (ends - counts), counts)


def _plain(column: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(column, pa.ChunkedArray):
        return column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    return column


def _minute(ts: pa.Array) -> pa.Array:
    """Start of the one-minute window holding each event time (ms), floored (also before
    1970); null stays null."""
    valid = pc.is_valid(ts).to_numpy(zero_copy_only=False)
    values = pc.fill_null(ts, 0).to_numpy(zero_copy_only=False)
    return pa.array(values // MINUTE_MS * MINUTE_MS, pa.int64(), mask=~valid)


def native_bucket_keys(schema: int, v: pa.Array) -> pa.Array:
    """Each value's native bucket key at ``schema`` (:mod:`l2m.engine.nativebuckets`); a
    row without a value gets the key of no bucket, and counts as a match only."""
    codes, keys = bucket_key_codes(v.to_numpy(zero_copy_only=False), schema)
    return _coded(codes, pa.array(keys, pa.string()))


def value_buckets(rule: Rule, v: pa.Array) -> pa.Array:
    """Each value's bucket: the label of the first bound ≥ it, ``+Inf`` above them all or
    without a value."""
    labels = pa.array([*rule.bucket_labels, "+Inf"], pa.string())
    values = v.to_numpy(zero_copy_only=False)
    index = np.searchsorted(np.asarray(rule.buckets, np.float64), values, side="left")
    index[np.isnan(values)] = len(rule.buckets)  # null (NaN here) → +Inf
    return _coded(index.astype(np.int32), labels)
