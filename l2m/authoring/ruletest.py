"""``l2m test``: rule unit tests (docs/rules.md, "Testing rules"), in the spirit of
``promtool test rules``.

Each test file's rules are loaded and planned once (one :class:`~l2m.engine.routing.Routing`
for its settings); each case's lines then go through :func:`l2m.batch.local.run_local` —
``l2m backfill``'s own stages, no JVM — and the sample lines it writes are compared with the
case's expectations.

Input: test files or directories (:func:`l2m.authoring.testfile.find_test_files`). Output: one
line per failed expectation (``file:line: 'case': series: want W, got G``, with the nearest
series when the one wanted is missing; a quantile sample passes within the relative error
bound of the schema its window's histogram was kept at — the rule's, or a coarser one past
``max_buckets`` — of the exact quantile, a native histogram's value ranges within what its
buckets allow), a summary line ``N passed, M failed in X s``, an
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
    NativeExpectation,
    SeriesExpectation,
    TestCase,
    TestFile,
    Value,
    ValueRange,
    bound_value,
    find_test_files,
    load_test_file,
    value_text,
)
from l2m.batch.local import LocalRun, RunSettings, run_local
from l2m.batch.summary import BackfillSummary
from l2m.engine.routing import Routing
from l2m.engine.samples import HISTOGRAM_KEY
from l2m.errors import ConfigError, L2mError, Problem, RuleValidationError
from l2m.rules.model import QUANTILE_LABEL, Aggregation, Rule
from l2m.semantics import exphist
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
            result.cases.append(CaseResult(case, check(case, run, routing,
                                                       file_settings(loaded)),
                                           time.monotonic() - case_started))
        if costs:
            result.costs = rule_costs(routing, [c.case for c in result.cases],
                                      file_settings(loaded))
    result.seconds = time.monotonic() - started
    return result


def file_settings(test: TestFile) -> RunSettings:
    """The run settings of the test file's job settings."""
    cfg = test.config
    return RunSettings(cfg.timestamp_field, cfg.limits.max_label_value_length,
                       cfg.limits.series)


def file_routing(test: TestFile) -> Routing:
    """The routing ``l2m backfill`` would plan for the test file's rules and settings."""
    from l2m.rules.loader import load_rules

    cfg = test.config
    ruleset = load_rules(test.rules, cfg.query_config, cfg.rule_tenancy, cfg.limits.series)
    return file_settings(test).routing(ruleset.rules)


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


def check(case: TestCase, run: LocalRun, routing: Routing,
          settings: RunSettings | None = None) -> list[str]:
    """The failure lines of one case's expectations against the run's samples (``routing``
    planned under ``settings``: default ones when None)."""
    samples = [orjson.loads(line) for line in run.lines]
    by_name: dict[str, list[int]] = {}
    for i, sample in enumerate(samples):
        by_name.setdefault(sample["name"], []).append(i)
    checker = _Checker(case, samples, by_name, run.summary, {r.id: r for r in routing.rules},
                       settings)
    for expectation in case.expectations:
        if isinstance(expectation, CountExpectation):
            checker.count(expectation)
        elif checker.counter_window(expectation):
            pass  # a failure: the samples are a counter's, which have no window
        elif expectation.absent:
            checker.absent(expectation)
        elif expectation.native is not None:
            checker.native(expectation, expectation.native)
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
                    f"{sample_text(sample)}")
    return checker.failures


def _window_note(sample: Sample) -> str:
    return f" @ {iso_text(sample['timestamp'])}" if sample["kind"] == "gauge" else ""


def is_native(sample: Sample) -> bool:
    """Whether a sample is a native histogram's (a ``histogram`` object, no ``value``)."""
    return HISTOGRAM_KEY in sample


def sample_text(sample: Sample) -> str:
    """A sample's value as failures show it; a native histogram's count and sum."""
    if is_native(sample):
        histogram = sample[HISTOGRAM_KEY]
        return f"a native histogram (count {value_text(float(histogram['count']))}, sum " \
               f"{value_text(histogram['sum'])})"
    return value_text(sample["value"])


class _Checker:
    def __init__(self, case: TestCase, samples: list[Sample], by_name: dict[str, list[int]],
                 summary: BackfillSummary, rules: dict[str, Rule],
                 settings: RunSettings | None = None) -> None:
        self.case = case
        self.settings = settings or RunSettings()
        self._kept: dict[tuple[str, str | None, str, int], int] | None = None
        self.samples = samples
        self.by_name = by_name
        self.summary = summary
        self.rules = rules
        self.rule_ids = set(rules)
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
        ``le``, ``_sum``, ``_count``) with ``labels``; a native histogram's sample of one of
        those names (another rule's) is none of them."""
        return [i for part in HISTOGRAM_PARTS for i in
                self.select(exp, exp.name + part, labels, "le" if part == "_bucket" else None)
                if not is_native(self.samples[i])]

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
        floats = [i for i in found if not is_native(self.samples[i])]
        if floats and len(floats) < len(found):  # another rule's native sample of that name
            found = floats
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
        if is_native(sample):
            self.fail(exp.at, what, value_text(want),
                      f"{sample_text(sample)}: give native: (count:, sum:, buckets:, …)")
            return
        bound = self.quantile_bound(sample)
        if bound is not None and not same_value(want, sample["value"]):
            # A coarser schema only widens the bound: the window's is looked up (one more
            # run of the case) only for an estimate outside the rule's.
            if not within(want, sample["value"], bound[0]):
                bound = self.kept_bound(sample)
            if not within(want, sample["value"], bound[0]):
                self.fail(exp.at, what, f"{value_text(want)} ({bound[2]})",
                          value_text(sample["value"]))
        elif not same_value(want, sample["value"]):
            self.fail(exp.at, what, value_text(want), value_text(sample["value"]))
        if exp.timestamp is not None and sample["timestamp"] != exp.timestamp:
            self.fail(exp.at, f"{what} timestamp", iso_text(exp.timestamp),
                      iso_text(sample["timestamp"]))

    def quantile_bound(self, sample: Sample) -> tuple[float, int, str] | None:
        """(relative error bound, schema, what the failure says of it) of a quantiles rule's
        sample at the rule's schema: its value is the estimate of the window's quantile from
        a native histogram; None for other samples."""
        rule = self.rules.get(sample.get("rule") or "")
        if rule is None or rule.aggregation != Aggregation.QUANTILES or \
                QUANTILE_LABEL not in sample["labels"] or rule.native_schema is None:
            return None
        bound = exphist.relative_error_bound(rule.native_schema)
        return bound, rule.native_schema, \
            f"within ±{bound:.2%}: the estimate of a schema {rule.native_schema} histogram"

    def kept_bound(self, sample: Sample) -> tuple[float, int, str]:
        """:meth:`quantile_bound` at the schema the sample's window histogram was kept at:
        lower than the rule's once its values populated more than ``max_buckets`` buckets."""
        rule = self.rules[sample["rule"]]
        assert rule.native_schema is not None
        labels = {k: v for k, v in sample["labels"].items() if k != QUANTILE_LABEL}
        schema = self.kept_schemas().get(
            (rule.id, sample.get("account"),
             orjson.dumps(labels, option=orjson.OPT_SORT_KEYS).decode(), sample["timestamp"]),
            rule.native_schema)
        bound = exphist.relative_error_bound(schema)
        if schema == rule.native_schema:
            return bound, schema, \
                f"within ±{bound:.2%}: the estimate of a schema {schema} histogram"
        return bound, schema, (f"within ±{bound:.2%}: the estimate of a schema {schema} "
                               f"histogram, the rule's schema {rule.native_schema} lowered "
                               f"past max_buckets {rule.native_max_buckets:,}")

    def kept_schemas(self) -> dict[tuple[str, str | None, str, int], int]:
        """(rule id, account, labels but ``quantile`` as sorted JSON, window) → the schema its
        window's native histogram was kept at, for every quantiles rule: the case's logs once
        more through the rules as the native gauge histograms they keep (own id, schema,
        limit)."""
        if self._kept is None:
            kept = [dataclasses.replace(r, aggregation=Aggregation.HISTOGRAM, buckets=(),
                                        bucket_labels=(), quantiles=(), quantile_labels=())
                    for r in self.rules.values() if r.aggregation == Aggregation.QUANTILES]
            self._kept = {}
            for line in run_local(self.settings.routing(kept), self.case.lines).lines:
                sample = orjson.loads(line)
                if HISTOGRAM_KEY in sample:
                    labels = orjson.dumps(sample["labels"], option=orjson.OPT_SORT_KEYS)
                    self._kept[sample["rule"], sample.get("account"), labels.decode(),
                               sample["timestamp"]] = sample[HISTOGRAM_KEY]["schema"]
        return self._kept

    def value(self, exp: SeriesExpectation) -> None:
        assert exp.value is not None
        self.one(exp, exp.name, dict(exp.labels), exp.value)

    def histogram(self, exp: SeriesExpectation) -> None:
        labels = dict(exp.labels)
        family = self.family(exp, labels)
        if not family:
            natives = [i for i in self.select(exp, exp.name, labels)
                       if is_native(self.samples[i])]
            got = "a native histogram only: give native: (count:, sum:, buckets:, …)" \
                if natives else self.missing(exp, exp.name + "_count", labels, shown=exp.name)
            self.fail(exp.at, self.where(exp, exp.name, labels), "a histogram", got)
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
                      f"{_window_note(first)} = {sample_text(first)}")

    def native(self, exp: SeriesExpectation, want: NativeExpectation) -> None:
        """A native histogram sample's fields, value ranges and buckets against ``want``."""
        labels = dict(exp.labels)
        what = self.where(exp, exp.name, labels)
        named = self.select(exp, exp.name, labels)
        found = [i for i in named if is_native(self.samples[i])]
        if not found:
            if named:
                got = f"a float sample {sample_text(self.samples[named[0]])}"
            elif self.family(exp, labels):
                got = "a classic histogram only: give buckets:, count: or sum:"
            else:
                got = self.missing(exp, exp.name, labels)
            self.fail(exp.at, what, "a native histogram", got)
            return
        if len(found) > 1:
            self.covered.update(found)
            windows = ", ".join(iso_text(self.samples[i]["timestamp"]) for i in found)
            self.fail(exp.at, what, "a native histogram",
                      f"{len(found)} samples (windows {windows}): give window:")
            return
        sample = self.samples[found[0]]
        self.covered.add(found[0])
        histogram = sample[HISTOGRAM_KEY]
        if want.schema is not None and histogram["schema"] != want.schema:
            self.fail(exp.at, f"{what} native schema", str(want.schema),
                      str(histogram["schema"]))
        if want.count is not None and histogram["count"] != want.count:
            self.fail(exp.at, f"{what} native count", str(want.count), str(histogram["count"]))
        if want.sum is not None and not same_value(want.sum, histogram["sum"]):
            self.fail(exp.at, f"{what} native sum", value_text(want.sum),
                      value_text(histogram["sum"]))
        if want.zero_count is not None and histogram["zero_count"] != want.zero_count:
            self.fail(exp.at, f"{what} native zero_count", str(want.zero_count),
                      str(histogram["zero_count"]))
        for value_range, expected in want.ranges:
            low, high, straddling = range_count(histogram, value_range)
            if not low <= expected <= high:
                got = str(low) if low == high else \
                    f"{low} to {high} ({straddling}; a bucket bound as the range's end is exact)"
                self.fail(exp.at, f"{what} native buckets[{value_range.written}]",
                          str(expected), got)
        for side in ("positive", "negative"):
            expected_buckets = getattr(want, side)
            have = [(int(i), int(c)) for i, c in histogram[side]]
            if expected_buckets is not None and list(expected_buckets) != have:
                self.fail(exp.at, f"{what} native {side}", _buckets_text(expected_buckets),
                          _buckets_text(have))
        if exp.timestamp is not None and sample["timestamp"] != exp.timestamp:
            self.fail(exp.at, f"{what} timestamp", iso_text(exp.timestamp),
                      iso_text(sample["timestamp"]))

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


def within(want: Value, got: Any, bound: float) -> bool:
    """A quantile's estimate ``got`` is within ``bound`` (relative, plus the rounding of
    Prometheus' bounds) of the exact quantile ``want`` — or both 0 up to the zero bucket's
    width (the estimate of a value in the zero bucket is 0)."""
    if isinstance(want, str) or isinstance(got, str | bool) or not isinstance(got, int | float):
        return False
    error = abs(float(got) - want)
    return error <= (bound + 1e-15) * abs(want) or error <= exphist.DEFAULT_ZERO_THRESHOLD


def _buckets_text(buckets: Sequence[tuple[int, int]]) -> str:
    return "{" + ", ".join(f"{i}: {c}" for i, c in buckets) + "}"


def _bucket_values(histogram: dict[str, Any]) -> list[tuple[float, bool, float, int, str]]:
    """Every populated bucket of a native histogram sample as (lowest value, whether it is
    included, highest value (always included or a limit), count, text): positive bucket i
    holds (base^(i-1), base^i], negative bucket i [-base^i, -base^(i-1)), the zero bucket
    [-threshold, threshold]."""
    schema = histogram["schema"]
    out = []
    for index, count in histogram["positive"]:
        low, high = exphist.upper_bound(index - 1, schema), exphist.upper_bound(index, schema)
        out.append((low, False, high, count, f"({value_text(low)}, {value_text(high)}]"))
    for index, count in histogram["negative"]:
        low, high = -exphist.upper_bound(index, schema), -exphist.upper_bound(index - 1, schema)
        out.append((low, True, high, count, f"[{value_text(low)}, {value_text(high)})"))
    if histogram["zero_count"]:
        threshold = histogram["zero_threshold"]
        out.append((-threshold, True, threshold, histogram["zero_count"],
                    f"the zero bucket [{value_text(-threshold)}, {value_text(threshold)}]"))
    return out


def range_count(histogram: dict[str, Any], value_range: ValueRange) -> tuple[int, int, str]:
    """How many observations of a native histogram sample lie in ``value_range``: (at least,
    at most, the buckets straddling an end). Exact (both equal) unless a populated bucket
    holds values on both sides of an end — a bucket holds (lower, upper], so an end that is
    a bucket bound never is straddled. NaN observations are in no bucket, so in no range."""
    least = most = 0
    straddling = []
    a, b = value_range.low, value_range.high
    for low, low_in, high, count, text in _bucket_values(histogram):
        # In (a, b] whole when all its values are > a and <= b; apart when none is.
        all_above = a is None or low > a or (low == a and not low_in)
        all_below = b is None or high <= b
        apart = (a is not None and high <= a) or \
            (b is not None and (low > b or (low == b and not low_in)))
        if apart:
            continue
        most += count
        if all_above and all_below:
            least += count
        else:
            straddling.append(f"{text} holds {count}")
    return least, most, ", ".join(straddling)


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


def rule_costs(routing: Routing, cases: Sequence[TestCase],
               settings: RunSettings | None = None) -> list[str]:
    """Each rule's cost as backfill's summary reports it
    (:meth:`~l2m.batch.summary.BackfillSummary.render_rules`), over the cases' logs in one
    run; with ``settings``, then the native buckets of its histogram and quantiles rules
    (:func:`l2m.authoring.estimate.distribution_lines`, as ``validate --estimate``)."""
    from l2m.authoring.estimate import distribution_lines

    lines = [line for case in cases for line in case.lines]
    whole = run_local(routing, lines)
    out = whole.summary.render_rules()
    if settings is not None:
        out += distribution_lines(settings, routing.rules, lines)
    return out


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

