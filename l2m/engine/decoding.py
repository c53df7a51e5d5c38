"""Decoding stage: JSON log lines → the raw value of every referenced field, column by column.

Only the fields the rules read are decoded (msgspec structs generated for the rules' field
paths, so everything else in a log is skipped in C, never built into Python objects), and the
values are transposed into columns without a per-log Python loop. Values keep their JSON
types (``str``, ``int``, ``float``, ``bool``, ``list``, an object, ``None`` for missing or
null); the parse stage (:mod:`l2m.engine.parse`) turns them into typed forms.

Which lines are logs is decided exactly as ``orjson.loads`` decides it — the definition the
reference evaluator and every earlier release used: a line orjson rejects is malformed with
orjson's message, whatever msgspec thinks of it. Where the two could disagree, the line takes
the orjson path:

* msgspec does not check what it skips: invalid UTF-8 and numbers past the double range
  (``1e400``, which orjson rejects) in unreferenced fields. The batch is checked for both in
  C first (an Arrow UTF-8 validation, one RE2 pass for number tokens that could overflow);
  lines that fail either are decoded by orjson.
* integers past 64 bits: orjson reads them as doubles; :func:`json_int` does the same to
  the referenced values (string forms differ: ``1.2345678901234568e+29``).
* anything msgspec itself refuses (bad syntax, not an object, deeper than its limit) goes to
  orjson, which either gives the reason or accepts the line (then read from orjson's dict).

The usual slice — every line a log whose referenced values are plain — is read by one pass in
C instead (:mod:`l2m.engine._scan`): it checks each line as orjson would accept it and writes
the referenced values straight into Arrow buffers, no Python object per value. It only ever
accepts what the exact path would give the same values for, and stops at the first line it
is not sure of — blank, malformed, a big integer, a referenced key written twice, nesting
past its depth — which the caller decodes the exact way (:meth:`FieldDecoder.scan`).

Input: a sequence of lines (bytes, str, or ``None`` for a Kafka tombstone). Output:
:class:`Decoded` — for each path a :class:`Column` of its values, one per line, and the lines
that are not logs.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Union, cast

import msgspec
import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine import _scan  # type: ignore[attr-defined]

# A JSON number token (after ``:``, ``,`` or ``[``) that could overflow a double: an exponent
# of three or more significant digits, or 210 or more integer digits (with an exponent of at
# most two digits, 10^(210 + 99) is where the double range ends). A superset: lines it flags
# are only decoded the slow, exact way.
_NUMBER_PAST_DOUBLE = r"[ \t\r\n]*-?(?:[0-9]{210}|[0-9]+(?:\.[0-9]+)?[eE]\+?0*[1-9][0-9]{2})"
# One pattern per separator: RE2 skips to a pattern's single literal first byte (memchr),
# where one pattern starting with the class [:,\[] made it step through every byte. The
# three together: 0.75 against 1.03 µs per log.
_OVERFLOW_AFTER = tuple(re.escape(sep) + _NUMBER_PAST_DOUBLE for sep in ":,[")

# orjson reads integers outside these bounds as doubles.
_INT_MIN = -(2**63)
_INT_END = 2**64


def decode(line: str | bytes) -> tuple[dict[str, Any] | None, str | None]:
    """JSON object or the reason it is not one (orjson: the definition of a log)."""
    try:
        doc = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        return None, f"invalid JSON: {exc}"
    if not isinstance(doc, dict):
        return None, f"not a JSON object (a {type(doc).__name__})"
    return doc, None


def json_int(value: int) -> int | float:
    """An integer as orjson reads it: past 64 bits, a double."""
    return value if _INT_MIN <= value < _INT_END else float(value)


# The kind of each scanned value (l2m/engine/_scan.c): missing or null, a string, an integer
# within int64, any other number, true, false, an object or array.
MISSING, STR, INT, FLOAT, TRUE, FALSE, OTHER = (
    _scan.MISSING, _scan.STR, _scan.INT, _scan.FLOAT, _scan.TRUE, _scan.FALSE, _scan.OTHER)
_PYTHON_KIND = {TRUE: True, FALSE: False}


class Composite:
    """An object or array the scanner met where a rule reads a value: present, with no string
    form, number or time (:mod:`l2m.semantics.values`), which is all a rule can ask of it."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "Composite()"


COMPOSITE = Composite()


class Column:
    """One path's values over a slice of lines.

    Scanned in C: ``kinds`` (uint8, one of MISSING … OTHER per row), and Arrow arrays of the
    values of some kinds, null elsewhere: ``strings`` (STR), ``ints`` (int64: INT) and
    ``numbers`` (doubles: INT and FLOAT). Decoded the
    exact way: only the values (``kinds`` is None). :meth:`to_list` gives the values as
    Python objects either way, for what has no column-wise path."""

    __slots__ = ("_present", "_values", "ints", "kinds", "n", "numbers",
                 "strings", "timed", "times")

    def __init__(self, n: int, values: list[Any] | None = None,
                 kinds: np.ndarray | None = None, strings: pa.Array | None = None,
                 ints: pa.Array | None = None, numbers: pa.Array | None = None,
                 present: frozenset[int] | None = None) -> None:
        self.n = n
        self._values = values
        self.kinds = kinds
        self.strings = strings
        self.ints = ints
        self.numbers = numbers
        self._present = present
        # The event time path's column, scanned: each row's time where the scanner read it
        # (``timed``); the other rows' values are for parse_timestamp.
        self.times: np.ndarray | None = None
        self.timed: np.ndarray | None = None

    @staticmethod
    def scanned(n: int, parts: tuple[Any, ...]) -> Column:
        kinds, offsets, valid, text, ints, doubles, int_valid, num_valid, present = parts
        present_kinds = frozenset(k for k in range(OTHER + 1) if present >> k & 1)
        strings = pa.StringArray.from_buffers(
            n, pa.py_buffer(offsets), pa.py_buffer(text), pa.py_buffer(valid))
        return Column(
            n, None, np.frombuffer(kinds, np.uint8), strings,
            pa.Array.from_buffers(pa.int64(), n, [pa.py_buffer(int_valid), pa.py_buffer(ints)]),
            pa.Array.from_buffers(pa.float64(), n,
                                  [pa.py_buffer(num_valid), pa.py_buffer(doubles)]),
            present_kinds)

    def __len__(self) -> int:
        return self.n

    @property
    def present(self) -> frozenset[int] | None:
        """The kinds among the rows (scanned columns only)."""
        return self._present

    def within(self, *kinds: int) -> bool:
        """Scanned, and every row of one of ``kinds``."""
        present = self.present
        return present is not None and present <= frozenset(kinds)

    def has(self, kind: int) -> bool:
        """Scanned, and some row of ``kind``."""
        present = self.present
        return present is not None and kind in present

    def to_list(self) -> list[Any]:
        """The values as the exact decoder gives them (an object or array: :data:`COMPOSITE`)."""
        if self._values is None:
            assert self.kinds is not None and self.strings is not None
            assert self.ints is not None and self.numbers is not None
            out: list[Any] = self.strings.to_pylist()
            present = self.present or frozenset()
            for kind in present - {MISSING, STR}:
                rows = np.flatnonzero(self.kinds == kind)
                if kind == INT:
                    values: list[Any] = self.ints.take(rows).to_pylist()
                elif kind == FLOAT:
                    values = self.numbers.take(rows).to_pylist()
                else:
                    values = [_PYTHON_KIND.get(kind, COMPOSITE)] * len(rows)
                for row, value in zip(rows.tolist(), values, strict=True):
                    out[row] = value
            self._values = out
        return self._values


@dataclass
class Decoded:
    """One batch, decoded: ``values[path]`` has one value per line (missing where the line
    is blank or malformed); ``failed`` maps the row of every line that is not a log to
    ``None`` (blank) or the reason it is malformed."""

    values: dict[str, Column]
    failed: dict[int, str | None]


class _Node:
    """One level of the field tree: keys read at this level, and the levels below."""

    def __init__(self) -> None:
        self.keys: dict[str, _Node | None] = {}

    def add(self, parts: Sequence[str]) -> None:
        head, rest = parts[0], parts[1:]
        if not rest:
            self.keys.setdefault(head, None)
            return
        child = self.keys.get(head)
        if child is None:
            child = self.keys[head] = _Node()
        child.add(rest)


class _Level:
    """The msgspec struct of one level, how to read its columns, and its children."""

    def __init__(self, node: _Node, name: str) -> None:
        self.keys = list(node.keys)
        self.children: dict[str, _Level] = {}
        fields: list[tuple[str, Any, None]] = []
        for i, (key, child) in enumerate(node.keys.items()):
            kind: Any = Any
            if child is not None:
                level = _Level(child, f"{name}_{i}")
                self.children[key] = level
                # An object decodes as the child struct; any other value stays itself (a
                # string, number, list...: the path below it is missing).
                kind = Union[level.struct, str, int, float, bool, list, None]  # noqa: UP007
            fields.append((f"k{i}", kind, None))
        # Attribute names are k0, k1...; the JSON keys can be anything (renamed).
        self.struct: type[msgspec.Struct] = msgspec.defstruct(
            name, fields, rename={f"k{i}": key for i, key in enumerate(self.keys)}, gc=False)
        self.empty = self.struct()
        self.getters = [attrgetter(f"k{i}") for i in range(len(self.keys))]

    def columns(self, items: Sequence[Any], prefix: tuple[str, ...],
                out: dict[tuple[str, ...], list[Any]]) -> None:
        """Every column of this level (and below) for ``items`` (instances of the struct)."""
        # One C-level pass per attribute: no per-log tuple of every attribute, as a transposing
        # zip(*rows) would build and free (it cost twice as much).
        cols = [list(map(getter, items)) for getter in self.getters]
        for key, col in zip(self.keys, cols, strict=True):
            out[(*prefix, key)] = col
            level = self.children.get(key)
            if level is not None:
                struct, empty = level.struct, level.empty
                level.columns([v if v.__class__ is struct else empty for v in col],
                              (*prefix, key), out)


class FieldDecoder:
    """Decodes lines into the values of ``paths`` (SPEC field lookup: the top-level key
    ``a.b`` if present and not null, else the nested path); the scanner reads the event
    times of ``time_path`` (one of them) too."""

    def __init__(self, paths: Sequence[str], time_path: str | None = None) -> None:
        self.paths = tuple(dict.fromkeys(paths))
        self.time_path = time_path
        self.time_slot = -1 if time_path is None else self.paths.index(time_path)
        root = _Node()
        for path in self.paths:
            root.add((path,))  # the flat key, even when dotted
            parts = path.split(".")
            if len(parts) > 1:
                root.add(parts)
        self.root = _Level(root, "Log")
        self.decoder = msgspec.json.Decoder(self.root.struct)
        self.tree = _scan_tree(self.paths)

    def read(self, lines: Sequence[str | bytes | None]) -> Decoded:
        """The lines' values: scanned, or the exact way when the scanner refuses a line."""
        scanned = self.scan(lines)
        return scanned if isinstance(scanned, Decoded) else self.read_exactly(lines)

    def scan(self, lines: Sequence[str | bytes | None]) -> Decoded | int:
        """The lines' values as the scanner reads them, or the row of the first line it is
        not sure of (the lines before it scan alone)."""
        scanned = _scan.scan(lines if isinstance(lines, list) else list(lines), self.tree,
                             len(self.paths), self.time_slot)
        if isinstance(scanned, int):
            return scanned
        return self._decoded(len(lines), *scanned)

    def scan_around(self, lines: Sequence[str | bytes | None]
                    ) -> tuple[Decoded, list[int]] | int:
        """The lines' values as the scanner reads them, the lines it is not sure of left
        missing, and those lines' rows (for the exact decoder); an int (a row) only where
        :meth:`scan` would stop for good (a slot's text past 2 GiB)."""
        scanned = _scan.scan(lines if isinstance(lines, list) else list(lines), self.tree,
                             len(self.paths), self.time_slot, True)
        if isinstance(scanned, int):
            return scanned
        parts, times, timed, refused = scanned
        return self._decoded(len(lines), parts, times, timed), refused

    def _decoded(self, n: int, parts: list[tuple[Any, ...]], times: bytes | None,
                 timed: bytes | None) -> Decoded:
        columns = {path: Column.scanned(n, part)
                   for path, part in zip(self.paths, parts, strict=True)}
        if self.time_path is not None:
            assert times is not None and timed is not None  # a time slot: the scanner's times
            column = columns[self.time_path]
            column.times = np.frombuffer(times, np.int64)
            column.timed = np.frombuffer(timed, np.bool_)
        return Decoded(columns, {})

    def read_exactly(self, lines: Sequence[str | bytes | None]) -> Decoded:
        """:meth:`read` without the scanner: msgspec, and orjson for what it refuses."""
        suspect = _suspects(lines)
        decode_struct = self.decoder.decode
        items: list[Any] = []
        failed: dict[int, str | None] = {}
        if not suspect:
            try:  # the usual batch: every line a log msgspec reads, no per-line Python
                # A None line makes msgspec raise: the per-line path below handles it.
                items = list(map(decode_struct, lines))  # type: ignore[arg-type]
            except Exception:  # a blank, malformed or odd line: line by line below
                items = []
        if not items and lines:
            items = self._one_by_one(lines, suspect, failed)
        columns: dict[tuple[str, ...], list[Any]] = {}
        self.root.columns(items, (), columns)
        n = len(lines)
        return Decoded({path: Column(n, self._lookup(columns, path)) for path in self.paths},
                       failed)

    def _one_by_one(self, lines: Sequence[str | bytes | None], suspect: set[int],
                    failed: dict[int, str | None]) -> list[Any]:
        decode_struct = self.decoder.decode
        items: list[Any] = []
        slow: list[tuple[int, dict[str, Any]]] = []
        empty = self.root.empty
        for row, line in enumerate(lines):
            if not line:
                items.append(empty)
                failed[row] = None
                continue
            if not suspect or row not in suspect:
                try:
                    items.append(decode_struct(line))
                    continue
                except Exception:  # orjson below decides, and says why
                    pass
            doc, error = decode(line)
            items.append(empty)
            if doc is None:
                failed[row] = None if not line.strip() else error
            else:
                slow.append((row, doc))
        for row, doc in slow:
            items[row] = msgspec.convert(doc, self.root.struct)
        return items

    @staticmethod
    def _lookup(columns: dict[tuple[str, ...], list[Any]], path: str) -> list[Any]:
        flat = columns[(path,)]
        parts = tuple(path.split("."))
        if len(parts) == 1:
            return flat
        nested = columns[parts]
        if flat.count(None) == len(flat):  # the usual case: no log has the dotted key
            return nested
        return [f if f is not None else v for f, v in zip(flat, nested, strict=True)]


def _scan_tree(paths: Sequence[str]) -> list[list[tuple[bytes, int, int, int]]]:
    """The field tree as the scanner reads it: levels (the root first) of (key, slot, priority,
    child level). A path's slot is filled by its top-level key (priority 2) or, when that is
    missing or null, by the end of its nested path (priority 1): SPEC's lookup."""
    levels: list[dict[bytes, list[int]]] = [{}]

    def entry(level: int, key: str) -> list[int]:
        raw = key.encode("utf-8", "surrogatepass")
        return levels[level].setdefault(raw, [-1, 0, -1])

    for slot, path in enumerate(paths):
        entry(0, path)[:2] = [slot, 2]
        parts = path.split(".")
        if len(parts) < 2:
            continue
        level = 0
        for part in parts[:-1]:
            node = entry(level, part)
            if node[2] < 0:
                node[2] = len(levels)
                levels.append({})
            level = node[2]
        entry(level, parts[-1])[:2] = [slot, 1]
    return [[(key, *node) for key, node in level.items()] for level in levels]  # type: ignore[misc]


@functools.lru_cache(maxsize=32)
def field_decoder(paths: tuple[str, ...], time_path: str | None = None) -> FieldDecoder:
    """The decoder for ``paths`` (and the event times of ``time_path``), built once per
    process."""
    return FieldDecoder(paths, time_path)


def _as_bytes(line: str | bytes | None) -> bytes:
    if isinstance(line, bytes):
        return line
    return line.encode("utf-8", "surrogatepass") if line else b""


_BYTES = frozenset({bytes})


def _suspects(lines: Sequence[str | bytes | None]) -> set[int]:
    """Rows msgspec may accept where orjson would not: invalid UTF-8, or a number token that
    could overflow a double."""
    data: list[bytes] = cast(list[bytes], lines) if set(map(type, lines)) <= _BYTES \
        else [_as_bytes(line) for line in lines]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    array = pa.LargeBinaryArray.from_buffers(
        pa.large_binary(), len(data), [None, pa.py_buffer(offsets), pa.py_buffer(b"".join(data))])
    rows: set[int] = set()
    try:
        array.cast(pa.large_string())
    except pa.ArrowInvalid:
        for row, line in enumerate(data):
            try:
                line.decode("utf-8")
            except UnicodeDecodeError:
                rows.add(row)
    overflow = functools.reduce(pc.or_, (pc.match_substring_regex(array, pattern)
                                         for pattern in _OVERFLOW_AFTER))
    if overflow.true_count:
        rows.update(pc.indices_nonzero(overflow).to_pylist())
    return rows
