"""Parse stage: JSON log lines → typed Arrow columns for just the fields the rules read.

Each line is decoded once; for every referenced field only the forms some rule needs are
extracted (string form, number, presence, text tokens — :class:`~l2m.query.FieldUse`), with
the semantics of :mod:`l2m.values`. The same function serves the batch backfill (inside
``mapInArrow``) and the streaming source (inside the Kafka reader), so both see identical
values. Malformed lines are rows with a status and a reason, never an exception.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pyarrow as pa

from l2m.query import FieldUse
from l2m.values import lookup, number, padded_tokens, parse_timestamp, string_form

OK = 0
MALFORMED = 1
NO_TIMESTAMP = 2
BLANK = 3  # an empty line in a JSON-lines file: skipped, not a log

STATUS = "_status"
TIMESTAMP = "_ts"
ERROR = "_error"


@dataclass(frozen=True)
class ParsePlan:
    """Which fields to extract and the column name of each form."""

    fields: tuple[FieldUse, ...]
    timestamp_field: str = "@timestamp"

    @staticmethod
    def merge(uses: Iterable[FieldUse], timestamp_field: str = "@timestamp") -> ParsePlan:
        merged: dict[str, FieldUse] = {}
        for use in uses:
            old = merged.get(use.path, FieldUse(use.path))
            merged[use.path] = FieldUse(
                use.path, old.string or use.string, old.number or use.number,
                old.exists or use.exists, old.text or use.text,
            )
        return ParsePlan(tuple(sorted(merged.values(), key=lambda u: u.path)), timestamp_field)

    def index(self, path: str) -> int:
        for i, use in enumerate(self.fields):
            if use.path == path:
                return i
        raise KeyError(path)

    def column(self, path: str, form: str) -> str:
        """Column name of ``form`` (``s`` string, ``n`` number, ``x`` exists, ``t`` text)."""
        return f"f{self.index(path)}_{form}"

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
        cols += [
            pa.field(TIMESTAMP, pa.int64()),
            pa.field(STATUS, pa.int8(), nullable=False),
            pa.field(ERROR, pa.string()),
        ]
        return pa.schema(cols)

    def spark_schema_ddl(self) -> str:
        """The same schema as a Spark DDL string (for ``mapInArrow``)."""
        names = {pa.string(): "STRING", pa.float64(): "DOUBLE", pa.bool_(): "BOOLEAN",
                 pa.int64(): "BIGINT", pa.int8(): "TINYINT"}
        return ", ".join(f"`{f.name}` {names[f.type]}" for f in self.schema())


def _getter(path: str) -> Callable[[dict[str, Any]], Any]:
    if "." not in path:
        return lambda doc: doc.get(path)
    return lambda doc: lookup(doc, path)


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
                fallback_ts: Sequence[int | None] | None = None) -> pa.RecordBatch:
    """Parse JSON log lines into one Arrow record batch with ``plan.schema()``.

    ``fallback_ts`` (streaming: the Kafka record timestamps) replaces an event time that is
    missing or unusable; without it such logs get status ``NO_TIMESTAMP``."""
    getters = [_getter(use.path) for use in plan.fields]
    get_ts = _getter(plan.timestamp_field)
    outputs: list[tuple[list[Any], Callable[[Any], Any]]] = []
    extract: list[list[tuple[list[Any], Callable[[Any], Any]]]] = []
    for use in plan.fields:
        forms: list[tuple[list[Any], Callable[[Any], Any]]] = []
        if use.string:
            forms.append(([], string_form))
        if use.number:
            forms.append(([], number))
        if use.exists:
            forms.append(([], _present))
        if use.text:
            forms.append(([], _text))
        extract.append(forms)
        outputs.extend(forms)
    ts_out: list[int | None] = []
    status_out: list[int] = []
    error_out: list[str | None] = []
    empty: dict[str, Any] = {}
    for row, line in enumerate(lines):
        doc, error = decode(line) if line else (None, "empty record")
        if doc is None:
            doc = empty
            blank = line is not None and not line.strip()
            status_out.append(BLANK if blank else MALFORMED)
            error_out.append(None if blank else error)
            ts_out.append(None)
        else:
            ts = parse_timestamp(get_ts(doc))
            if ts is None and fallback_ts is not None:
                ts = fallback_ts[row]
            ts_out.append(ts)
            status_out.append(OK if ts is not None else NO_TIMESTAMP)
            error_out.append(None)
        for get, forms in zip(getters, extract, strict=True):
            value = get(doc)
            for out, convert in forms:
                out.append(convert(value))
    arrays = [pa.array(out, type=f.type) for (out, _), f in zip(outputs, plan.schema(),
                                                                  strict=False)]
    arrays += [pa.array(ts_out, pa.int64()), pa.array(status_out, pa.int8()),
               pa.array(error_out, pa.string())]
    return pa.RecordBatch.from_arrays(arrays, schema=plan.schema())


def _present(value: Any) -> bool:
    return value is not None


def _text(value: Any) -> str | None:
    text = string_form(value)
    return None if text is None else padded_tokens(text)
