"""The partial aggregate, defined once: what a read task's pre-aggregation produces per
(rule, series, le, window), what backfill merges over all tasks, and what the streaming state
keeps per series.

* **Columns** (:data:`l2m.engine.columns.COLUMNS`): one list, from which the Spark DDL
  (:data:`PARTIAL_SCHEMA`), the Arrow schema (:data:`PARTIAL_ARROW`) and the key
  (:data:`KEY`) are derived.
* **Merge** of many partials on Arrow (:func:`merge`): the end of every read task, and
  backfill's final merge after the shuffle — one implementation for streaming and backfill.
* **One partial in Python** (:class:`Partial`): merge, the sum a sample shows, and the stored
  form the state keeps (:meth:`Partial.dump`, :meth:`Partial.load`).
* **Readers** of partial rows: a pandas frame (the state stage, :func:`frame_partials`) and a
  Arrow table (backfill, :func:`partial_rows`), both through :func:`_read`.

Meaning of the columns: ``matches`` — match rows (logs) the partial stands for; ``n`` —
values counted (logs whose value field is numeric); ``sum`` — their double sum;
``exact_sum`` — their exact decimal sum, known only when ``exact_n`` equals ``n`` (every
value fit ``decimal(38,18)``, |x| < 1e20); ``min``, ``max``; ``ts`` — the largest event time.
Counters carry no window (null); gauges their one-minute window start; histograms a bucket
bound in ``le`` (non-cumulative), others ``""`` or null.

Input: none (types and functions). Output: used by :mod:`l2m.engine.preaggregate`,
:mod:`l2m.engine.pipeline`, :mod:`l2m.engine.samples`, the Kafka and memory sources (the
schema), :mod:`l2m.batch.backfill` and :mod:`l2m.state`."""

from __future__ import annotations

import decimal
import functools
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

# KEY and PARTIAL_SCHEMA re-exported: the engine's users read them here.
from l2m.engine.columns import COLUMNS
from l2m.engine.columns import KEY as KEY
from l2m.engine.columns import PARTIAL_SCHEMA as PARTIAL_SCHEMA

EXACT = pa.decimal128(38, 18)  # what Spark's decimal(38,18) holds: |x| < 1e20
WIDE = pa.decimal256(76, 18)  # sums of exact values: adding never rounds

# The Arrow type of each Spark type of the columns (l2m.engine.columns).
ARROW_TYPES = {"string": pa.string(), "bigint": pa.int64(), "double": pa.float64(),
               "decimal(38,18)": EXACT}
PARTIAL_ARROW = pa.schema([pa.field(name, ARROW_TYPES[spark]) for name, spark in COLUMNS])

EXACT_LIMIT = 1e20
# Exact sums in Python: wide enough that adding never rounds; past ±1e20 a sum falls back to
# doubles, as on Arrow.
_CONTEXT = decimal.Context(prec=80)
_DECIMAL_LIMIT = Decimal(10) ** 20


@functools.cache
def _wide_limit() -> pa.Scalar:
    # Built on first use, not at import: a process's first pa.array/pa.scalar imports pandas
    # (0.25 s), which the source's planner process, importing this module on every query
    # start, never needs.
    return pa.scalar(_DECIMAL_LIMIT, WIDE)


# --- many partials, on Arrow ----------------------------------------------------------------


def merge(parts: Iterable[pa.Table], *, unique: bool = True) -> pa.Table:
    """Partials → one partial per key. A part whose exact sum is unknown makes the merged one
    unknown (its ``exact_n`` does not count). ``unique``: each part already holds one row
    per key (a task's pre-aggregated chunks), so a single part is returned as it is; backfill's
    shuffled partitions are not."""
    tables = [p for p in parts if p.num_rows]
    if not tables:
        return PARTIAL_ARROW.empty_table()
    if len(tables) == 1 and unique:
        return tables[0]
    table = pa.concat_tables([t.cast(PARTIAL_ARROW) for t in tables])
    exact = table.column("exact_sum")
    table = table.set_column(table.schema.get_field_index("exact_sum"), "exact_sum",
                             pc.cast(exact, WIDE))
    table = table.set_column(table.schema.get_field_index("exact_n"), "exact_n",
                             pc.if_else(pc.is_valid(exact), table.column("exact_n"), 0))
    grouped = table.group_by(KEY, use_threads=False).aggregate([
        ("matches", "sum"), ("n", "sum"), ("sum", "sum"), ("exact_sum", "sum"),
        ("exact_n", "sum"), ("min", "min"), ("max", "max"), ("ts", "max"),
    ])
    return table_of(grouped, "matches_sum", "n_sum", "sum_sum", "exact_sum_sum",
                    "exact_n_sum", "min_min", "max_max", "ts_max")


def table_of(grouped: pa.Table, matches: str, n: str, total: str, exact: str, exact_n: str,
             low: str, high: str, ts: str) -> pa.Table:
    """Partials from the columns of an Arrow ``group_by`` over :data:`KEY` (named by the
    aggregate each column came from); an exact sum of 1e20 or more becomes unknown."""
    wide = grouped.column(exact)
    fits = pc.fill_null(pc.less(pc.abs(wide), _wide_limit()), False)
    return pa.table({
        "rule": grouped.column("rule"), "series": grouped.column("series"),
        "le": grouped.column("le"), "window": grouped.column("window"),
        "matches": grouped.column(matches), "n": grouped.column(n),
        "sum": pc.fill_null(grouped.column(total), 0.0),
        "exact_sum": pc.cast(pc.if_else(fits, wide, pa.scalar(None, WIDE)), EXACT),
        "exact_n": pc.if_else(fits, grouped.column(exact_n), 0),
        "min": grouped.column(low), "max": grouped.column(high), "ts": grouped.column(ts),
    }, schema=PARTIAL_ARROW)


# --- one partial, in Python -------------------------------------------------------------------


def dump_float(value: float | None) -> float | str | None:
    """A float as stored (and as a sample shows a non-finite value): finite as itself, else
    ``"+Inf"``, ``"-Inf"`` or ``"NaN"`` (orjson would write them as null)."""
    if value is None or math.isfinite(value):
        return value
    return nonfinite_text(value)


# The text form of the non-finite numbers, as Prometheus writes them, and the double each
# stands for: the one home of both directions, for the stored partials, the samples' JSON
# (l2m.engine.samples) and remote write's reading of it (l2m.remotewrite.outbox).
NONFINITE: dict[str, float] = {"+Inf": math.inf, "-Inf": -math.inf, "NaN": math.nan}


def nonfinite_text(value: float) -> str:
    """A non-finite float as Prometheus writes it: ``"+Inf"``, ``"-Inf"`` or ``"NaN"``."""
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def load_float(value: float | str | None) -> float | None:
    """The float of :func:`dump_float`'s form."""
    if isinstance(value, str):
        return NONFINITE[value]
    return value


@dataclass
class Partial:
    """A mergeable aggregate of one series (window, bucket): a partial row in Python, and what
    the streaming state keeps per series."""

    matches: int = 0
    n: int = 0
    sum: float = 0.0
    exact: Decimal | None = Decimal(0)  # None once a value or the total does not fit
    min: float | None = None
    max: float | None = None
    ts: int | None = None

    def merge(self, other: Partial) -> Partial:
        exact = None
        if self.exact is not None and other.exact is not None:
            exact = _CONTEXT.add(self.exact, other.exact)
            if abs(exact) >= _DECIMAL_LIMIT:
                exact = None
        return Partial(
            self.matches + other.matches, self.n + other.n, self.sum + other.sum, exact,
            _pick(min, self.min, other.min), _pick(max, self.max, other.max),
            _pick(max, self.ts, other.ts),
        )

    def dump(self) -> list[Any]:
        """The stored form (state formats 2 and 7, :mod:`l2m.state.format`): ``[matches, n,
        sum, exact_sum (decimal string or null), min, max, ts]``, non-finite floats as
        strings."""
        return [self.matches, self.n, dump_float(self.sum),
                None if self.exact is None else str(self.exact),
                dump_float(self.min), dump_float(self.max), self.ts]

    @classmethod
    def load(cls, stored: list[Any]) -> Partial:
        """The partial of :meth:`dump`'s form."""
        matches, n, total, exact, lo, hi, ts = stored
        return cls(matches, n, load_float(total) or 0.0,
                   None if exact is None else Decimal(exact), load_float(lo), load_float(hi), ts)

    def merged_into(self, stored: list[Any] | None) -> list[Any]:
        """The stored form of ``stored`` (if any) merged with this partial."""
        return (self if stored is None else Partial.load(stored).merge(self)).dump()

    @property
    def total(self) -> float:
        """The sum: exact when possible, else the double sum."""
        return float(self.exact) if self.exact is not None else self.sum


def _pick(fn: Any, a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return fn(a, b)


# A partial row's value columns, in the order _read takes them.
_VALUE_COLUMNS = ("matches", "n", "sum", "exact_sum", "exact_n", "min", "max", "ts")


def _values(columns: list[list[Any]]) -> Iterator[Partial]:
    """The partial of each row, from its ``_VALUE_COLUMNS`` as lists."""
    for row in zip(*columns, strict=True):
        yield _read(*row)


def column_list(frame: Any, name: str) -> list[Any]:
    """A column of a pandas frame or an Arrow table as a list (pandas: NaN for a numeric
    null; Arrow: None — :func:`_read` takes either)."""
    if isinstance(frame, pa.Table):
        return frame.column(name).to_pylist()
    return frame[name].tolist()


def frame_partials(frame: Any) -> Iterator[tuple[str, str, Partial]]:
    """(series, le or "", partial) of each row of a pandas frame or an Arrow table of partial
    rows (the state stage's input, :func:`l2m.state.rows.unpacked`)."""
    parts = _values([column_list(frame, c) for c in _VALUE_COLUMNS])
    for name, le, part in zip(column_list(frame, "series"), column_list(frame, "le"), parts,
                              strict=True):
        yield name, le if isinstance(le, str) else "", part


def partial_rows(table: pa.Table) -> Iterator[tuple[str, str, str | None, int | None, Partial]]:
    """(rule, series, le, window, partial) of each row of an Arrow table of partials
    (backfill's last stage): column by column, not a dict per row."""
    keys = [table.column(c).to_pylist() for c in ("rule", "series", "le", "window")]
    parts = _values([table.column(c).to_pylist() for c in _VALUE_COLUMNS])
    for (rule, name, le, window), part in zip(zip(*keys, strict=True), parts, strict=True):
        yield rule, name, le, window, part


def _read(matches: Any, n: Any, total: Any, exact: Any, exact_n: Any, lo: Any, hi: Any,
          ts: Any) -> Partial:
    """One partial row's values (pandas gives NaN for nulls of numeric columns, Spark None)."""
    n = int(n)
    if n == 0:
        known: Decimal | None = Decimal(0)  # no values sum to an exact 0 (SQL's sum is null)
    else:
        known = exact if isinstance(exact, Decimal) and int(exact_n) == n else None
    # The sum is never null (table_of fills it): a NaN there is a real one — a +inf and a
    # -inf sum merged — and shows as "NaN", as the state's own merge keeps it. (min and max
    # may be null: pandas' NaN stands for null there.)
    return Partial(int(matches), n, 0.0 if total is None else float(total), known,
                   _float(lo), _float(hi), None if ts is None or ts != ts else int(ts))


def _float(value: Any) -> float | None:
    return None if value is None or value != value else float(value)
