"""Stable error codes with message templates, in the manner of PySpark's error classes.

Every exception l2m raises for a user is an :class:`L2mError` with a stable ``code``:

* validation findings: :class:`Problem` (a rule file's error with its position, one code per
  kind of mistake, :data:`ERROR_CLASSES`), raised together as :class:`RuleValidationError`
  (code ``RULES``); :class:`QueryError` carries its finding's own code and offset;
* operator errors (the other subclasses): why a command or a job stopped, one stable code per
  class, shown as ``l2m: error [CODE]: message`` (:meth:`L2mError.render`).

Tests assert the code and the position, never the wording; the wording may improve."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# The exit code of a command stopped by Ctrl-C, or by a second SIGTERM while stopping
# gracefully: a shell's 128 + SIGINT.
INTERRUPTED = 130

ERROR_CLASSES: dict[str, str] = {
    # files
    "FILE_NOT_FOUND": "no such file or directory",
    "FILE_UNREADABLE": "cannot read file: {reason}",
    "NO_RULE_FILES": "no *.yaml or *.yml files under this directory",
    "YAML_SYNTAX": "invalid YAML: {reason}",
    "FILE_TOO_LARGE": "file is {size} bytes; the limit is {limit}",
    "YAML_ALIAS_LIMIT": "{reason}",
    "YAML_TOO_DEEP": "YAML nesting is too deep",
    "YAML_UNKNOWN_TAG": "{reason}: only plain YAML values are allowed",
    "YAML_INVALID_VALUE": "{reason}",
    "YAML_COMPLEX_KEY": "a mapping key must be a plain value, not a {type}",
    "INVALID_DOCUMENT": "top level must be a mapping with a 'rules' list",
    "DUPLICATE_KEY": "key '{key}' appears more than once",
    # rule structure
    "INVALID_RULE": "a rule must be a mapping, got {type}",
    "UNKNOWN_KEY": "unknown key '{key}'{hint}",
    "MISSING_KEY": "missing required key '{key}'",
    "INVALID_TYPE": "expected {expected}, got {type}",
    "INVALID_ID": "'{value}' must match [a-z0-9][a-z0-9_-]*",
    "DUPLICATE_ID": "'{value}' is already used at {other}",
    "INVALID_NAME": "'{value}' is not a valid metric name [a-zA-Z_:][a-zA-Z0-9_:]*",
    "RESERVED_ID": (
        "'{value}' starts with l2m-: rule ids starting with l2m- are l2m's own "
        "(l2m-late, l2m-label-cut, …), whose counts they would share"
    ),
    "RESERVED_NAME": (
        "'{value}' {reason}: metric names starting with l2m_ are l2m's own "
        "(l2m_input_logs_total, l2m_late_logs_total, …), written to the same metrics topic"
    ),
    "INVALID_KIND": "kind '{value}' must be one of counter, gauge",
    "INVALID_AGGREGATION": (
        "aggregation '{value}' must be one of count, sum, avg, min, max, histogram, quantiles"
    ),
    "AGGREGATION_KIND_MISMATCH": (
        "a {kind} cannot use aggregation '{aggregation}' (allowed: {allowed})"
    ),
    "MISSING_FIELD": (
        "aggregation '{aggregation}' needs 'field', the numeric log field it aggregates"
    ),
    "MISSING_BUCKETS": (
        "aggregation 'histogram' needs 'buckets' (classic bounds) or 'native' (exponential "
        "buckets), or both"
    ),
    "INVALID_BUCKETS": "{reason}",
    "INVALID_NATIVE": "{reason}{form}",
    "MISSING_QUANTILES": (
        "aggregation 'quantiles' needs 'quantiles', a list of quantiles from 0 to 1 "
        "(e.g. [0.5, 0.9, 0.99])"
    ),
    "INVALID_QUANTILES": "{reason}",
    "INVALID_FIELD_NAME": "a field name must be a non-empty string",
    "DUPLICATE_GROUP_BY": "field '{value}' is listed twice",
    "INVALID_GROUP_BY_LABEL": (
        "field '{field}' would become the label '{label}', which is not a valid Prometheus "
        "label name ([a-zA-Z_][a-zA-Z0-9_]*, not starting with __)"
    ),
    "INVALID_LABEL_NAME": (
        "'{value}' is not a valid label name [a-zA-Z_][a-zA-Z0-9_]* (and must not start with __)"
    ),
    "LABEL_CLASH": "label '{label}' {reason}",
    "EMPTY_LABEL_VALUE": (
        "label '{label}' has an empty value: an empty label is no label in Prometheus (remote "
        "write drops it); give it a value or leave it out"
    ),
    "INVALID_DESCRIPTION": "{reason}",
    "INVALID_UNIT": (
        "unit '{value}' must match [a-z][a-z0-9_]* (at most 64 characters): a base unit such "
        "as seconds, bytes or ratio"
    ),
    "TOO_MANY_LABELS": (
        "its series would carry {count} labels (static labels, group_by fields and a "
        "classic histogram's le or a quantile gauge's quantile); the limit is {limit}"
    ),
    # tenant mode (SPEC §7, l2m.policy.tenancy.Tenancy)
    "TENANT_ROOT": "in tenant mode a rules path is a directory of account directories",
    "RULE_OUTSIDE_ACCOUNT": (
        "in tenant mode every rule file lies in an account's directory (<rules>/<account>/)"
    ),
    "ACCOUNT_MISMATCH": (
        "this rule was submitted for account '{account}' and may not name account '{named}'"
    ),
    "TARGET_NOT_ALLOWED": (
        "account '{account}' may write to {allowed}, not to '{target}' (the job config's "
        "tenancy.targets allows more)"
    ),
    "INVALID_ACCOUNT": (
        "{what}{value} {reason}; an account is 1 to {limit} characters of {chars}, not "
        "{reserved} (Mimir's tenant IDs: it becomes the tenant header X-Scope-OrgID and a "
        "label value)"
    ),
    # series limits (SPEC §7, l2m.policy.limits)
    "MAX_SERIES_ABOVE_ACCOUNT": (
        "max_series {value} is above account '{account}''s cap of {cap} series "
        "(limits.max_series_per_account, or its limits.accounts override)"
    ),
    # series identity (SPEC §7, l2m.rules.identity)
    "SERIES_COLLISION": (
        "metric '{name}' can write the same series as {other}: both can emit labels {labels} "
        "for the same target account; rename one, add a distinguishing static label, or give "
        "it another target_account"
    ),
    "METRIC_TYPE_CONFLICT": "metric '{name}' is a {type} here and a {other_type} in {other}",
    "HISTOGRAM_NAME_COLLISION": (
        "'{name}' is the {suffix} series of the histogram '{family}' ({other})"
    ),
    # queries
    "QUERY_EMPTY": "query is empty",
    "QUERY_TOO_LONG": "query is {length} characters long; the limit is {limit}",
    "QUERY_TOO_DEEP": "query nesting is deeper than {limit}",
    "QUERY_SYNTAX": "{reason}",
    "QUERY_UNSUPPORTED_OPERATOR": "'{operator}' is not supported: write {instead}",
    "QUERY_UNSUPPORTED": "{construct} is not supported{hint}",
    "REGEX_TOO_LONG": "regular expression is {length} characters long; the limit is {limit}",
    "REGEX_INVALID": "invalid regular expression: {reason}",
    "QUERY_TOO_MANY_TERMS": "query has {count} terms; the limit is {limit}",
    "PATTERN_TOO_COMPLEX": (
        "pattern is too complex: {positions} positions once counted repetitions are expanded; "
        "the limit is {limit}"
    ),
}

# Not errors: reported by `l2m validate`, the rule still loads.
WARNING_CLASSES: dict[str, str] = {
    "UNUSED_KEY": "'{key}' is ignored by aggregation '{aggregation}'",
}


def render(code: str, params: dict[str, object]) -> str:
    """The message of an error or warning class with its parameters filled in."""
    template = ERROR_CLASSES.get(code) or WARNING_CLASSES[code]
    return template.format(**params)


class L2mError(Exception):
    """Base of every error l2m reports to an operator. ``code`` is stable per class; the
    message says what failed, the real cause, and what to do."""

    code = "L2M"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def render(self) -> str:
        """The one line a user sees."""
        return f"l2m: error [{self.code}]: {self.message}"


# --- validation findings ---------------------------------------------------------------------


class QueryError(L2mError):
    """A query that cannot be compiled. ``code`` is the finding's own (``QUERY_SYNTAX``…, one
    of :data:`ERROR_CLASSES`), ``pos`` the 0-based offset inside the query. The rule loader
    turns it into a positioned :class:`Problem`."""

    code = "QUERY"

    def __init__(self, code: str, pos: int, **params: Any) -> None:
        super().__init__(render(code, params))
        self.code = code
        self.pos = pos
        self.params = params

    def __str__(self) -> str:
        return f"{self.code} at {self.pos}: {self.message}"


@dataclass(frozen=True)
class Problem:
    """One validation finding, located in a rule file (1-based line and column)."""

    code: str
    file: str
    line: int
    column: int
    rule_id: str | None
    message: str
    key: str | None = None
    severity: str = "error"

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}:{self.column}"
        who = f" rule '{self.rule_id}':" if self.rule_id else ""
        what = f" {self.key}:" if self.key else ""
        tag = "warning " if self.severity == "warning" else ""
        return f"{where}:{who}{what} {tag}{self.message} [{self.code}]"


class RuleValidationError(L2mError):
    """Rule files hold errors; carries every problem found (the command line prints each on
    its own line, ``file:line:col: rule 'id': key: message [CODE]``)."""

    code = "RULES"

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        self.errors = [p for p in problems if p.severity == "error"]
        super().__init__("\n".join(str(p) for p in self.errors))

    def render(self) -> str:
        return f"l2m: error [{self.code}]: {len(self.errors)} error(s) in the rule files"


# --- operator errors -----------------------------------------------------------------------


class ConfigError(L2mError, ValueError):
    """An invalid job configuration or command line; the message names the file, the key and
    its line."""

    code = "CONFIG"


class InputError(L2mError):
    """Input that cannot be read as asked (missing, unreadable, corrupt with ``--strict``,
    an output that would overwrite an input)."""

    code = "INPUT"


class DataLossError(L2mError, RuntimeError):
    """Offsets the query needs are gone (retention, a recreated or truncated topic)."""

    code = "DATA_LOSS"


class SinkError(L2mError, RuntimeError):
    """Samples (or dead letters) could not be delivered to Kafka."""

    code = "SINK"


class KafkaUnavailableError(L2mError, RuntimeError):
    """Kafka could not be reached (metadata, offsets or records): transient, retried."""

    code = "KAFKA_UNAVAILABLE"


class StateFormatError(L2mError, RuntimeError):
    """A checkpoint written in a state format this l2m does not read."""

    code = "STATE_FORMAT"


class RuleSnapshotError(L2mError, RuntimeError):
    """A stored rule set (l2m.rules.snapshot) that this release cannot read or find."""

    code = "RULE_SNAPSHOT"


class BrokerError(L2mError, RuntimeError):
    """The embedded broker (tansu, ``l2m broker`` and ``l2m demo``) could not start, answer or
    create its topics."""

    code = "BROKER"


class RemoteWriteError(L2mError, ValueError):
    """A remote-write request that a receiver would reject as malformed (unsorted or invalid
    labels, no metric name, samples out of time order): refused before it is sent."""

    code = "REMOTE_WRITE"


class SparkError(L2mError):
    """Spark failed; the message is the underlying Java or Python exception's own."""

    code = "SPARK"


# Class name → class, to recognise l2m's errors inside Spark's failure text (an exception
# raised in a Python worker reaches the driver as text, wrapped by Spark and py4j).
OPERATOR_ERRORS: dict[str, type[L2mError]] = {
    cls.__name__: cls for cls in (ConfigError, InputError, DataLossError, SinkError,
                                  KafkaUnavailableError, StateFormatError, BrokerError,
                                  RuleSnapshotError)
}
