"""``l2m test``: rule unit tests (docs/rules.md, "Testing rules"), in the spirit of
``promtool test rules``.

Each test file's rules are loaded and planned once (one :class:`~l2m.engine.routing.Routing`
for its settings); each case's lines then go through :func:`l2m.batch.local.run_local` —
``l2m backfill``'s own stages, no JVM — and the sample lines it writes are compared with the
case's expectations.

Input: test files or directories (:func:`l2m.authoring.testfile.find_test_files`). Output: one
line per failed expectation (``file:line: 'case': series: want W, got G``, with the nearest
series when the one wanted is missing), a summary line ``N passed, M failed in X s``, an
optional JUnit XML file, and the exit code: 0 when every case passed, 1 otherwise (a test file
that does not load counts as an error)."""

from __future__ import annotations

import dataclasses
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

import orjson

from l2m.authoring.testfile import (
    CountExpectation,
    SeriesExpectation,
    TestCase,
    TestFile,
    Value,
    bound_value,
    find_test_files,
    load_test_file,
    value_text,
)
from l2m.batch.local import LocalRun, RunSettings, run_local
from l2m.batch.summary import BackfillSummary
from l2m.engine.routing import Routing
from l2m.errors import ConfigError, L2mError, Problem, RuleValidationError
from l2m.rules.model import Aggregation, Rule
from l2m.semantics.times import iso_text
from l2m.yamlio.suggest import closest

Sample = dict[str, Any]
HISTOGRAM_PARTS = ("_bucket", "_sum", "_count")
# Rule-file problems about a whole file or directory (l2m.rules.loader): no line of their own.
FILE_PROBLEMS = frozenset({"FILE_NOT_FOUND", "FILE_UNREADABLE", "NO_RULE_FILES",
                           "FILE_TOO_LARGE", "TENANT_ROOT", "RULE_OUTSIDE_ACCOUNT",
                           "INVALID_ACCOUNT"})
COUNTER_WINDOW = "a counter has no window: use timestamp:"


@dataclass
class CaseResult:
    """One case's outcome: its failure lines (none: passed) and its time."""

    case: TestCase
    failures: list[str]
    seconds: float


@dataclass
class FileResult:
    """One test file's outcome: its cases, or the error that kept it from loading (its
    lines, each ``file:line:column: …``, and their stable code)."""

    path: str
    cases: list[CaseResult] = field(default_factory=list)
    error: str | None = None
    code: str = ConfigError.code
    seconds: float = 0.0
    costs: list[str] = field(default_factory=list)  # each rule's cost (verbose)


def run_test_files(paths: Sequence[str], junit: str | None, only: str | None, verbose: bool,
                   out: TextIO) -> int:
    """Run the test files under ``paths``; the exit code (1 on any failure)."""
    started = time.monotonic()
    try:
        pattern = re.compile(only) if only is not None else None
    except re.error as exc:
        raise ConfigError(f"--run: '{only}' is not a regular expression: {exc}") from None
    results = [run_file(path, pattern, costs=verbose) for path in find_test_files(paths)]
    if pattern is not None and not any(r.cases or r.error is not None for r in results):
        # A typo in --run must not pass CI with nothing run.
        raise ConfigError(f"--run '{only}': no case of the test files has a name it matches")
    for result in results:
        report(result, verbose, out)
    passed = sum(1 for r in results for c in r.cases if not c.failures)
    failed = sum(1 for r in results for c in r.cases if c.failures)
    errors = sum(1 for r in results if r.error is not None)
    elapsed = time.monotonic() - started
    print(f"{passed} passed, {failed} failed" + (f", {errors} error(s)" if errors else "")
          + f" in {elapsed:.2f} s", file=out)
    if junit is not None:
        write_junit(results, junit)
    return 1 if failed or errors else 0


def run_file(path: str, only: re.Pattern[str] | None = None, costs: bool = False
             ) -> FileResult:
    """One test file: loaded, its rules planned once, each case (those ``only`` matches)
    run and checked. ``costs``: also each rule's cost, as backfill's summary reports it,
    over the logs of all the cases run (one more run)."""
    started = time.monotonic()
    result = FileResult(path)
    loaded = None
    try:
        loaded = load_test_file(path)
        routing = file_routing(loaded)
        refuse_counter_windows(loaded, routing.rules)
    except RuleValidationError as exc:
        assert loaded is not None  # the test file loaded: its rules did not
        result.error = "\n".join(rule_problem(loaded, p) for p in exc.errors)
        result.code = exc.code
    except L2mError as exc:
        result.error, result.code = exc.message, exc.code
    else:
        for case in loaded.cases:
            if only is not None and not only.search(case.name):
                continue
            case_started = time.monotonic()
            run = run_local(routing, case.lines)
            result.cases.append(CaseResult(case, check(case, run, routing),
                                           time.monotonic() - case_started))
        if costs:
            result.costs = rule_costs(routing, [c.case for c in result.cases])
    result.seconds = time.monotonic() - started
    return result


def file_routing(test: TestFile) -> Routing:
    """The routing ``l2m backfill`` would plan for the test file's rules and settings."""
    from l2m.rules.loader import load_rules

    cfg = test.config
    limits = cfg.limits.series
    ruleset = load_rules(test.rules, cfg.query_config, cfg.rule_tenancy, limits)
    return RunSettings(cfg.timestamp_field, cfg.limits.max_label_value_length,
                       limits).routing(ruleset.rules)


def rule_problem(test: TestFile, problem: Problem) -> str:
    """A rule file's problem at the test file's ``rules:``, its file named as written there
    (``rules: r.yaml`` → ``r.yaml:2:5: …``; a missing file without a line of its own)."""
    shown = problem.file
    for resolved, written in zip(test.rules, test.rules_written, strict=True):
        if shown == resolved:
            shown = written
            break
        if shown.startswith(resolved.rstrip("/") + "/"):
            shown = written.rstrip("/") + shown[len(resolved.rstrip("/")):]
            break
    if problem.code in FILE_PROBLEMS:
        return f"{test.rules_at}: rules: {shown}: {problem.message} [{problem.code}]"
    return f"{test.rules_at}: rules: {dataclasses.replace(problem, file=shown)}"


def refuse_counter_windows(test: TestFile, rules: Sequence[Rule]) -> None:
    """:class:`ConfigError` for a ``window:`` on a series only counters make: a counter's
    samples carry their newest event time, not a window's start, so the expectation could
    only pass vacuously (``absent:``) or fail wrongly (``value:``)."""
    kinds: dict[str, set[str]] = {}
    for rule in rules:
        names = [rule.name]
        if rule.aggregation == Aggregation.HISTOGRAM:
            names += [rule.name + part for part in HISTOGRAM_PARTS]
        for name in names:
            kinds.setdefault(name, set()).add(str(rule.kind))
    for case in test.cases:
        for exp in case.expectations:
            if isinstance(exp, SeriesExpectation) and exp.window is not None and \
                    kinds.get(exp.name) == {"counter"}:
                raise ConfigError(f"{exp.window_at or exp.at}: window: {COUNTER_WINDOW}")


# --- checking ------------------------------------------------------------------------------


def check(case: TestCase, run: LocalRun, routing: Routing) -> list[str]:
    """The failure lines of one case's expectations against the run's samples."""
    samples = [orjson.loads(line) for line in run.lines]
    by_name: dict[str, list[int]] = {}
    for i, sample in enumerate(samples):
        by_name.setdefault(sample["name"], []).append(i)
    checker = _Checker(case, samples, by_name, run.summary, {r.id for r in routing.rules})
    for expectation in case.expectations:
        if isinstance(expectation, CountExpectation):
            checker.count(expectation)
        elif checker.counter_window(expectation):
            pass  # a failure: the samples are a counter's, which have no window
        elif expectation.absent:
            checker.absent(expectation)
        elif expectation.histogram:
            checker.histogram(expectation)
        else:
            checker.value(expectation)
    if case.exhaustive:
        for i, sample in enumerate(samples):
            if i not in checker.covered:
                checker.failures.append(
                    f"{case.at}: '{shown_name(case.name)}': "
                    f"{series_text(sample['name'], sample['labels'])}"
                    f"{_window_note(sample)}: not expected (exhaustive), got "
                    f"{value_text(sample['value'])}")
    return checker.failures


def _window_note(sample: Sample) -> str:
    return f" @ {iso_text(sample['timestamp'])}" if sample["kind"] == "gauge" else ""


class _Checker:
    def __init__(self, case: TestCase, samples: list[Sample], by_name: dict[str, list[int]],
                 summary: BackfillSummary, rule_ids: set[str]) -> None:
        self.case = case
        self.samples = samples
        self.by_name = by_name
        self.summary = summary
        self.rule_ids = rule_ids
        self.failures: list[str] = []
        self.covered: set[int] = set()

    def fail(self, at: object, what: str, want: str, got: str) -> None:
        self.failures.append(f"{at}: '{shown_name(self.case.name)}': {what}: want {want}, "
                             f"got {got}")

    def select(self, exp: SeriesExpectation, name: str, labels: dict[str, str],
               drop: str | None = None) -> list[int]:
        """Indices of ``name``'s samples with exactly ``labels`` (``drop`` left out of the
        samples' labels first), in the expectation's account and window."""
        found = []
        for i in self.by_name.get(name, ()):
            sample = self.samples[i]
            have = sample["labels"]
            if drop is not None:
                have = {k: v for k, v in have.items() if k != drop}
            if have != labels:
                continue
            if exp.account_given and sample["account"] != exp.account:
                continue
            if exp.window is not None and sample["timestamp"] != exp.window:
                continue
            found.append(i)
        return found

    def family(self, exp: SeriesExpectation, labels: dict[str, str]) -> list[int]:
        """Indices of the samples of the histogram family ``exp`` names (``_bucket`` of every
        ``le``, ``_sum``, ``_count``) with ``labels``."""
        return [i for part in HISTOGRAM_PARTS for i in
                self.select(exp, exp.name + part, labels, "le" if part == "_bucket" else None)]

    def counter_window(self, exp: SeriesExpectation) -> bool:
        """Whether ``window:`` names a counter's series (rules of one name but both kinds
        pass :func:`refuse_counter_windows`): then one failure, never a vacuous pass."""
        if exp.window is None:
            return False
        labels = dict(exp.labels)
        for name in (exp.name, *(exp.name + part for part in HISTOGRAM_PARTS)):
            for i in self.by_name.get(name, ()):
                sample = self.samples[i]
                have = {k: v for k, v in sample["labels"].items()
                        if k != "le" or not name.endswith("_bucket")}
                if sample["kind"] == "counter" and have == labels and (
                        not exp.account_given or sample["account"] == exp.account):
                    self.failures.append(f"{exp.at}: '{shown_name(self.case.name)}': "
                                         f"{series_text(exp.name, labels)}: {COUNTER_WINDOW}")
                    return True
        return False

    def where(self, exp: SeriesExpectation, name: str, labels: dict[str, str]) -> str:
        text = series_text(name, labels)
        if exp.window is not None:
            text += f" @ {iso_text(exp.window)}"
        return text

    def missing(self, exp: SeriesExpectation, name: str, labels: dict[str, str],
                drop: str | None = None, shown: str | None = None) -> str:
        """``no such series``, with the nearest of the same metric and how it differs
        (``shown``: the metric's name as the expectation wrote it)."""
        candidates = []
        for i in self.by_name.get(name, ()):
            have = {k: v for k, v in self.samples[i]["labels"].items() if k != drop}
            candidates.append((len(_difference(labels, have)), series_text(shown or name, have),
                               have))
        if not candidates:
            if not self.by_name.get(name) and self.by_name.get(name + "_count"):
                return f"no series of that name; {name} is a histogram: give buckets:, " \
                       "count: or sum:"
            return "no series" + (" of that name" if not self.by_name.get(name) else "")
        _, text, have = min(candidates, key=lambda c: (c[0], c[1]))
        if have == labels:  # the series exists: not in this window or account
            return "no sample" + (" in that window" if exp.window is not None else "") + \
                (" for that account" if exp.account_given else "")
        return f"no such series; nearest {text} ({', '.join(_difference(labels, have))})"

    def one(self, exp: SeriesExpectation, name: str, labels: dict[str, str], want: Value,
            drop: str | None = None, shown_labels: dict[str, str] | None = None) -> None:
        what = self.where(exp, name, shown_labels if shown_labels is not None else labels)
        if drop is None:
            found = self.select(exp, name, labels)
        else:
            base = {k: v for k, v in labels.items() if k != drop}
            family = self.select(exp, name, base, drop)
            found = [i for i in family
                     if _same_bound(self.samples[i]["labels"].get(drop), labels[drop])]
        if not found:
            if drop is None:
                self.fail(exp.at, what, value_text(want), self.missing(exp, name, labels))
                return
            bounds = list(dict.fromkeys(self.samples[i]["labels"][drop] for i in family
                                        if drop in self.samples[i]["labels"]))
            self.fail(exp.at, what, value_text(want),
                      f"no bucket {drop}={_quoted(labels[drop])}; the rule's bounds: "
                      f"{', '.join(bounds)}" if bounds else self.missing(exp, name, base, drop))
            return
        if len(found) > 1:
            self.covered.update(found)  # reported here, not again as unexpected
            windows = ", ".join(iso_text(self.samples[i]["timestamp"]) for i in found)
            self.fail(exp.at, what, value_text(want),
                      f"{len(found)} samples (windows {windows}): give window:")
            return
        sample = self.samples[found[0]]
        self.covered.add(found[0])
        if not same_value(want, sample["value"]):
            self.fail(exp.at, what, value_text(want), value_text(sample["value"]))
        if exp.timestamp is not None and sample["timestamp"] != exp.timestamp:
            self.fail(exp.at, f"{what} timestamp", iso_text(exp.timestamp),
                      iso_text(sample["timestamp"]))

    def value(self, exp: SeriesExpectation) -> None:
        assert exp.value is not None
        self.one(exp, exp.name, dict(exp.labels), exp.value)

    def histogram(self, exp: SeriesExpectation) -> None:
        labels = dict(exp.labels)
        family = self.family(exp, labels)
        if not family:
            self.fail(exp.at, self.where(exp, exp.name, labels), "a histogram",
                      self.missing(exp, exp.name + "_count", labels, shown=exp.name))
            return
        windows = sorted({self.samples[i]["timestamp"] for i in family})
        if exp.window is None and len(windows) > 1 and \
                self.samples[family[0]]["kind"] == "gauge":
            self.fail(exp.at, self.where(exp, exp.name, labels), "one window",
                      f"{len(windows)} windows ({', '.join(map(iso_text, windows))}): give "
                      "window:")
            return
        self.covered.update(family)
        for _bound, written, want in exp.buckets or ():
            bucket = {**labels, "le": written}
            self.one(exp, exp.name + "_bucket", bucket, want, drop="le")
        if exp.count is not None:
            self.one(exp, exp.name + "_count", labels, exp.count)
        if exp.sum is not None:
            self.one(exp, exp.name + "_sum", labels, exp.sum)

    def absent(self, exp: SeriesExpectation) -> None:
        labels = dict(exp.labels)
        found = self.select(exp, exp.name, labels) + self.family(exp, labels)
        if found:
            first = self.samples[found[0]]
            self.fail(exp.at, self.where(exp, exp.name, labels), "absent",
                      f"{len(found)} sample(s): {series_text(first['name'], first['labels'])}"
                      f"{_window_note(first)} = {value_text(first['value'])}")

    def count(self, exp: CountExpectation) -> None:
        summary = self.summary
        if exp.rule is None:
            got = {"logs": summary.logs, "malformed": summary.malformed,
                   "no_timestamp": summary.no_timestamp, "blank_lines": summary.blank_lines,
                   "samples": summary.samples}[exp.what]
            what = {"logs": "logs read", "malformed": "malformed lines",
                    "no_timestamp": "logs without timestamp", "blank_lines": "blank lines",
                    "samples": "samples written"}[exp.what]
            if got != exp.want:
                self.fail(exp.at, what, str(exp.want), str(got))
            return
        if exp.rule not in self.rule_ids:
            near = closest_rule(exp.rule, self.rule_ids)
            self.fail(exp.at, f"{exp.what} of rule '{exp.rule}'", str(exp.want),
                      "no enabled rule of that id" + (f" (did you mean '{near}'?)"
                                                      if near else ""))
            return
        if exp.what == "matches":
            got, what = summary.matches.get(exp.rule, 0), f"logs matched by rule '{exp.rule}'"
        elif exp.what == "cut":
            got, what = summary.cut.get(exp.rule, 0), f"label values cut by rule '{exp.rule}'"
        else:
            refused = summary.refused_logs(exp.rule)
            got = refused.get(exp.limit, 0) if exp.limit else sum(refused.values())
            what = f"logs refused by rule '{exp.rule}'" + \
                (f" ({exp.limit} cap)" if exp.limit else "")
        if got != exp.want:
            self.fail(exp.at, what, str(exp.want), str(got))


def closest_rule(written: str, ids: set[str]) -> str | None:
    """The enabled rule id most like ``written``; in tenant mode (``account/id``) also the
    one whose own id it is or most resembles."""
    ordered = sorted(ids)
    near = closest(written, ordered)
    if near is None and "/" not in written:
        own = {rule_id.rpartition("/")[2]: rule_id for rule_id in reversed(ordered)}
        near = own.get(written) or own.get(closest(written, own) or "")
    return near


def _same_bound(le: str | None, written: str) -> bool:
    if le is None:
        return False
    have, want = bound_value(le), bound_value(written)
    return have is not None and have == want


def _difference(want: dict[str, str], have: dict[str, str]) -> list[str]:
    """How a series' labels differ from those wanted, label by label."""
    parts = []
    for name in sorted(want.keys() | have.keys()):
        if name not in have:
            parts.append(f"without {name}={_quoted(want[name])}")
        elif name not in want:
            parts.append(f"with {name}={_quoted(have[name])}")
        elif want[name] != have[name]:
            parts.append(f"{name}={_quoted(have[name])}, not {_quoted(want[name])}")
    return parts


def same_value(want: Value, got: Any) -> bool:
    """A sample's value equals the one expected: doubles exactly, ``+Inf``/``-Inf``/``NaN``
    as their text (a sample writes them so)."""
    if isinstance(want, str) or isinstance(got, str):
        want_text = want if isinstance(want, str) else None
        return want_text is not None and got == want_text
    return isinstance(got, int | float) and not isinstance(got, bool) and float(got) == want


def _quoted(value: str) -> str:
    r"""A label value between double quotes, as ``series:`` in a test file reads it back
    (:func:`~l2m.authoring.testfile.parse_series`): ``\\``, ``\"``, ``\n``, and other
    control characters as ``\xHH`` — a log's ESC must not drive the terminal."""
    return '"' + _LABEL_ESCAPE.sub(_escape, value) + '"'


# Lone surrogates too (a test file may write one): printing them would raise.
_LABEL_ESCAPE = re.compile(r'[\\"\x00-\x1f\x7f-\x9f\ud800-\udfff]')


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    if char in '\\"':
        return "\\" + char
    if char == "\n":
        return "\\n"
    return f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"


def shown_name(name: str) -> str:
    """A case's name as output shows it: control characters as in label values."""
    return _CONTROL.sub(_escape, name)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def series_text(name: str, labels: dict[str, str]) -> str:
    """``name{a="1",b="2"}``, labels sorted, values escaped as Prometheus writes them."""
    if not labels:
        return name
    return name + "{" + ",".join(f"{k}={_quoted(v)}" for k, v in sorted(labels.items())) + "}"


# --- reports -------------------------------------------------------------------------------


def report(result: FileResult, verbose: bool, out: TextIO) -> None:
    """A file's failure lines (and, ``verbose``, every case and each rule's cost)."""
    if result.error is not None:
        for line in result.error.splitlines():
            where = "" if line.startswith(result.path) else f"{result.path}: "
            # A message may quote the file's text (a case's name): shown as failures are.
            print(f"error [{result.code}]: {where}{shown_name(line)}", file=out)
        return
    if verbose:
        print(f"{result.path}: {len(result.cases)} case(s) in {result.seconds:.3f} s", file=out)
    for case in result.cases:
        if verbose:
            status = "FAIL" if case.failures else "ok  "
            print(f"  {status} {shown_name(case.case.name)} "
                  f"({case.seconds * 1000:.1f} ms)", file=out)
        for line in case.failures:
            print(line, file=out)
    if verbose and result.costs:
        print("  per rule, the logs of all its cases in one run:", file=out)
        for line in result.costs:
            print(f"    {line}", file=out)


def rule_costs(routing: Routing, cases: Sequence[TestCase]) -> list[str]:
    """Each rule's cost as backfill's summary reports it
    (:meth:`~l2m.batch.summary.BackfillSummary.render_rules`), over the cases' logs in one
    run."""
    whole = run_local(routing, [line for case in cases for line in case.lines])
    return whole.summary.render_rules()


_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def xml_text(text: str) -> str:
    """``text`` with the characters XML 1.0 cannot hold (control characters but tab and
    newlines, U+FFFE, U+FFFF, lone surrogates) written ``\\xHH``/``\\uHHHH``: a log's
    label value must not make the report unreadable to CI."""
    return _NOT_XML.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                        else f"\\u{ord(m.group()):04x}", text)


def write_junit(results: Sequence[FileResult], path: str) -> None:
    """JUnit XML: a ``testsuite`` per test file, a ``testcase`` per case, a ``failure``
    holding the case's failure lines; a file that did not load is one ``error``. Every name
    and text goes through :func:`xml_text`."""
    import xml.etree.ElementTree as ET

    root = ET.Element("testsuites", name="l2m test")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for result in results:
        failures = sum(1 for c in result.cases if c.failures)
        errors = 1 if result.error is not None else 0
        tests = len(result.cases) + errors
        suite = ET.SubElement(root, "testsuite", name=xml_text(result.path), tests=str(tests),
                              failures=str(failures), errors=str(errors),
                              time=f"{result.seconds:.3f}")
        totals["tests"] += tests
        totals["failures"] += failures
        totals["errors"] += errors
        if result.error is not None:
            case = ET.SubElement(suite, "testcase", name="(load)",
                                 classname=xml_text(result.path), time="0.000")
            error = ET.SubElement(case, "error", type=result.code,
                                  message=xml_text(result.error.splitlines()[0]))
            error.text = xml_text(result.error)
        for case_result in result.cases:
            case = ET.SubElement(suite, "testcase", name=xml_text(case_result.case.name),
                                 classname=xml_text(result.path),
                                 time=f"{case_result.seconds:.3f}")
            if case_result.failures:
                failure = ET.SubElement(case, "failure",
                                        message=xml_text(case_result.failures[0]))
                failure.text = xml_text("\n".join(case_result.failures))
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    try:
        ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)
    except OSError as exc:
        raise ConfigError(f"--junit {path}: cannot write: {exc.strerror or exc}") from None

