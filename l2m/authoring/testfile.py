"""Rule unit test files (``*.test.yaml``, docs/rules.md "Testing rules"): the rules under
test, the job settings that change what they produce, and the test cases — input logs and
the samples and counts expected of them.

Input: a test file's path. Output: a :class:`TestFile` — the rule paths (resolved against the
test file's folder), the job settings as a :class:`~l2m.config.job.JobConfig` (a ``config:``
file's, the test file's own keys overriding), and each :class:`TestCase` with its input
lines (bytes, as a JSON-lines file would hold them) and its expectations, every one with the
line it was written on — or one :class:`~l2m.errors.ConfigError` ``file:line:column: key:
problem`` (unknown keys with the nearest known one). Relative event times (``+90s``) are
resolved here: the cases carry absolute epoch milliseconds only."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from l2m.config.decode import Decoder, describe, shown
from l2m.config.job import JobConfig, LimitsConfig, TenancyConfig
from l2m.config.loader import read_yaml_text
from l2m.errors import ConfigError, L2mError
from l2m.semantics.exphist import SCHEMA_MAX, SCHEMA_MIN
from l2m.semantics.values import (
    LABEL_NAME_RE,
    MAX_TIMESTAMP_MS,
    METRIC_NAME_RE,
    MIN_TIMESTAMP_MS,
    parse_timestamp,
    string_form,
)
from l2m.semantics.windows import window_start
from l2m.yamlio import yamlsafe
from l2m.yamlio.suggest import closest

# A value a sample may carry: a double, or the text of a non-finite one (l2m.engine.partials).
Value = float | str
NONFINITE_TEXTS = ("+Inf", "-Inf", "NaN")

# Relative times: a sign, then one or more number+unit parts (`+90s`, `-1h`, `+1m30s`).
_RELATIVE = re.compile(r"([+-])((?:[0-9]+(?:ms|s|m|h|d))+)")
_PART = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1_000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

FILE_KEYS = ("rules", "config", "start", "text_fields", "default_fields", "timestamp_field",
             "limits", "tenancy", "tests")
# The job settings a test file may give (l2m.config.job.JobConfig's names and decoding).
SETTING_KEYS = ("text_fields", "default_fields", "timestamp_field", "limits", "tenancy")
CASE_KEYS = ("name", "start", "logs", "input", "expect", "exhaustive")
SERIES_KEYS = ("series", "name", "labels", "account", "window", "timestamp", "value",
               "buckets", "count", "sum", "absent", "native")
# A native histogram sample's expectation (``native:``): its fields, and observations by value
# range (``buckets``) or by bucket index (``positive``, ``negative``).
NATIVE_KEYS = ("count", "sum", "zero_count", "schema", "buckets", "positive", "negative")
# Counts of the run's summary (l2m.batch.summary.BackfillSummary) an expectation may name.
RUN_COUNTS = ("logs", "malformed", "no_timestamp", "blank_lines", "samples")
RULE_COUNTS = ("matches", "cut", "refused")
LIMITS = ("rule", "metric", "account")


@dataclass(frozen=True)
class Where:
    """Where something was written: the test file as named and a 1-based line."""

    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class ValueRange:
    """Observations in (``low``, ``high``] as written in a ``native: buckets:`` key: ``10``
    or ``<= 10`` (low None: from the lowest), ``> 10`` (high None: to the highest, +Inf
    included), ``(5, 10]``."""

    written: str
    low: float | None
    high: float | None


@dataclass(frozen=True)
class NativeExpectation:
    """What a native histogram sample must hold (``native:``): each field given, the
    observations in each value range, and the populated buckets of a side (index → count)."""

    count: int | None = None  # observations: a whole number, as zero_count and bucket counts
    sum: Value | None = None
    zero_count: int | None = None
    schema: int | None = None
    ranges: tuple[tuple[ValueRange, int], ...] = ()
    positive: tuple[tuple[int, int], ...] | None = None
    negative: tuple[tuple[int, int], ...] | None = None


@dataclass(frozen=True)
class SeriesExpectation:
    """What one series must (or must not) hold: ``value`` (a counter's, or a gauge's in
    ``window``), ``buckets``/``count``/``sum`` (a histogram's family: ``name`` is its base
    name), ``native`` (a native histogram sample), or ``absent``. ``window``: a gauge
    window's start (epoch ms); ``account``: the samples' account if ``account_given``."""

    at: Where
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    account: str | None = None
    account_given: bool = False
    window: int | None = None
    timestamp: int | None = None
    value: Value | None = None
    buckets: tuple[tuple[float, str, Value], ...] | None = None  # (bound, as written, want)
    count: Value | None = None
    sum: Value | None = None
    absent: bool = False
    native: NativeExpectation | None = None
    window_at: Where | None = None  # the line window: is written on

    @property
    def histogram(self) -> bool:
        return self.buckets is not None or self.count is not None or self.sum is not None


@dataclass(frozen=True)
class CountExpectation:
    """A count of the run's summary: ``what`` is one of :data:`RUN_COUNTS` or, with ``rule``,
    :data:`RULE_COUNTS` (``refused`` optionally for one ``limit``)."""

    at: Where
    what: str
    want: int
    rule: str | None = None
    limit: str | None = None


Expectation = SeriesExpectation | CountExpectation


@dataclass(frozen=True)
class TestCase:
    """One case: its input lines and what the rules must make of them."""

    __test__ = False  # not a pytest class, whatever imports it

    name: str
    at: Where
    lines: tuple[bytes, ...]
    expectations: tuple[Expectation, ...]
    exhaustive: bool = False


@dataclass(frozen=True)
class TestFile:
    """A loaded test file: the rule paths, the job settings and the cases."""

    __test__ = False

    path: str
    rules: tuple[str, ...]
    config: JobConfig
    cases: tuple[TestCase, ...]
    # ``file:line:column`` of the rules: value, and each rule path as written (rule-file
    # problems are reported there, in the test file's words).
    rules_at: str = ""
    rules_written: tuple[str, ...] = ()


def find_test_files(paths: Iterable[str]) -> list[str]:
    """The test files named: files as given, directories searched recursively for
    ``*.test.yaml``/``*.test.yml`` (sorted); :class:`ConfigError` for a path that does not
    exist or a directory without one."""
    from l2m.rules.loader import TEST_SUFFIXES

    found: list[str] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(str(p) for p in path.rglob("*")
                            if p.name.endswith(TEST_SUFFIXES) and p.is_file())
            if not inside:
                raise ConfigError(f"{raw}: no *.test.yaml or *.test.yml files under this "
                                  "directory")
            found.extend(inside)
        elif path.exists():
            found.append(str(raw))
        else:
            raise ConfigError(f"{raw}: no such file or directory")
    # A file named twice (``x.test.yaml ./x.test.yaml``, or a file and its folder) runs once.
    seen: set[Path] = set()
    unique = []
    for name in found:
        if (real := Path(name).resolve()) not in seen:
            seen.add(real)
            unique.append(name)
    return unique


def load_test_file(path: str) -> TestFile:
    """Read and check one test file (module docstring)."""
    text = read_yaml_text(Path(path), path)
    return _Reader(path, text).test_file()


def relative_ms(text: str) -> int | None:
    """``+90s``, ``-1h``, ``+1m30s``, ``+250ms`` → signed milliseconds; None if ``text`` is
    not written so."""
    match = _RELATIVE.fullmatch(text)
    if match is None:
        return None
    # A part longer than any usable time is capped (int() refuses 4,300+ digits): the caller
    # refuses the time as outside years 1-9999.
    total = sum(int(n[:20]) * _UNIT_MS[u] for n, u in _PART.findall(match.group(2)))
    return -total if match.group(1) == "-" else total


def value_text(value: Value) -> str:
    """A value as failures show it: whole numbers without a fraction, other doubles in their
    shortest round-trip form, ``+Inf``/``-Inf``/``NaN`` as written."""
    if isinstance(value, str):
        return value
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


_TIMESTAMP_TAG = "tag:yaml.org,2002:timestamp"
_JSON_NUMBER = re.compile(r"[-+]?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][-+]?[0-9]+)?")
_INTEGER = re.compile(r"[-+]?[0-9]+")


def _described(value: Any) -> str:
    """:func:`~l2m.config.decode.describe`, with null said once."""
    return "null" if value is None else describe(value)


class _Reader:
    """One test file's node tree → its records; the first problem raised, positioned."""

    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.base = Path(path).resolve().parent
        self.text = text
        self.constructor = yamlsafe.SafeLoader("")

    # --- problems ------------------------------------------------------------------------

    def fail(self, node: yaml.Node, key: str, problem: str) -> ConfigError:
        mark = node.start_mark
        where = f"{self.path}:{mark.line + 1}:{mark.column + 1}"
        return ConfigError(f"{where}: {key}: {problem}" if key else f"{where}: {problem}")

    def where(self, node: yaml.Node) -> Where:
        return Where(self.path, node.start_mark.line + 1)

    # --- the tree ------------------------------------------------------------------------

    def compose(self) -> yaml.Node | None:
        try:
            root = yamlsafe.compose(self.text)
        except yaml.YAMLError as exc:
            line, column, problem = yamlsafe.position(exc, self.text)
            raise ConfigError(f"{self.path}:{line}:{column}: invalid YAML: {problem}") from None
        deep = yamlsafe.too_deep(root)
        if deep is not None:
            raise self.fail(deep, "", f"YAML nesting is deeper than {yamlsafe.MAX_DEPTH} levels")
        for key, kind in yamlsafe.complex_keys(root):
            raise self.fail(key, "", f"a mapping key must be a plain value, not a {kind}")
        for code, mark, problem in yamlsafe.tag_problems(root):
            what = "an explicit tag or merge key l2m does not read (only plain YAML values)" \
                if code == "YAML_UNKNOWN_TAG" else problem
            raise ConfigError(f"{self.path}:{mark.line + 1}:{mark.column + 1}: {what}")
        return root

    def mapping(self, node: yaml.Node, key: str, allowed: Sequence[str]
                ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """A mapping's entries by key; unknown and repeated keys refused at their line."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, f"expected a mapping, got {self.kind(node)}")
        entries: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            name = _key(key_node)
            inner = f"{key}.{name}" if key else name
            if name in entries:
                raise self.fail(key_node, inner, "appears twice (first at line "
                                f"{entries[name][0].start_mark.line + 1})")
            if name not in allowed:
                near = closest(name, allowed)
                hint = f"did you mean '{near}'?" if near else f"allowed: {', '.join(allowed)}"
                raise self.fail(key_node, key, f"unknown key '{shown(name)}' ({hint})")
            entries[name] = (key_node, value_node)
        return entries

    def plain(self, node: yaml.Node) -> Any:
        """A node's plain value; a YAML timestamp stays the text it was written as."""
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _TIMESTAMP_TAG:
                return node.value
            return self.constructor.construct_object(node)
        if isinstance(node, yaml.SequenceNode):
            return [self.plain(n) for n in node.value]
        return {_key(k): self.plain(v) for k, v in node.value}

    def json_value(self, node: yaml.Node) -> Any:
        """A log's value as a reader takes the JSON it stands for, not YAML 1.1's: a plain
        scalar is a number only when written as a JSON number (``0x1F4``, ``010``, ``1_000``
        and ``10:00`` stay those strings), true/false only as ``true``/``false``, null as
        ``null``, ``~`` or nothing; anything quoted is a string."""
        if isinstance(node, yaml.SequenceNode):
            return [self.json_value(n) for n in node.value]
        if isinstance(node, yaml.MappingNode):
            return {_key(k): self.json_value(v) for k, v in node.value}
        text = str(node.value)
        if node.style:  # quoted or a block: a string ('' or None: plain)
            return text
        if text in ("true", "false"):
            return text == "true"
        if text in ("null", "~", ""):
            return None
        if _JSON_NUMBER.fullmatch(text):
            try:
                return int(text) if _INTEGER.fullmatch(text) else float(text)
            except ValueError:  # thousands of digits: beyond any double
                return math.inf
        return text

    @staticmethod
    def kind(node: yaml.Node) -> str:
        if isinstance(node, yaml.MappingNode):
            return "a mapping"
        if isinstance(node, yaml.SequenceNode):
            return "a list"
        return "a value" if node.value else "nothing"

    def items(self, node: yaml.Node, key: str) -> list[yaml.Node]:
        if not isinstance(node, yaml.SequenceNode):
            raise self.fail(node, key, f"expected a list, got {self.kind(node)}")
        return list(node.value)

    def string(self, node: yaml.Node, key: str) -> str:
        value = self.plain(node)
        if not isinstance(value, str) or not value:
            raise self.fail(node, key, f"expected a non-empty string, got {_described(value)}")
        return value

    def strings(self, node: yaml.Node, key: str) -> tuple[str, ...]:
        nodes = self.items(node, key) if isinstance(node, yaml.SequenceNode) else [node]
        if not nodes:
            raise self.fail(node, key, "expected at least one")
        return tuple(self.string(n, key) for n in nodes)

    def boolean(self, node: yaml.Node, key: str) -> bool:
        value = self.plain(node)
        if not isinstance(value, bool):
            raise self.fail(node, key, f"expected true or false, got {_described(value)}")
        return value

    def count(self, node: yaml.Node, key: str) -> int:
        value = self.plain(node)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.fail(node, key, f"expected a whole number (0 or more), got "
                                       f"{_described(value)}")
        return value

    def number(self, node: yaml.Node, key: str) -> Value:
        """A sample value as written: a number, or ``+Inf``, ``-Inf``, ``NaN`` (also YAML's
        ``.inf``, ``-.inf``, ``.nan``)."""
        value = self.plain(node)
        if isinstance(value, str) and value in NONFINITE_TEXTS:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(node, key, f"expected a number, +Inf, -Inf or NaN, got "
                                       f"{_described(value)}")
        number = float(value)
        if math.isnan(number):
            return "NaN"
        if math.isinf(number):
            return "+Inf" if number > 0 else "-Inf"
        return number

    def resolved(self, node: yaml.Node, key: str) -> str:
        """A path written relative to the test file's folder, made absolute."""
        return self.path_of(self.string(node, key))

    def path_of(self, written: str) -> str:
        """``written``, a path relative to the test file's folder (or absolute), made
        absolute."""
        return str(written if Path(written).is_absolute() else (self.base / written).resolve())

    # --- times ---------------------------------------------------------------------------

    def absolute(self, node: yaml.Node, key: str) -> int:
        value = self.plain(node)
        if isinstance(value, int) and not re.fullmatch(r"-?[0-9]+", str(node.value)):
            value = node.value  # YAML 1.1's `10:00` (600) or `0x10`: not epoch milliseconds
        ms = parse_timestamp(value) if isinstance(value, int | str) \
            and not isinstance(value, bool) else None
        if ms is None:
            raise self.fail(node, key, f"expected a time: ISO-8601 with Z or an offset "
                                       f"(2026-11-22T10:00:00Z) or epoch milliseconds, got "
                                       f"{_described(value)}")
        return ms

    def time(self, node: yaml.Node, key: str, start: int | None) -> int:
        """An absolute time, or one relative to ``start`` (``+90s``)."""
        text = node.value if isinstance(node, yaml.ScalarNode) else ""
        if isinstance(text, str) and text[:1] in ("+", "-"):
            offset = relative_ms(text.strip())
            if offset is None:
                raise self.fail(node, key, f"'{text}' is not a relative time: a sign, then "
                                           "numbers with units ms, s, m, h, d (+90s, -1h, "
                                           "+1m30s)")
            if start is None:
                raise self.fail(node, key, f"a relative time ({text}) needs a start: give "
                                           "start: at the top of the file or in the case")
            if not MIN_TIMESTAMP_MS <= start + offset <= MAX_TIMESTAMP_MS:
                raise self.fail(node, key, f"'{text}' from the start is outside years 1-9999")
            return start + offset
        return self.absolute(node, key)

    # --- the document --------------------------------------------------------------------

    def test_file(self) -> TestFile:
        try:
            root = self.compose()
            if root is None:
                raise ConfigError(f"{self.path}:1:1: the file is empty (expected rules: and "
                                  "tests:)")
            top = self.mapping(root, "", FILE_KEYS)
            for required in ("rules", "tests"):
                if required not in top:
                    raise self.fail(root, "", f"missing required key '{required}'")
            rules_node = top["rules"][1]
            written = self.strings(rules_node, "rules")
            rules = tuple(self.path_of(p) for p in written)
            mark = rules_node.start_mark
            config = self.job_config(root, top)
            start = self.absolute(top["start"][1], "start") if "start" in top else None
            cases_node = top["tests"][1]
            nodes = self.items(cases_node, "tests")
            if not nodes:
                raise self.fail(cases_node, "tests", "expected at least one test case")
            cases = [self.case(n, f"tests[{i}]", start, config.timestamp_field)
                     for i, n in enumerate(nodes)]
            names: dict[str, TestCase] = {}
            for case in cases:
                if case.name in names:
                    raise ConfigError(f"{case.at}: name: '{case.name}' is already the name of "
                                      f"the case at line {names[case.name].at.line}")
                names[case.name] = case
            return TestFile(self.path, rules, config, tuple(cases),
                            f"{self.path}:{mark.line + 1}:{mark.column + 1}", written)
        finally:
            self.constructor.dispose()

    def job_config(self, root: yaml.Node, top: dict[str, tuple[yaml.Node, yaml.Node]]
                   ) -> JobConfig:
        """``config:``'s job settings (or the defaults), the keys of :data:`SETTING_KEYS`
        written here replacing them — decoded as the job file decodes them."""
        base = JobConfig()
        if "config" in top:
            from l2m.config.loader import load_config

            try:
                base = load_config(self.resolved(top["config"][1], "config"))
            except L2mError as exc:
                raise self.fail(top["config"][1], "config", exc.message) from None
        given = {k: v for k, v in top.items() if k in SETTING_KEYS}
        if not given:
            return base
        data = {k: self.plain(v) for k, (_, v) in given.items()}
        lines: dict[tuple[str, ...], int] = {
            (k,): key.start_mark.line + 1 for k, (key, _) in given.items()}
        for name, (_, value) in given.items():
            if isinstance(value, yaml.MappingNode):
                for key, _ in value.value:
                    lines[(name, _key(key))] = key.start_mark.line + 1
        decoder = Decoder(_Problems(self.path, lines))
        decoded: _Settings = decoder.record(_Settings, data)
        values: dict[str, Any] = {k: getattr(decoded, k) for k in data
                                  if k not in ("limits", "tenancy")}
        for section in ("limits", "tenancy"):
            if section in data:
                written = data[section] or {}
                values[section] = replace(getattr(base, section), **{
                    f.name: getattr(getattr(decoded, section), f.name)
                    for f in dataclasses.fields(getattr(decoded, section))
                    if f.name in written})
        try:
            return replace(base, **values)
        except ConfigError as exc:
            raise ConfigError(f"{self.path}: {exc.message}") from None

    def case(self, node: yaml.Node, key: str, start: int | None, ts_field: str) -> TestCase:
        entries = self.mapping(node, key, CASE_KEYS)
        if "name" not in entries:
            raise self.fail(node, key, "missing required key 'name'")
        name = self.string(entries["name"][1], f"{key}.name")
        if "start" in entries:  # relative: to the file's start
            start = self.time(entries["start"][1], f"{key}.start", start)
        if "logs" not in entries and "input" not in entries:
            raise self.fail(node, key, "give the case's input: logs (a list) and/or input "
                                       "(JSON-lines files)")
        lines: list[bytes] = []
        if "logs" in entries:
            for i, log in enumerate(self.items(entries["logs"][1], f"{key}.logs")):
                lines.append(self.log(log, f"{key}.logs[{i}]", start, ts_field))
        if "input" in entries:
            from l2m.batch.local import file_lines

            value = entries["input"][1]
            paths = [self.path_of(p) for p in self.strings(value, f"{key}.input")]
            try:
                lines.extend(file_lines(paths))
            except L2mError as exc:
                raise self.fail(value, f"{key}.input", exc.message) from None
        expectations: list[Expectation] = []
        if "expect" in entries:
            for i, item in enumerate(self.items(entries["expect"][1], f"{key}.expect")):
                expectations.append(self.expectation(item, f"{key}.expect[{i}]", start))
        exhaustive = self.boolean(entries["exhaustive"][1], f"{key}.exhaustive") \
            if "exhaustive" in entries else False
        if not expectations and not exhaustive:
            raise self.fail(node, key, "expected at least one expectation (expect:), or "
                                       "exhaustive: true for a case that must give no sample")
        return TestCase(name, self.where(node), tuple(lines), tuple(expectations), exhaustive)

    def log(self, node: yaml.Node, key: str, start: int | None, ts_field: str) -> bytes:
        """One input line: a string as it is (malformed lines can be written), a mapping as
        its JSON with a relative event time resolved (to epoch milliseconds)."""
        if isinstance(node, yaml.ScalarNode):
            value = self.plain(node)
            if not isinstance(value, str):
                raise self.fail(node, key, f"expected a log (a mapping) or a line (a string), "
                                           f"got {_described(value)}")
            if "\n" in value or "\r" in value:  # in a file, each would start another log
                raise self.fail(node, key, "one line per log: split it into several strings")
            return value.encode()
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, key, "expected a log (a mapping) or a line (a string), got "
                                       "a list")
        doc = self.json_value(node)
        ts_node = self.field_node(node, ts_field)
        # The text as written, not its YAML value: `+90` (an integer to YAML) is a relative
        # time missing its unit, not the epoch millisecond 90.
        if isinstance(ts_node, yaml.ScalarNode) and str(ts_node.value)[:1] in ("+", "-"):
            _place(doc, ts_field, self.time(ts_node, f"{key}.{ts_field}", start))
        try:
            return json.dumps(doc, ensure_ascii=False, allow_nan=False,
                              separators=(",", ":")).encode()
        except ValueError:
            raise self.fail(node, key, "holds a number beyond a double's range, which JSON "
                                       "cannot write; give the line as a string") from None

    def field_node(self, node: yaml.MappingNode, path: str) -> yaml.Node | None:
        """The node of a log field as :func:`l2m.semantics.values.lookup` finds it."""
        def child(mapping: yaml.Node, name: str) -> yaml.Node | None:
            if not isinstance(mapping, yaml.MappingNode):
                return None
            found = [v for k, v in mapping.value if _key(k) == name]
            return found[-1] if found else None

        top = child(node, path)
        if top is not None and self.json_value(top) is not None:
            return top
        current: yaml.Node | None = node
        for part in path.split("."):
            current = child(current, part) if current is not None else None
        return current

    def expectation(self, node: yaml.Node, key: str, start: int | None) -> Expectation:
        if isinstance(node, yaml.MappingNode):
            keys = {_key(k) for k, _ in node.value}
            counted = keys & {*RUN_COUNTS, *RULE_COUNTS}
            if counted and not keys & {"series", "name"}:
                return self.count_expectation(node, key, sorted(counted))
        entries = self.mapping(node, key, SERIES_KEYS)
        name, labels = self.series(node, entries, key)
        kinds = [k for k in ("value", "buckets", "absent", "native") if k in entries]
        if "count" in entries or "sum" in entries:
            kinds = [k for k in kinds if k != "buckets"] + ["buckets"]
        if len(kinds) != 1:
            raise self.fail(node, key, "give one of value:, buckets: (and/or count:, sum:), "
                                       "native: or absent: true")
        values: dict[str, Any] = {}
        for part in ("value", "count", "sum"):
            if part in entries:
                values[part] = self.number(entries[part][1], f"{key}.{part}")
        if "buckets" in entries:
            values["buckets"] = self.buckets(entries["buckets"][1], f"{key}.buckets")
        elif "count" in entries or "sum" in entries:
            values["buckets"] = ()
        if "native" in entries:
            values["native"] = self.native(entries["native"][1], f"{key}.native")
        if "absent" in entries:
            if not self.boolean(entries["absent"][1], f"{key}.absent"):
                raise self.fail(entries["absent"][1], f"{key}.absent",
                                "absent: false checks nothing; give value: instead")
            values["absent"] = True
        if "account" in entries:
            account = self.plain(entries["account"][1])
            if account is not None and (not isinstance(account, str) or not account):
                raise self.fail(entries["account"][1], f"{key}.account",
                                f"expected an account name or null, got {_described(account)}")
            values.update(account=account, account_given=True)
        if "window" in entries:
            values["window_at"] = self.where(entries["window"][0])
            values["window"] = window_start(self.time(entries["window"][1], f"{key}.window",
                                                      start))
        if "timestamp" in entries:
            values["timestamp"] = self.time(entries["timestamp"][1], f"{key}.timestamp", start)
        return SeriesExpectation(self.where(node), name, labels, **values)

    def series(self, node: yaml.Node, entries: dict[str, tuple[yaml.Node, yaml.Node]],
               key: str) -> tuple[str, tuple[tuple[str, str], ...]]:
        """An expectation's series: ``series: 'name{label="value"}'`` or ``name:`` with
        ``labels:``."""
        if ("series" in entries) == ("name" in entries):
            raise self.fail(node, key, "name the series: series: 'name{label=\"value\"}', or "
                                       "name: (and labels:) — one of the two; or a count "
                                       f"({', '.join((*RUN_COUNTS, *RULE_COUNTS))})")
        if "series" in entries:
            if "labels" in entries:
                raise self.fail(entries["labels"][0], key, "labels go inside series: (or use "
                                                           "name: with labels:)")
            value_node = entries["series"][1]
            try:
                name, labels = parse_series(self.string(value_node, f"{key}.series"))
            except ValueError as exc:
                raise self.fail(value_node, f"{key}.series", str(exc)) from None
        else:
            name = self.string(entries["name"][1], f"{key}.name")
            labels = self.labels(entries["labels"][1], f"{key}.labels") \
                if "labels" in entries else ()
            if not METRIC_NAME_RE.fullmatch(name):
                raise self.fail(entries["name"][1], f"{key}.name",
                                f"'{name}' is not a metric name [a-zA-Z_:][a-zA-Z0-9_:]*")
        return name, labels

    def count_expectation(self, node: yaml.MappingNode, key: str, counted: list[str]
                          ) -> CountExpectation:
        if len(counted) > 1:
            raise self.fail(node, key, f"one count per expectation, got {', '.join(counted)}")
        what = counted[0]
        allowed = (what, "rule", "limit") if what in RULE_COUNTS else (what,)
        entries = self.mapping(node, key, allowed)
        want = self.count(entries[what][1], f"{key}.{what}")
        rule = limit = None
        if what in RULE_COUNTS:
            if "rule" not in entries:
                raise self.fail(node, key, f"{what}: counts per rule: give rule: (its id)")
            rule = self.string(entries["rule"][1], f"{key}.rule")
            if "limit" in entries:
                if what != "refused":
                    raise self.fail(entries["limit"][0], key, "limit: goes with refused:")
                limit = self.string(entries["limit"][1], f"{key}.limit")
                if limit not in LIMITS:
                    raise self.fail(entries["limit"][1], f"{key}.limit",
                                    f"expected {', '.join(LIMITS)}, got '{limit}'")
        return CountExpectation(self.where(node), what, want, rule, limit)

    def labels(self, node: yaml.Node, key: str) -> tuple[tuple[str, str], ...]:
        entries = self.mapping(node, key, _Anything())
        labels = []
        for name, (name_node, value_node) in entries.items():
            if not LABEL_NAME_RE.fullmatch(name):
                raise self.fail(name_node, key, f"'{shown(name)}' is not a label name")
            value = string_form(self.json_value(value_node))
            if not value:
                raise self.fail(value_node, f"{key}.{name}",
                                "expected a non-empty value (a sample has no empty label: "
                                "leave the label out)")
            labels.append((name, value))
        return tuple(sorted(labels))

    def native(self, node: yaml.Node, key: str) -> NativeExpectation:
        """``native:``: a native histogram sample's count, sum, zero_count, schema, counts by
        value range (``buckets``) and populated buckets by index (``positive``,
        ``negative``); at least one."""
        entries = self.mapping(node, key, NATIVE_KEYS)
        if not entries:
            raise self.fail(node, key, f"expected at least one of {', '.join(NATIVE_KEYS)}")
        values: dict[str, Any] = {}
        for part in ("count", "zero_count"):
            if part in entries:
                values[part] = self.count(entries[part][1], f"{key}.{part}")
        if "sum" in entries:
            values["sum"] = self.number(entries["sum"][1], f"{key}.sum")
        if "schema" in entries:
            schema = self.plain(entries["schema"][1])
            if isinstance(schema, bool) or not isinstance(schema, int) or \
                    not SCHEMA_MIN <= schema <= SCHEMA_MAX:
                raise self.fail(entries["schema"][1], f"{key}.schema",
                                f"expected a whole number from {SCHEMA_MIN} to {SCHEMA_MAX}, "
                                f"got {_described(schema)}")
            values["schema"] = schema
        if "buckets" in entries:
            values["ranges"] = self.ranges(entries["buckets"][1], f"{key}.buckets")
        for side in ("positive", "negative"):
            if side in entries:
                values[side] = self.indexes(entries[side][1], f"{key}.{side}")
        return NativeExpectation(**values)

    def ranges(self, node: yaml.Node, key: str) -> tuple[tuple[ValueRange, int], ...]:
        entries = self.mapping(node, key, _Anything())
        out = []
        for written, (range_node, value_node) in entries.items():
            found = value_range(written)
            if found is None:
                raise self.fail(range_node, key, f"'{_written(written)}' is not a value range: "
                                                 "10 or '<= 10', '> 10', '(5, 10]'")
            out.append((found, self.count(value_node, f"{key}.{written}")))
        if not out:
            raise self.fail(node, key, "expected at least one value range (range: count)")
        return tuple(out)

    def indexes(self, node: yaml.Node, key: str) -> tuple[tuple[int, int], ...]:
        entries = self.mapping(node, key, _Anything())
        out = []
        for written, (index_node, value_node) in entries.items():
            if not _INTEGER.fullmatch(written) or len(written) > 12:
                raise self.fail(index_node, key, f"'{_written(written)}' is not a bucket index "
                                                 "(a whole number)")
            want = self.count(value_node, f"{key}.{written}")
            if want == 0:
                raise self.fail(value_node, f"{key}.{written}", "list populated buckets only "
                                                                "(count 1 or more)")
            out.append((int(written), want))
        return tuple(sorted(out))

    def buckets(self, node: yaml.Node, key: str) -> tuple[tuple[float, str, Value], ...]:
        entries = self.mapping(node, key, _Anything())
        bounds = []
        for written, (bound_node, value_node) in entries.items():
            bound = bound_value(written)
            if bound is None:
                raise self.fail(bound_node, key, f"'{shown(written)}' is not a bucket bound "
                                                 "(a number, or +Inf)")
            bounds.append((bound, written, self.number(value_node, f"{key}.{written}")))
        if not bounds:
            raise self.fail(node, key, "expected at least one bucket (bound: count)")
        return tuple(bounds)


def _written(text: str) -> str:
    """A key as a problem quotes it: as written when short and printable (``< 3``), else
    not shown (it may hold anything)."""
    return text if text.isprintable() and len(text) <= 40 else shown(text)


def _key(node: yaml.Node) -> str:
    """A mapping key as written (``1``, ``true``, ``0.10`` stay that text: a log's keys are
    JSON's strings); complex keys were refused when the file was composed."""
    return str(node.value)


class _Anything(tuple[str, ...]):
    """Any key is allowed (labels, bucket bounds)."""

    def __contains__(self, item: object) -> bool:
        return True


def bound_value(text: str) -> float | None:
    """A bucket bound as written (``0.5``, ``10``, ``+Inf``) → its double; None if not one."""
    if text in ("+Inf", "Inf", "inf", "+inf", ".inf", "+.inf"):
        return math.inf
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


_RANGE = re.compile(r"\s*(<=|>)\s*(\S+)\s*")
_BETWEEN = re.compile(r"\s*\(\s*([^,\s]+)\s*,\s*([^\]\s]+)\s*\]\s*")


def _range_bound(text: str) -> float | None:
    """A range's end: a number, or ±Inf (``+Inf``, ``-Inf``, YAML's ``.inf`` forms)."""
    if text in ("-Inf", "-inf", "-.inf"):
        return -math.inf
    return bound_value(text)


def value_range(text: str) -> ValueRange | None:
    """A ``native: buckets:`` key → the observations it counts: ``10`` or ``<= 10`` those at
    most 10, ``> 10`` those above, ``(5, 10]`` those above 5 and at most 10 (a native bucket's
    own shape); None if not written so."""
    plain = bound_value(text)
    if plain is not None:
        return ValueRange(text, None, plain)
    match = _RANGE.fullmatch(text)
    if match is not None:
        end = _range_bound(match.group(2))
        if end is None:
            return None
        return ValueRange(text, None, end) if match.group(1) == "<=" \
            else ValueRange(text, end, None)
    match = _BETWEEN.fullmatch(text)
    if match is not None:
        low, high = _range_bound(match.group(1)), _range_bound(match.group(2))
        if low is None or high is None or not low < high:
            return None
        return ValueRange(text, low, high)
    return None


def _place(doc: dict[str, Any], path: str, value: int) -> None:
    """Write ``value`` where :func:`~l2m.semantics.values.lookup` finds ``path``."""
    if doc.get(path) is not None or "." not in path:
        doc[path] = value
        return
    node = doc
    *parents, last = path.split(".")
    for part in parents:
        node = node[part]
    node[last] = value


_NAME = re.compile(r"\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*")
_LABEL = re.compile(r"\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*\"")
_ESCAPES = {"\\": "\\", '"': '"', "n": "\n"}
# A control character as failure lines print it (``\x1b``), so that they can be pasted back.
_HEX_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def parse_series(text: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``name{label="value", …}`` (Prometheus' notation: double-quoted values, ``\\\\``,
    ``\\"`` and ``\\n`` escaped; also ``\\xHH``, a control character as failures show it)
    → the name and the sorted labels; ValueError if not so."""
    match = _NAME.match(text)
    if match is None:
        raise ValueError(f"'{text}' is not a series: name{{label=\"value\", …}}")
    name, at = match.group(1), match.end()
    labels: dict[str, str] = {}
    if at < len(text) and text[at] == "{":
        at += 1
        while True:
            close = re.compile(r"\s*}\s*").match(text, at)
            if close is not None:
                at = close.end()
                break
            label = _LABEL.match(text, at)
            if label is None:
                raise ValueError(f"expected label=\"value\" at character {at + 1} of '{text}'")
            at = label.end()
            value = []
            while at < len(text) and text[at] != '"':
                if text[at] == "\\" and at + 1 < len(text) and text[at + 1] in _ESCAPES:
                    value.append(_ESCAPES[text[at + 1]])
                    at += 2
                elif (code := _HEX_ESCAPE.match(text, at)) is not None:
                    value.append(chr(int(code.group(1), 16)))
                    at = code.end()
                else:
                    value.append(text[at])
                    at += 1
            if at >= len(text):
                raise ValueError(f"unterminated label value in '{text}'")
            at += 1
            if label.group(1) in labels:
                raise ValueError(f"label '{label.group(1)}' appears twice in '{text}'")
            if not value:
                raise ValueError(f"label '{label.group(1)}' is empty in '{text}' (a sample has "
                                 "no empty label: leave it out)")
            labels[label.group(1)] = "".join(value)
            comma = re.compile(r"\s*,").match(text, at)
            if comma is not None:
                at = comma.end()
            elif not re.compile(r"\s*}").match(text, at):
                raise ValueError(f"expected , or }} at character {at + 1} of '{text}'")
    if text[at:].strip():
        raise ValueError(f"unexpected text after the series at character {at + 1} of '{text}'")
    return name, tuple(sorted(labels.items()))


@dataclass(frozen=True)
class _Settings:
    """The job settings a test file may give, under the job file's names and decoding."""

    text_fields: tuple[str, ...] = ()
    default_fields: tuple[str, ...] = ()
    timestamp_field: str = ""
    limits: LimitsConfig = field(default_factory=LimitsConfig)
    tenancy: TenancyConfig = field(default_factory=TenancyConfig)


class _Problems:
    """The decoder's problems as ``file:line: key: problem`` (l2m.config.decode.Fail)."""

    def __init__(self, path: str, lines: Mapping[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def __call__(self, at: tuple[str, ...], problem: str, *,
                 line_at: tuple[str, ...] | None = None, hide_key: bool = False
                 ) -> ConfigError:
        key = line_at or at
        line = next((self.lines[key[:n]] for n in range(len(key), 0, -1)
                     if key[:n] in self.lines), 1)
        name = ".".join(map(shown, at[:-1] if hide_key else at))
        return ConfigError(f"{self.path}:{line}: {name}: {problem}" if name
                           else f"{self.path}:{line}: {problem}")
