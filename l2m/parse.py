"""Parse stage: JSON log lines → typed Arrow columns for just the fields the rules read.

Each line is decoded once; for every referenced field only the forms some rule needs are
extracted (string form, number, presence, text tokens — :class:`~l2m.query.FieldUse`), with
the semantics of :mod:`l2m.values`. The same function serves the batch backfill (inside
``mapInArrow``) and the streaming source (inside the Kafka reader), so both see identical
values. Malformed lines are rows with a status and a reason, never an exception.

Input: JSON lines (bytes or str, ``None`` for a Kafka tombstone) and, in streaming, each
record's Kafka timestamp. Output: one Arrow batch with ``ParsePlan.schema()`` — the field
columns, ``_ts`` (event time, ms), ``_status`` (:data:`STATUS_NAMES`) and ``_error``.

Patterns (regexes and wildcards) are evaluated here too, vectorised with RE2
(:mod:`l2m.patterns`): one boolean column per distinct (field, pattern), which the route
stage only reads. RE2 is linear in the input, so no pattern can stall the job, and it is the
engine ``l2m validate`` checked them with.

Event time is bounded (streaming): a log dated more than ``max_future_ms`` ahead of its
record's Kafka time — or, without its own time, a record dated that far ahead of the clock —
is ``future``: counted and dead-lettered, never routed, so one bad clock cannot move the
watermark and close every gauge window early.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from l2m.patterns import match_any_token, match_whole
from l2m.query import FieldUse
from l2m.values import lookup, number, padded_tokens, parse_timestamp, string_form

OK = 0
MALFORMED = 1
NO_TIMESTAMP = 2  # no usable event time: skipped (backfill, or streaming without Kafka time)
BLANK = 3  # an empty line in a JSON-lines file or an empty Kafka record: skipped, not a log
KAFKA_TIME = 4  # streaming: no usable event time, dated by the Kafka record instead; routed
FUTURE = 5  # streaming: event time too far ahead of the record's time; not routed

# Index = status code: the ``status`` label of ``l2m_input_logs_total`` and the backfill
# summary. A log dated by its Kafka time is still reported as ``no_timestamp``.
STATUS_NAMES = ("ok", "malformed", "no_timestamp", "blank", "no_timestamp", "future")
ROUTED = (OK, KAFKA_TIME)  # statuses whose logs the rules see
DEAD_LETTERED = (MALFORMED, FUTURE)  # statuses whose records go to the dead-letter topic
MAX_FUTURE_MS = 5 * 60_000

STATUS = "_status"
TIMESTAMP = "_ts"
ERROR = "_error"


@dataclass(frozen=True)
class ParsePlan:
    """Which fields to extract, which patterns to evaluate on them, and the column name of
    each. Serialisable (:meth:`to_json`): the streaming source receives it as an option."""

    fields: tuple[FieldUse, ...]
    timestamp_field: str = "@timestamp"
    max_future_ms: int = MAX_FUTURE_MS

    @staticmethod
    def merge(uses: Iterable[FieldUse], timestamp_field: str = "@timestamp",
              max_future_ms: int = MAX_FUTURE_MS) -> ParsePlan:
        merged: dict[str, FieldUse] = {}
        for use in uses:
            # Through merged() even when alone: each field's patterns sorted and unique, so
            # equal rule sets give equal plans (and one pattern column per field and pattern).
            merged[use.path] = merged.get(use.path, FieldUse(use.path)).merged(use)
        return ParsePlan(tuple(sorted(merged.values(), key=lambda u: u.path)), timestamp_field,
                         max_future_ms)

    def to_json(self) -> str:
        return json.dumps({"timestamp_field": self.timestamp_field,
                           "max_future_ms": self.max_future_ms,
                           "fields": [dataclasses.asdict(u) for u in self.fields]})

    @staticmethod
    def from_json(text: str) -> ParsePlan:
        data = json.loads(text)
        fields = tuple(
            FieldUse(**{k: tuple(v) if isinstance(v, list) else v for k, v in u.items()})
            for u in data["fields"])
        return ParsePlan(fields, data["timestamp_field"],
                         int(data.get("max_future_ms", MAX_FUTURE_MS)))

    def index(self, path: str) -> int:
        for i, use in enumerate(self.fields):
            if use.path == path:
                return i
        raise KeyError(path)

    def column(self, path: str, form: str) -> str:
        """Column name of ``form`` (``s`` string, ``n`` number, ``x`` exists, ``t`` text)."""
        return f"f{self.index(path)}_{form}"

    def pattern_column(self, path: str, text: bool, regex: str) -> str:
        """Column name of the boolean match of ``regex`` against ``path``: its whole string
        form, or (``text``) any of its tokens. False, never null, when the field is missing."""
        i = self.index(path)
        use = self.fields[i]
        if text:
            return f"f{i}_tm{use.text_patterns.index(regex)}"
        return f"f{i}_km{use.keyword_patterns.index(regex)}"

    def schema(self) -> pa.Schema:
        cols: list[pa.Field] = []
        for i, use in enumerate(self.fields):
            if use.string:
                cols.append(pa.field(f"f{i}_s", pa.string()))
            if use.number:
                cols.append(pa.field(f"f{i}_n", pa.float64()))
            if use.exists:
                cols.append(pa.field(f"f{i}_x", pa.bool_()))
            if use.text:
                cols.append(pa.field(f"f{i}_t", pa.string()))
            cols += [pa.field(f"f{i}_km{j}", pa.bool_())
                     for j in range(len(use.keyword_patterns))]
            cols += [pa.field(f"f{i}_tm{j}", pa.bool_()) for j in range(len(use.text_patterns))]
        cols += [
            pa.field(TIMESTAMP, pa.int64()),
            pa.field(STATUS, pa.int8()),
            pa.field(ERROR, pa.string()),
        ]
        return pa.schema(cols)

    def spark_schema_ddl(self) -> str:
        """The same schema as a Spark DDL string (for ``mapInArrow``)."""
        names = {pa.string(): "STRING", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN",
                 pa.int64(): "BIGINT", pa.int8(): "TINYINT"}
        return ", ".join(f"`{f.name}` {names[f.type]}" for f in self.schema())


def decode(line: str | bytes) -> tuple[dict[str, Any] | None, str | None]:
    """JSON object or the reason it is not one."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc}"
    if not isinstance(doc, dict):
        return None, f"not a JSON object (a {type(doc).__name__})"
    return doc, None


def parse_lines(lines: Sequence[str | bytes | None], plan: ParsePlan,
                fallback_ts: Sequence[int | None] | None = None,
                now_ms: int | None = None) -> pa.RecordBatch:
    """Parse JSON log lines into one Arrow record batch with ``plan.schema()``.

    ``fallback_ts`` (streaming: the Kafka record timestamps) replaces an event time that is
    missing or unusable (status ``KAFKA_TIME``); without it such logs get ``NO_TIMESTAMP``.
    With ``fallback_ts``, event times more than ``plan.max_future_ms`` ahead of the record's
    time (or a fallback that far ahead of ``now_ms``) get ``FUTURE``."""
    # Decoded logs are thousands of live dicts: the cyclic collector would scan them again
    # and again while they are built (12-15% of this function), and they hold no cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _parse_lines(lines, plan, fallback_ts, now_ms)
    finally:
        if collecting:
            gc.enable()


def _parse_lines(lines: Sequence[str | bytes | None], plan: ParsePlan,
                 fallback_ts: Sequence[int | None] | None,
                 now_ms: int | None) -> pa.RecordBatch:
    docs: list[dict[str, Any]] = []
    ts_out: list[int | None] = []
    status_out: list[int] = []
    error_out: list[str | None] = []
    empty: dict[str, Any] = {}
    ts_path = plan.timestamp_field
    skew = plan.max_future_ms
    for row, line in enumerate(lines):
        record_ts = fallback_ts[row] if fallback_ts is not None else None
        doc, error = decode(line) if line else (None, None)
        if doc is None:
            docs.append(empty)
            blank = error is None or not line.strip()  # type: ignore[union-attr]
            status_out.append(BLANK if blank else MALFORMED)
            error_out.append(None if blank else error)
            # No event time in a malformed log; the record's own time (streaming) still
            # dates the input counter's sample.
            ts_out.append(record_ts)
            continue
        docs.append(doc)
        ts = parse_timestamp(lookup(doc, ts_path))
        status = OK
        reason = None
        if fallback_ts is not None:
            if ts is None:
                ts, status = record_ts, KAFKA_TIME
                if ts is not None and now_ms is not None and ts > now_ms + skew:
                    status = FUTURE
                    reason = (f"future: the record's Kafka time {ts} is {(ts - now_ms) / 1000:.0f}"
                              f" s ahead of the clock (limit {skew / 1000:.0f} s)")
            elif record_ts is not None and ts > record_ts + skew:
                status = FUTURE
                reason = (f"future: event time {ts} is {(ts - record_ts) / 1000:.0f} s ahead of "
                          f"the record's Kafka time (limit {skew / 1000:.0f} s)")
                ts = record_ts
        if ts is None:
            status = NO_TIMESTAMP
        ts_out.append(ts)
        status_out.append(status)
        error_out.append(reason)
    schema = plan.schema()
    names, extract = _extractor(plan)
    forms = {name: pa.array(col, type=_FORM_TYPES[name[-1]])
             for name, col in zip(names, extract(docs), strict=True)}
    columns = dict(forms)
    for i, use in enumerate(plan.fields):
        for j, regex in enumerate(use.keyword_patterns):
            columns[f"f{i}_km{j}"] = match_whole(forms[f"f{i}_s"], regex)
        for j, regex in enumerate(use.text_patterns):
            columns[f"f{i}_tm{j}"] = match_any_token(forms[f"f{i}_t"], regex)
    columns[TIMESTAMP] = pa.array(ts_out, pa.int64())
    columns[STATUS] = pa.array(status_out, pa.int8())
    columns[ERROR] = pa.array(error_out, pa.string())
    # A form only patterns needed (a string form no rule reads as such) is not emitted.
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


_FORM_TYPES = {"s": pa.string(), "n": pa.float64(), "x": pa.bool_(), "t": pa.string()}


@functools.lru_cache(maxsize=32)
def _extractor(plan: ParsePlan) -> tuple[list[str], Callable[[list[dict[str, Any]]],
                                                              list[list[Any]]]]:
    """A loop specialised for ``plan``: one straight-line block per field with the lookup and
    conversions inlined. Extraction is the parse stage's hot spot (≈4× the cost of decoding
    the JSON with the generic per-field function calls), so it is generated once per plan.
    The semantics stay those of :mod:`l2m.values` (``tests/test_parse.py`` checks both).

    Returns the column names (``f<i>_<form>``) of the forms it extracts — those the plan
    emits, plus the string form and tokens its patterns are matched against."""
    body: list[str] = []
    outs: list[str] = []
    for i, raw_use in enumerate(plan.fields):
        use = dataclasses.replace(raw_use, string=raw_use.string or bool(raw_use.keyword_patterns),
                                  text=raw_use.text or bool(raw_use.text_patterns))
        parts = use.path.split(".")
        body.append(f"        v = doc.get({use.path!r})")
        if len(parts) > 1:
            body.append("        if v is None:")
            body.append(f"            v = doc.get({parts[0]!r})")
            for part in parts[1:]:
                body.append(f"            v = v.get({part!r}) if v.__class__ is dict else None")
        body.append("        t = v.__class__")
        if use.string:
            outs.append(f"s{i}")
            body.append(f"        s{i}(v if t is str else string_form(v))")
        if use.number:
            outs.append(f"n{i}")
            body.append(f"        n{i}(float(v) if t is int or t is float else number(v))")
        if use.exists:
            outs.append(f"x{i}")
            body.append(f"        x{i}(v is not None)")
        if use.text:
            outs.append(f"t{i}")
            body.append(f"        t{i}(None if v is None else text(v))")
    lines = ["def extract(docs):"]
    lines += [f"    c_{name} = []; {name} = c_{name}.append" for name in outs]
    lines += ["    for doc in docs:"] + (body or ["        pass"])
    lines += [f"    return [{', '.join('c_' + name for name in outs)}]"]
    namespace: dict[str, Any] = {"string_form": string_form, "number": number, "text": _text}
    # Field paths enter the source only through repr(): no injection from rule files.
    exec("\n".join(lines), namespace)
    return [f"f{name[1:]}_{name[0]}" for name in outs], namespace["extract"]


def _text(value: Any) -> str | None:
    text = string_form(value)
    return None if text is None else padded_tokens(text)
