"""Parse stage: JSON log lines → typed Arrow columns for just the fields the rules read.

Each line is decoded once, and only its referenced fields (:mod:`l2m.engine.decoding`, with
orjson's definition of a valid log); for every such field only the forms some rule needs are
extracted, column by column (string form, number, presence, text tokens —
:class:`~l2m.query.nodes.FieldUse`), with the semantics of :mod:`l2m.semantics.values`. The
same function serves the batch backfill (inside ``mapInArrow``) and the streaming source
(inside the Kafka reader), so both see identical values. Malformed lines are rows with a
status and a reason, never an exception.

Input: JSON lines (bytes or str, ``None`` for a Kafka tombstone) and, in streaming, each
record's Kafka timestamp. Output: one Arrow batch with ``ParsePlan.schema()`` — the field
columns, ``_ts`` (event time, ms), ``_status`` (:data:`~l2m.engine.status.STATUS_NAMES`) and
``_error``.

Patterns (regexes and wildcards) are evaluated here too, vectorised with RE2
(:mod:`l2m.query.patterns`): one boolean column per distinct (field, pattern), which the route
stage only reads. RE2 is linear in the input, so no pattern can stall the job, and it is the
engine ``l2m validate`` checked them with.

Event time is bounded (streaming): a log dated more than ``max_future_ms`` ahead of its
record's Kafka time — or, without its own time, a record dated that far ahead of the clock —
is ``future``: counted and dead-lettered, never routed, so one bad clock cannot move the
watermark and close every gauge window early.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from itertools import repeat
from operator import is_not
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.defaults import MAX_FUTURE_MS, TIMESTAMP_FIELD
from l2m.engine.decoding import (
    FALSE,
    FLOAT,
    INT,
    MISSING,
    OTHER,
    STR,
    TRUE,
    Column,
    Decoded,
    FieldDecoder,
    field_decoder,
    json_int,
)
from l2m.engine.status import Status
from l2m.process.collector import collector_paused
from l2m.query.nodes import FieldUse
from l2m.query.patterns import match_any_token, match_whole, token_lists
from l2m.semantics.values import (
    MAX_TIMESTAMP_MS,
    MIN_TIMESTAMP_MS,
    number,
    padded_tokens,
    parse_timestamp,
    string_form,
)

# The statuses as plain ints, for the hot loops (l2m.engine.status names them).
OK, MALFORMED, NO_TIMESTAMP, BLANK, KAFKA_TIME, FUTURE = (int(s) for s in Status)
# Lines decoded and typed at a time. Every step touches each decoded value once; a slice's
# values (~2 MB of Python objects) stay in a core's cache between the steps, where ten
# thousand lines' did not: parse 10.2 -> 8.4 µs/log (2 cores, EPYC, 2 MB L2 per core).
SLICE_LINES = 2_500
# Logs the scanner leaves to the exact decoder in a slice that are typed one by one (each a
# small batch of its own); past them the rest of the slice is decoded the exact way at once.
EXACT_PIECES = 8

class Form(StrEnum):
    """The forms of a field the parse stage extracts (:class:`~l2m.query.nodes.FieldUse`),
    each a column (:meth:`ParsePlan.column`)."""

    STRING = "s"  # the string form (SPEC §2)
    NUMBER = "n"  # the numeric value, null when not numeric
    EXISTS = "x"  # present and not null
    TEXT = "t"  # padded lower-case tokens


def _field(i: int, form: Form) -> str:
    """The column of the ``i``-th field's ``form``."""
    return f"f{i}_{form}"  # a StrEnum formats as its value


STATUS = "_status"
TIMESTAMP = "_ts"
ERROR = "_error"


@dataclass(frozen=True)
class ParsePlan:
    """Which fields to extract, which patterns to evaluate on them, and the column name of
    each. Serialisable (:meth:`to_json`): the streaming source receives it as an option."""

    fields: tuple[FieldUse, ...]
    timestamp_field: str = TIMESTAMP_FIELD
    max_future_ms: int = MAX_FUTURE_MS

    @staticmethod
    def merge(uses: Iterable[FieldUse], timestamp_field: str = TIMESTAMP_FIELD,
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
        fields = tuple(FieldUse(
            u["path"], u["string"], u["number"], u["exists"], u["text"],
            tuple(u["keyword_patterns"]), tuple(u["text_patterns"])) for u in data["fields"])
        return ParsePlan(fields, data["timestamp_field"],
                         int(data.get("max_future_ms", MAX_FUTURE_MS)))

    def index(self, path: str) -> int:
        for i, use in enumerate(self.fields):
            if use.path == path:
                return i
        raise KeyError(path)

    def column(self, path: str, form: Form) -> str:
        """Column name of a field's ``form``."""
        return _field(self.index(path), form)

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
                cols.append(pa.field(_field(i, Form.STRING), pa.string()))
            if use.number:
                cols.append(pa.field(_field(i, Form.NUMBER), pa.float64()))
            if use.exists:
                cols.append(pa.field(_field(i, Form.EXISTS), pa.bool_()))
            if use.text:
                cols.append(pa.field(_field(i, Form.TEXT), pa.string()))
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


def parse_lines(lines: Sequence[str | bytes | None], plan: ParsePlan,
                fallback_ts: Sequence[int | None] | None = None,
                now_ms: int | None = None) -> pa.RecordBatch:
    """Parse JSON log lines into one Arrow record batch with ``plan.schema()``.

    ``fallback_ts`` (streaming: the Kafka record timestamps) replaces an event time that is
    missing or unusable (status ``KAFKA_TIME``); without it such logs get ``NO_TIMESTAMP``.
    With ``fallback_ts``, event times more than ``plan.max_future_ms`` ahead of the record's
    time (or a fallback that far ahead of ``now_ms``) get ``FUTURE``."""
    # Decoding builds tens of thousands of tuples and lists (and dicts on orjson's path): the
    # cyclic collector would scan them again and again while they are built, and they hold
    # no cycles.
    with collector_paused():
        if len(lines) <= SLICE_LINES:
            return _parse_lines(lines, plan, fallback_ts, now_ms)
        return pa.concat_batches([
            _parse_lines(lines[i:i + SLICE_LINES], plan,
                         None if fallback_ts is None else fallback_ts[i:i + SLICE_LINES],
                         now_ms)
            for i in range(0, len(lines), SLICE_LINES)])


def _parse_lines(lines: Sequence[str | bytes | None], plan: ParsePlan,
                 fallback_ts: Sequence[int | None] | None,
                 now_ms: int | None) -> pa.RecordBatch:
    """One slice: scanned, but for the lines the scanner is not sure of (malformed, blank,
    odd), each decoded the exact way — a poison log costs its neighbours nothing. Lines that
    are not logs stay missing in the scanned columns, one pass; when one of them is a log
    after all (a number past what the scanner reads exactly, a key written twice), the slice
    is typed in pieces: the scanned lines between such logs, each of them decoded the exact
    way alone and, past :data:`EXACT_PIECES` of them, the rest of the slice at once."""
    ts_path = plan.timestamp_field
    decoder = field_decoder((*(use.path for use in plan.fields), ts_path), ts_path)
    if not lines:
        return _typed(decoder.read(lines), plan, fallback_ts, now_ms)
    decoded, logs = _scanned(decoder, lines)
    if decoded is not None:
        return _typed(decoded, plan, fallback_ts, now_ms)
    pieces: list[pa.RecordBatch] = []
    start, n = 0, len(lines)

    def typed(decoded: Decoded, end: int) -> None:
        pieces.append(_typed(decoded, plan, None if fallback_ts is None else
                             fallback_ts[start:end], now_ms))

    for row in logs[:EXACT_PIECES]:
        if row > start:  # no log the scanner leaves to the exact path in there
            typed(_scanned(decoder, lines[start:row])[0] or
                  decoder.read_exactly(lines[start:row]), row)
        start = row
        typed(decoder.read_exactly(lines[row:row + 1]), row + 1)
        start = row + 1
    if start < n:
        rest = lines[start:]
        typed((None if len(logs) > EXACT_PIECES else _scanned(decoder, rest)[0]) or
              decoder.read_exactly(rest), n)
    return pieces[0] if len(pieces) == 1 else pa.concat_batches(pieces)


def _scanned(decoder: FieldDecoder, lines: Sequence[str | bytes | None]
             ) -> tuple[Decoded | None, list[int]]:
    """The lines as the scanner reads them, those it is not sure of decoded the exact way
    together: when none of these is a log (malformed, blank: missing in every field either
    way), the decoded lines with them failed; else None and the rows of those that are logs
    (none: the scanner gave up, a slot's text past 2 GiB)."""
    around = decoder.scan_around(lines)
    if isinstance(around, int):
        return None, []
    decoded, refused = around
    if not refused:
        return decoded, []
    exact = decoder.read_exactly([lines[r] for r in refused])
    logs = [row for i, row in enumerate(refused) if i not in exact.failed]
    if logs:
        return None, logs
    decoded.failed.update((refused[i], why) for i, why in exact.failed.items())
    return decoded, []


def _typed(decoded: Decoded, plan: ParsePlan, fallback_ts: Sequence[int | None] | None,
           now_ms: int | None) -> pa.RecordBatch:
    """The typed columns of decoded lines (``plan.schema()``)."""
    ts_path = plan.timestamp_field
    values = decoded.values
    columns: dict[str, pa.Array] = {}
    for i, use in enumerate(plan.fields):
        col = values[use.path]
        if use.string or use.keyword_patterns:
            strings = columns[_field(i, Form.STRING)] = _strings(col)
            for j, regex in enumerate(use.keyword_patterns):
                columns[f"f{i}_km{j}"] = match_whole(strings, regex)
        if use.number:
            columns[_field(i, Form.NUMBER)] = _numbers(col)
        if use.exists:
            columns[_field(i, Form.EXISTS)] = _exists(col)
        if use.text or use.text_patterns:
            distinct, rows = _texts(col)
            if use.text:
                columns[_field(i, Form.TEXT)] = distinct.take(rows)
            # Two patterns or more: each matched over the distinct tokens (a hash pass costs
            # about one pattern over every token).
            tokens = token_lists(distinct, len(use.text_patterns) > 1) \
                if use.text_patterns else None
            for j, regex in enumerate(use.text_patterns):
                # Matched once per distinct text; a missing field (null row) never matches.
                columns[f"f{i}_tm{j}"] = pc.fill_null(
                    match_any_token(distinct, regex, tokens).take(rows), False)
    columns[TIMESTAMP], columns[STATUS], columns[ERROR] = _times(
        values[ts_path], decoded.failed, plan, fallback_ts, now_ms)
    schema = plan.schema()
    # A form only patterns needed (a string form no rule reads as such) is not emitted.
    return pa.RecordBatch.from_arrays([columns[f.name] for f in schema], schema=schema)


def _exists(col: Column) -> pa.Array:
    if col.kinds is not None:
        return pa.array(col.kinds != MISSING)
    values = col.to_list()
    return pa.array(np.fromiter(map(is_not, values, repeat(None)), np.bool_, len(values)))


def _times(raw: Column, failed: dict[int, str | None], plan: ParsePlan,
           fallback_ts: Sequence[int | None] | None, now_ms: int | None
           ) -> tuple[pa.Array, pa.Array, pa.Array]:
    """Event time, status and reason of every line (int64, int8 and string columns). Only
    the exceptions (no usable time, dated too far ahead, not a log) are visited one by one;
    a slice without any stays in Arrow."""
    n = len(raw)
    times = event_time_column(raw)
    if not failed and not times.null_count and (
            fallback_ts is None or not _ahead(times, fallback_ts, plan.max_future_ms).true_count):
        return (times, pa.array(np.full(n, OK, np.int8)), pa.nulls(n, pa.string()))
    ts, status, errors = _times_one_by_one(n, times.to_pylist(), failed, plan, fallback_ts,
                                           now_ms)
    return pa.array(ts, pa.int64()), pa.array(status, pa.int8()), pa.array(errors, pa.string())


def _ahead(times: pa.Array, fallback_ts: Sequence[int | None], skew: int) -> pa.Array:
    """Whether each event time is more than ``skew`` ahead of its record's time."""
    # Clamped so that adding the skew cannot overflow: a record time past ±2^62 is as far
    # from any event time (years 1-9999) as the unclamped one.
    records = pc.max_element_wise(pc.min_element_wise(pa.array(fallback_ts, pa.int64()),
                                                      2**62), -(2**62))
    return pc.greater(times, pc.add(records, skew))


def _times_one_by_one(n: int, ts: list[int | None], failed: dict[int, str | None],
                      plan: ParsePlan, fallback_ts: Sequence[int | None] | None,
                      now_ms: int | None) -> tuple[list[int | None], list[int], list[str | None]]:
    status = [OK] * n
    errors: list[str | None] = [None] * n
    for row, reason in failed.items():
        status[row] = BLANK if reason is None else MALFORMED
        errors[row] = reason
        # No event time in a malformed log; the record's own time (streaming) still dates
        # the input counter's sample.
        ts[row] = fallback_ts[row] if fallback_ts is not None else None
    times = pa.array(ts, pa.int64())
    missing = ([] if not times.null_count else
               [row for row in pc.indices_nonzero(times.is_null()).to_pylist()
                if row not in failed])
    skew = plan.max_future_ms
    if fallback_ts is None:
        for row in missing:
            status[row] = NO_TIMESTAMP
        return ts, status, errors
    for row in missing:
        record_ts = fallback_ts[row]
        ts[row], status[row] = record_ts, KAFKA_TIME
        if record_ts is None:
            status[row] = NO_TIMESTAMP
        elif now_ms is not None and record_ts > now_ms + skew:
            status[row] = FUTURE
            errors[row] = (f"future: the record's Kafka time {record_ts} is "
                           f"{(record_ts - now_ms) / 1000:.0f} s ahead of the clock "
                           f"(limit {skew / 1000:.0f} s)")
    ahead = _ahead(times, fallback_ts, skew)
    if ahead.true_count:
        for row in pc.indices_nonzero(ahead).to_pylist():
            if row in failed:
                continue
            event_ts, record_ts = ts[row], fallback_ts[row]
            assert event_ts is not None and record_ts is not None  # `ahead` is null otherwise
            status[row] = FUTURE
            errors[row] = (f"future: event time {event_ts} is "
                           f"{(event_ts - record_ts) / 1000:.0f} s ahead of "
                           f"the record's Kafka time (limit {skew / 1000:.0f} s)")
            ts[row] = record_ts
    return ts, status, errors


# The ISO times with milliseconds event_times reads by slicing (any zone: the minute's parse
# checks it). [[:ascii:]] as Python's isascii(): [0-9] is then what isdigit() accepts.
_ISO_MS = (r"^[[:ascii:]]{4}-[[:ascii:]]{2}-[[:ascii:]]{5}:[[:ascii:]]{2}:[0-5][0-9]\.[0-9]{3}"
           r"[Z+\-][[:ascii:]]*$")


def event_times(raw: list[Any]) -> list[int | None]:
    """:func:`event_time_column` as a list."""
    return event_time_column(Column(len(raw), raw)).to_pylist()


def event_time_column(raw: Column) -> pa.Array:
    """:func:`~l2m.semantics.values.parse_timestamp` of every value.

    Scanned in C, the usual times were read there (:mod:`l2m.engine._scan`: the ISO shape
    with milliseconds or microseconds and a zone, and epoch milliseconds); any other value is
    parsed here. Decoded the exact way, logs of one batch share their minutes: an ISO time
    with milliseconds (``2026-11-22T10:00:00.060Z``, any zone) costs the full parse once per
    distinct minute and zone, the rest (seconds, milliseconds) is sliced and added
    column-wise in Arrow; an integer (epoch milliseconds) in years 0001–9999 is itself, also
    in Arrow; anything else takes the full parse, value by value."""
    if raw.times is not None and raw.timed is not None and raw.kinds is not None:
        times = pa.array(raw.times, mask=~raw.timed)
        others = np.flatnonzero(~raw.timed & (raw.kinds != MISSING))
        if not len(others):
            return times
        out: list[int | None] = times.to_pylist()
        values = raw.to_list()
        for row in others.tolist():
            out[row] = parse_timestamp(values[row])
        return pa.array(out, pa.int64())
    if raw.strings is not None:
        strings = raw.strings
    else:
        strings = pa.array([v if v.__class__ is str else None for v in raw.to_list()],
                           pa.string())
    iso = pc.if_else(pc.fill_null(pc.match_substring_regex(strings, _ISO_MS), False), strings,
                     pa.scalar(None, pa.string()))
    if iso.null_count == len(iso):
        times = pa.nulls(len(raw), pa.int64())
    else:
        minutes = pc.binary_join_element_wise(pc.utf8_slice_codeunits(iso, 0, 16),
                                              pc.utf8_slice_codeunits(iso, 23),
                                              "").dictionary_encode()
        starts = pa.array([parse_timestamp(f"{key[:16]}:00{key[16:]}")
                           for key in minutes.dictionary.to_pylist()], pa.int64())
        seconds = pc.cast(pc.utf8_slice_codeunits(iso, 17, 19), pa.int64())
        millis = pc.cast(pc.utf8_slice_codeunits(iso, 20, 23), pa.int64())
        times = pc.add(starts.take(minutes.indices),
                       pc.add(pc.multiply(seconds, 1000), millis))
    if times.null_count:
        times = pc.coalesce(times, _epoch_milliseconds(raw))
    if not times.null_count:
        return times
    out = times.to_pylist()
    values = raw.to_list()
    # not such a time, or its minute is not a usable time: the full parse
    for row in pc.indices_nonzero(times.is_null()).to_pylist():
        value = values[row]
        if value is not None:
            out[row] = parse_timestamp(value)
    return pa.array(out, pa.int64())


def _epoch_milliseconds(raw: Column) -> pa.Array:
    """Each integer of ``raw`` in years 0001–9999 (parse_timestamp's integers: epoch
    milliseconds as they are); null for everything else (bools are not int here)."""
    if raw.ints is not None:
        ints = raw.ints
    else:
        try:
            ints = pa.array([v if v.__class__ is int else None for v in raw.to_list()],
                            pa.int64())
        except (pa.ArrowInvalid, OverflowError):  # past int64: the full parse says None
            return pa.nulls(len(raw), pa.int64())
    usable = pc.and_(pc.greater_equal(ints, MIN_TIMESTAMP_MS),
                     pc.less_equal(ints, MAX_TIMESTAMP_MS))
    return pc.if_else(usable, ints, pa.scalar(None, pa.int64()))


_NUMBERS = frozenset({int, float, type(None)})
_STRINGS_AND_INTS = frozenset({str, int, type(None)})
_NUMBERS_AND_STRINGS = frozenset({int, float, str, type(None)})


def _strings(column: Column) -> pa.Array:
    if column.within(MISSING, STR):
        return column.strings
    if column.within(MISSING, STR, INT):
        ints = pc.cast(column.ints, pa.string())
        return pc.coalesce(column.strings, ints) if column.has(STR) else ints
    if column.within(MISSING, STR, INT, TRUE, FALSE, OTHER):
        # Booleans and objects among strings (a host that is a name in one source and an
        # object in another, a flag): no float to print, so no row needs Python (issue 58).
        # An object or array has no string form: its row stays null, as string_form says.
        out = column.strings
        if column.has(INT):
            out = pc.coalesce(out, pc.cast(column.ints, pa.string()))
        assert column.kinds is not None
        for kind, text in ((TRUE, "true"), (FALSE, "false")):
            if column.has(kind):
                out = pc.if_else(pa.array(column.kinds == kind), pa.scalar(text), out)
        return out
    col = column.to_list()
    try:  # all strings (or missing), the usual case: Arrow copies them in C
        return pa.array(col, pa.string())
    except (pa.ArrowTypeError, pa.ArrowInvalid):  # a number, bool, list or object among them
        pass
    kinds = set(map(type, col))
    if kinds <= _STRINGS_AND_INTS:
        # Integers (status codes) among strings: an int64 prints as str() does in Arrow's
        # cast too; bools (not int here), floats and integers past int64 take the loop.
        try:
            ints = pa.array([v if v.__class__ is int else None for v in col], pa.int64())
        except (pa.ArrowInvalid, OverflowError):
            ints = None
        if ints is not None:
            if str not in kinds:
                return pc.cast(ints, pa.string())
            return pc.coalesce(pa.array([v if v.__class__ is str else None for v in col],
                                        pa.string()), pc.cast(ints, pa.string()))
    return pa.array([v if v.__class__ is str else _string_form(v) for v in col], pa.string())


def _numbers(column: Column) -> pa.Array:
    if column.within(MISSING, INT, FLOAT, STR):
        # INT and FLOAT values are finite doubles already (number() of each is itself).
        values = column.numbers
        return values if not column.has(STR) else _numbers_and_strings(
            values, column.strings)
    # Arrow would take True for 1.0: only a column of numbers (or missing) is converted whole.
    col = column.to_list()
    kinds = set(map(type, col))
    if kinds <= _NUMBERS:
        try:
            return pa.array(col, pa.float64())
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass  # an integer a double cannot hold exactly: float() rounds it, as below
    elif kinds <= _NUMBERS_AND_STRINGS:
        try:
            return _numbers_and_strings(
                pa.array([v if (t := v.__class__) is int or t is float else None for v in col],
                         pa.float64()),
                pa.array([v if v.__class__ is str else None for v in col], pa.string()))
        except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError):
            pass
    return pa.array([float(v) if (t := v.__class__) is int or t is float else number(v)
                     for v in col], pa.float64())


# Strings Arrow turns into the double number() gives: integers of at most 15 digits are exact.
_SHORT_INTEGER = r"^-?[0-9]{1,15}$"


def _numbers_and_strings(values: pa.Array, strings: pa.Array) -> pa.Array:
    """Numbers (``values``, doubles) with numeric strings among them (``strings``: an HTTP
    status written either way): short integer strings in Arrow, any other string by
    :func:`~l2m.semantics.values.number`."""
    short = pc.fill_null(pc.match_substring_regex(strings, _SHORT_INTEGER), False)
    values = pc.coalesce(values, pc.cast(pc.if_else(short, strings,
                                                    pa.scalar(None, pa.string())), pa.float64()))
    others = pc.and_not(pc.is_valid(strings), short)
    if not others.true_count:
        return values
    out = values.to_pylist()
    for row in pc.indices_nonzero(others).to_pylist():
        out[row] = number(strings[row].as_py())
    return pa.array(out, pa.float64())


def _texts(column: Column) -> tuple[pa.Array, pa.Array]:
    """The distinct text forms of ``col`` and, per row, the index of its form (null where the
    field is missing). Messages repeat (templates, health checks): each distinct string is
    tokenised — and later matched against the text patterns — once per batch. Only strings
    are shared: 1, 1.0 and True are equal keys with different forms."""
    if column.within(MISSING, STR) and column.strings is not None:
        # the usual case: Arrow finds the distinct strings in C
        return _tokenised(column.strings.dictionary_encode())
    col = column.to_list()
    try:  # strings (or missing) only, decoded the exact way
        encoded = pa.array(col, pa.string()).dictionary_encode()
    except (pa.ArrowTypeError, pa.ArrowInvalid):
        pass
    else:
        return _tokenised(encoded)
    seen: dict[str, int] = {}
    forms: list[str | None] = []
    rows: list[int | None] = []
    for v in col:
        if v.__class__ is str:
            at = seen.get(v)
            if at is None:
                at = seen[v] = len(forms)
                forms.append(padded_tokens(v))
            rows.append(at)
        elif v is None:
            rows.append(None)
        else:
            rows.append(len(forms))
            forms.append(_text(v))
    return pa.array(forms, pa.string()), pa.array(rows, pa.int32())


def _tokenised(encoded: pa.DictionaryArray) -> tuple[pa.Array, pa.Array]:
    return padded_forms(encoded.dictionary), encoded.indices


# Per byte, what an ASCII text becomes before it is split: a token character (Python's
# ``\w`` on ASCII: letters, digits, ``_``) lower-cased, anything else a space. Bytes past
# ASCII become spaces too, but their values take the exact path.
_TOKEN_BYTES = bytes(c + 32 if 65 <= c <= 90 else c if (chr(c).isalnum() and c < 128) or c == 95
                     else 32 for c in range(256))


def padded_forms(strings: pa.Array) -> pa.Array:
    """:func:`~l2m.semantics.values.padded_tokens` of each string of ``strings`` (no nulls).
    An ASCII string's tokens are its runs of ``[A-Za-z0-9_]`` lower-cased, so the column's
    whole data buffer is mapped at once (``bytes.translate``) and each value only split and
    joined: messages that rarely repeat (ids, numbers, stack traces) made the regex per
    distinct text a fifth of the read task (issue 58). Others by ``padded_tokens``."""
    if strings.null_count or not len(strings) or not pa.types.is_string(strings.type):
        return pa.array(list(map(padded_tokens, strings.to_pylist())), pa.string())
    data = strings.buffers()[2]
    mapped = pa.Array.from_buffers(
        pa.string(), len(strings),
        [None, strings.buffers()[1],
         pa.py_buffer(b"" if data is None else data.to_pybytes().translate(_TOKEN_BYTES))],
        offset=strings.offset)
    forms = [" " + " ".join(text.split()) + " " for text in mapped.to_pylist()]
    ascii_only = pc.string_is_ascii(strings)
    if ascii_only.false_count:
        for row in pc.indices_nonzero(pc.invert(ascii_only)).to_pylist():
            forms[row] = padded_tokens(strings[row].as_py())
    return pa.array(forms, pa.string())


def _string_form(value: Any) -> str | None:
    return string_form(json_int(value) if value.__class__ is int else value)


def _text(value: Any) -> str | None:
    text = _string_form(value)
    return None if text is None else padded_tokens(text)
