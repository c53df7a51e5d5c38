"""A typed decoder: plain values → the frozen dataclass records of :mod:`l2m.config.job`,
driven by their field types.

Input: a mapping — parsed YAML (``l2m run``'s configuration file), or the string options Spark
hands the Kafka source (``text=True``) — and a record type. Each field's annotation says how
its value is written: the Python type (``str``, ``bool``, ``int``, ``X | None``, a
``Literal``, ``tuple[str, ...]``, ``dict[str, str]``, a nested record, a tuple of records)
and, through ``Annotated``, the marks below (:class:`Key`, :class:`Range`, :data:`DURATION`,
:data:`PATH`, :data:`ZERO_IS_NONE`, :class:`Client`, :class:`Parse`). Output: the record,
with the record's own default for every absent key, or the first problem, handed to ``fail``
with the key's path (the caller turns it into ``file:line: key: problem``).

Never shown in a problem: a value under a :class:`Client` field (Kafka client settings hold
secrets), a key that does not look like a setting name (it may be a value typed without its
colon)."""

from __future__ import annotations

import dataclasses
import math
import re
import types
import typing
from collections.abc import Callable, Mapping
from functools import cache
from typing import Annotated, Any, Literal, Protocol

from l2m.yamlio.suggest import closest

JAVA_INT_MAX = 2**31 - 1  # counts and limits reach Spark and Kafka as Java ints
# Past this a duration is a typo (and far past it, Spark's millisecond longs overflow).
MAX_DURATION_MS = 100 * 365 * 86_400_000


# --- marks -------------------------------------------------------------------------------


class Key:
    """Where a field is written when not under its own name: ``Key("trigger")``,
    ``Key("spark", "master")`` (a key of another section, which that section's settings then
    leave out); ``Key()``: not read from the file at all."""

    __slots__ = ("path",)

    def __init__(self, *path: str) -> None:
        self.path = path


@dataclasses.dataclass(frozen=True)
class Range:
    """Bounds of an integer (by default: 0 to the largest Java int)."""

    minimum: int = 0
    maximum: int = JAVA_INT_MAX


@dataclasses.dataclass(frozen=True)
class Client:
    """Kafka client settings (librdkafka's dotted names): values never shown; ``required``
    names must be present."""

    required: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Parse:
    """A value read by ``read(value)``, which returns the field's value or raises
    :class:`Invalid` with the problem."""

    read: Callable[[Any], Any]


@dataclasses.dataclass(frozen=True)
class _Flag:
    name: str


DURATION = _Flag("duration")  # int milliseconds, written "20 minutes", "5s", or seconds
PATH = _Flag("path")  # a path, resolved against the configuration file's folder
ZERO_IS_NONE = _Flag("zero is none")  # an optional count: 0 (or null) means none


class Invalid(ValueError):
    """A :class:`Parse` reader's problem with a value."""


# --- values as shown in problems ----------------------------------------------------------

# A key that does not look like a setting name may be a value typed without its colon
# (`kafka: {sasl.password s3cret}` is the key "sasl.password s3cret"): not shown.
_KEY_NAME = re.compile(r"[A-Za-z0-9_.@-]+")


def shown(key: object) -> str:
    return str(key) if _KEY_NAME.fullmatch(str(key)) else "(a key not shown)"


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def describe(value: Any, secret: bool = False) -> str:
    """``string 'x'``, ``integer 5``; a mapping, a list or a secret by its type only."""
    if secret or isinstance(value, dict | list):
        name = type_name(value)
        return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"
    return f"{type_name(value)} {value!r}"


# --- durations -----------------------------------------------------------------------------

_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|seconds?|m|minutes?|h|hours?|"
                       r"d|days?)\s*")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}
_EXAMPLE = "(e.g. '5 seconds', '20 minutes')"


def parse_duration_ms(text: str | int | float) -> int:
    """``"20 minutes"``, ``"5s"``, ``"250 ms"``, ``"7 days"`` → milliseconds; a number is
    seconds. At least 0, at most :data:`MAX_DURATION_MS`; else :class:`Invalid`."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not math.isfinite(text) or text < 0:
            raise Invalid(f"'{text}' is not a duration {_EXAMPLE}")
        ms = text * 1000
    else:
        match = _DURATION.fullmatch(str(text))
        if not match:
            raise Invalid(f"'{text}' is not a duration {_EXAMPLE}")
        unit = match.group(2)
        unit = "ms" if unit.startswith("milli") or unit == "ms" else unit[0]
        ms = float(match.group(1)) * _UNIT_MS[unit]
    if ms > MAX_DURATION_MS:
        raise Invalid(f"'{text}' is longer than 100 years")
    return int(ms)


# --- Kafka client setting names -----------------------------------------------------------

# librdkafka's settings are dotted names; the only underscored ones a file can set (the rest
# are callbacks and pointers, set through librdkafka's API, never from text).
_UNDERSCORED = frozenset({"log_level", "enabled_events"})


def client_setting_problem(name: str, prefix: str = "") -> str | None:
    """Why ``name`` cannot be a librdkafka setting, with the dotted name meant (after
    ``prefix``), if it is written with underscores for dots (``bootstrap_servers``)."""
    if "_" in name and name not in _UNDERSCORED and _KEY_NAME.fullmatch(name):
        return f"unknown client setting; did you mean '{prefix}{name.replace('_', '.')}'?"
    return None


# --- the decoder ---------------------------------------------------------------------------

_ABSENT = object()
_INTEGER = re.compile(r"\s*-?[0-9]+\s*")


class Fail(Protocol):
    def __call__(self, at: tuple[str, ...], problem: str, *,
                 line_at: tuple[str, ...] | None = None, hide_key: bool = False) -> Exception:
        """The error for ``problem`` with the value at key path ``at``; ``line_at``: the key
        whose line to name instead; ``hide_key``: name the section, not the key."""
        ...


@cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls, include_extras=True)


def _split(tp: Any) -> tuple[Any, tuple[Any, ...]]:
    """A type without its ``Annotated`` marks, and the marks."""
    if typing.get_origin(tp) is Annotated:
        return tp.__origin__, tuple(tp.__metadata__)
    return tp, ()


def _mark(marks: tuple[Any, ...], kind: type) -> Any:
    """The mark of this kind; of several, the outermost (``Annotated[Settings, Client(…)]``)."""
    return next((m for m in reversed(marks) if isinstance(m, kind)), None)


def _optional(tp: Any) -> Any:
    """``X`` for ``X | None``, else None."""
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def file_keys(cls: type) -> dict[str, tuple[str, ...]]:
    """Each field's key path in the file (empty: not read from the file)."""
    keys = {}
    for f in dataclasses.fields(cls):
        key = _mark(_split(_hints(cls)[f.name])[1], Key)
        keys[f.name] = key.path if key is not None else (f.name,)
    return keys


class Decoder:
    """Decodes records, raising ``fail(at, problem)`` for the first problem.

    ``text``: every value is a string (Spark options): integers and booleans are read from
    their text, choices case-insensitively, and an empty value is the field's default (null
    for an optional field). ``resolve``: how :data:`PATH` values are made absolute."""

    def __init__(self, fail: Fail, *, text: bool = False,
                 resolve: Callable[[str], str] | None = None) -> None:
        self.fail = fail
        self.text = text
        self.resolve = resolve or (lambda p: p)

    def record(self, cls: type, data: Mapping[Any, Any], at: tuple[str, ...] = (), *,
               names: Mapping[str, str] | None = None) -> Any:
        """A ``cls`` from ``data``. Keys are the fields' file keys, unknown ones refused with
        the nearest known key; with ``names`` (field → name) only those fields are read and
        other keys are ignored."""
        hints = _hints(cls)
        keys = {f: (n,) for f, n in names.items()} if names is not None else file_keys(cls)
        if names is None:
            self._known(data, at, {p[0] for p in keys.values() if p}, cls)
        values: dict[str, Any] = {}
        for f in dataclasses.fields(cls):
            path = keys.get(f.name, ())
            if not path:
                continue
            raw = _lookup(data, path)
            tp = hints[f.name]
            if raw is _ABSENT or (self.text and raw == "" and _optional(_split(tp)[0]) is None):
                marks = _split(tp)[1]
                client = _mark(marks, Client)
                if client is not None and client.required:
                    raw = None  # reported as missing
                elif PATH in marks:  # the default path, resolved as a written one would be
                    values[f.name] = self._resolved(_default(f))
                    continue
                else:
                    continue  # the record's default
            skip = {p[1] for p in keys.values() if len(p) == 2 and p[0] == path[0]} \
                if len(path) == 1 else set()
            values[f.name] = self.value(tp, raw, (*at, *path), skip=skip)
        return cls(**values)

    def _resolved(self, path: Any) -> Any:
        if path is None:  # an optional path not given
            return None
        return tuple(map(self.resolve, path)) if isinstance(path, tuple) else self.resolve(path)

    def _known(self, data: Mapping[Any, Any], at: tuple[str, ...], allowed: set[str],
               cls: type) -> None:
        unknown = [str(k) for k in data if str(k) not in allowed]
        if not unknown:
            return
        parts, hinted = [], True
        for key in unknown:
            hint = self._hint(key, allowed, cls) if _KEY_NAME.fullmatch(key) else None
            hinted = hinted and hint is not None
            parts.append(shown(key) + (f" ({hint})" if hint else ""))
        problem = f"unknown key(s): {', '.join(parts)}"
        if not hinted:
            problem += f" (allowed: {', '.join(sorted(allowed))})"
        raise self.fail(at, problem, line_at=(*at, unknown[0]))

    @staticmethod
    def _hint(key: str, allowed: set[str], cls: type) -> str | None:
        near = closest(key, sorted(allowed))
        if near is not None:
            return f"did you mean '{near}'?"
        hints = _hints(cls)
        for f in dataclasses.fields(cls):  # a key of a section written at this level
            base = _split(hints[f.name])[0]
            # is_dataclass narrows to "a dataclass or an instance of one"; base is a class
            if dataclasses.is_dataclass(base) and key in {
                    p[0] for p in file_keys(base).values() if p}:  # type: ignore[arg-type]
                return f"belongs under '{file_keys(cls)[f.name][0]}'"
        return None

    def value(self, tp: Any, raw: Any, at: tuple[str, ...], *, marks: tuple[Any, ...] = (),
              skip: set[str] | frozenset[str] = frozenset(), secret: bool = False) -> Any:
        """The value of type ``tp`` written as ``raw`` at key path ``at``."""
        base, more = _split(tp)
        marks = (*marks, *more)
        inner = _optional(base)
        if inner is not None:
            if raw is None or (self.text and raw == ""):
                return None
            if ZERO_IS_NONE in marks and self._zero(raw):
                return None
            return self.value(inner, raw, at, marks=marks, skip=skip, secret=secret)
        parse = _mark(marks, Parse)
        if parse is not None:
            try:
                return parse.read(raw)
            except Invalid as exc:
                raise self.fail(at, str(exc)) from None
        if dataclasses.is_dataclass(base):
            # base is a record class (is_dataclass also admits instances, which mypy keeps)
            if raw is None:
                return base()  # type: ignore[operator]
            if not isinstance(raw, Mapping):
                raise self.fail(at, f"expected a mapping, got {describe(raw)}")
            return self.record(base, raw, at)  # type: ignore[arg-type]
        origin = typing.get_origin(base)
        if origin is dict:
            return self._settings(raw, at, _mark(marks, Client), skip)
        if origin is tuple:
            item = typing.get_args(base)[0]
            if dataclasses.is_dataclass(item):  # a list of records, each a mapping
                return self._records(item, raw, at)
            strings = self._strings(raw, at)
            return tuple(map(self.resolve, strings) if PATH in marks else strings)
        if origin is Literal:
            return self._choice(raw, at, typing.get_args(base))
        if base is bool:
            return self._boolean(raw, at)
        if base is int:
            if DURATION in marks:
                return self._duration(raw, at)
            return self._integer(raw, at, _mark(marks, Range) or Range())
        if base is str:
            string = self._string(raw, at, secret)
            return self.resolve(string) if PATH in marks else string
        raise TypeError(f"{'.'.join(at)}: no decoding for {tp!r}")  # a record's mistake

    # --- one method per kind of value ----------------------------------------------------

    def _zero(self, raw: Any) -> bool:
        if self.text:
            return isinstance(raw, str) and raw.strip() == "0"
        return type(raw) is int and raw == 0  # `false` is not 0 here

    def _settings(self, raw: Any, at: tuple[str, ...], client: Client | None,
                  skip: set[str] | frozenset[str]) -> dict[str, str]:
        secret = client is not None
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise self.fail(at, f"expected a mapping, got {describe(raw)}")
        settings: dict[str, str] = {}
        for key, value in raw.items():
            name = str(key)
            if name in skip:
                continue
            # the value first: a "key" without one may be a stray secret, never named
            settings[name] = self._scalar(value, (*at, name), secret)
            if client is not None and (problem := client_setting_problem(name)):
                raise self.fail((*at, name), problem)
        for name in client.required if client is not None else ():
            if name not in settings:
                near = closest(name, [k for k in settings if _KEY_NAME.fullmatch(k)])
                if near is not None:
                    raise self.fail((*at, near), f"unknown client setting; did you mean "
                                                 f"'{name}'? ('{name}' is required)")
                raise self.fail(at, f"'{name}' is required")
        return settings

    def _scalar(self, value: Any, at: tuple[str, ...], secret: bool) -> str:
        if isinstance(value, bool):
            return "true" if value else "false"  # as librdkafka and Spark spell booleans
        if isinstance(value, str | int | float):
            return str(value)
        if value is None and secret:
            # `kafka: {bootstrap.servers: x, s3cret}`: the "key" may be a stray value
            raise self.fail(at, "a setting on this line has no value", hide_key=True)
        raise self.fail(at, f"expected a string, number or boolean, got {describe(value, secret)}")

    def _records(self, item: Any, raw: Any, at: tuple[str, ...]) -> tuple[Any, ...]:
        if not isinstance(raw, list) or not raw:
            raise self.fail(at, f"expected a list of mappings (at least one), got "
                                f"{'an empty list' if raw == [] else describe(raw)}")
        return tuple(self.value(item, entry, (*at, str(i))) for i, entry in enumerate(raw))

    def _string(self, raw: Any, at: tuple[str, ...], secret: bool = False) -> str:
        if isinstance(raw, str) and raw:
            return raw
        if isinstance(raw, int | float) and not isinstance(raw, bool):
            return str(raw)
        raise self.fail(at, f"expected a non-empty string, got {describe(raw, secret)}")

    def _strings(self, raw: Any, at: tuple[str, ...]) -> list[str]:
        value = [raw] if isinstance(raw, str) else raw
        if not isinstance(value, list) or not value or not all(
                isinstance(v, str) and v for v in value):
            got = "an empty list" if value == [] else describe(raw)
            raise self.fail(at, f"expected a list of strings (at least one, none empty), "
                                f"got {got}")
        return value

    def _choice(self, raw: Any, at: tuple[str, ...], choices: tuple[str, ...]) -> str:
        value = raw.lower() if self.text and isinstance(raw, str) else raw
        if isinstance(value, str) and value in choices:
            return value
        raise self.fail(at, f"expected {' or '.join(choices)}, got {describe(raw)}")

    def _boolean(self, raw: Any, at: tuple[str, ...]) -> bool:
        if self.text and isinstance(raw, str) and raw.lower() in ("true", "false"):
            return raw.lower() == "true"
        if not isinstance(raw, bool):
            raise self.fail(at, f"expected true or false, got {describe(raw)}")
        return raw

    def _integer(self, raw: Any, at: tuple[str, ...], bounds: Range) -> int:
        value = int(raw) if isinstance(raw, str) and _INTEGER.fullmatch(raw) else raw
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(at, f"expected an integer, got {describe(raw)}")
        if value < bounds.minimum:
            raise self.fail(at, f"must be at least {bounds.minimum}, got {value}")
        if value > bounds.maximum:
            raise self.fail(at, f"must be at most {bounds.maximum}, got {value}")
        return value

    def _duration(self, raw: Any, at: tuple[str, ...]) -> int:
        if isinstance(raw, bool) or not isinstance(raw, str | int | float):
            raise self.fail(at, f"expected a duration {_EXAMPLE}, got {describe(raw)}")
        try:
            return parse_duration_ms(raw)
        except Invalid as exc:
            raise self.fail(at, str(exc)) from None


def _default(f: dataclasses.Field[Any]) -> Any:
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return f.default


def _lookup(data: Mapping[Any, Any], path: tuple[str, ...]) -> Any:
    """The value at a key path; ``_ABSENT`` if a key is missing or a section is not a
    mapping (that section's own field reports it)."""
    value: Any = data
    for key in path:
        if not isinstance(value, Mapping) or key not in value:
            return _ABSENT
        value = value[key]
    return value
