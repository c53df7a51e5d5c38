"""Stable error codes with message templates, in the manner of PySpark's error classes.

Tests assert the code and the position, never the wording; the wording may improve."""

from __future__ import annotations

from dataclasses import dataclass

ERROR_CLASSES: dict[str, str] = {
    # files
    "FILE_NOT_FOUND": "no such file or directory",
    "FILE_UNREADABLE": "cannot read file: {reason}",
    "NO_RULE_FILES": "no *.yaml or *.yml files under this directory",
    "YAML_SYNTAX": "invalid YAML: {reason}",
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
    "INVALID_KIND": "kind '{value}' must be one of counter, gauge",
    "INVALID_AGGREGATION": (
        "aggregation '{value}' must be one of count, sum, avg, min, max, histogram"
    ),
    "AGGREGATION_KIND_MISMATCH": (
        "a {kind} cannot use aggregation '{aggregation}' (allowed: {allowed})"
    ),
    "MISSING_FIELD": (
        "aggregation '{aggregation}' needs 'field', the numeric log field it aggregates"
    ),
    "MISSING_BUCKETS": "aggregation 'histogram' needs 'buckets', a list of upper bounds",
    "INVALID_BUCKETS": "{reason}",
    "INVALID_FIELD_NAME": "a field name must be a non-empty string",
    "DUPLICATE_GROUP_BY": "field '{value}' is listed twice",
    "INVALID_LABEL_NAME": (
        "'{value}' is not a valid label name [a-zA-Z_][a-zA-Z0-9_]* (and must not start with __)"
    ),
    "LABEL_CLASH": "label '{label}' {reason}",
    # queries
    "QUERY_EMPTY": "query is empty",
    "QUERY_TOO_LONG": "query is {length} characters long; the limit is {limit}",
    "QUERY_TOO_DEEP": "query nesting is deeper than {limit}",
    "QUERY_SYNTAX": "{reason}",
    "QUERY_UNSUPPORTED_OPERATOR": "'{operator}' is not supported: write {instead}",
    "QUERY_UNSUPPORTED": "{construct} is not supported{hint}",
    "REGEX_TOO_LONG": "regular expression is {length} characters long; the limit is {limit}",
    "REGEX_INVALID": "invalid regular expression: {reason}",
}

# Not errors: reported by `l2m validate`, the rule still loads.
WARNING_CLASSES: dict[str, str] = {
    "UNUSED_KEY": "'{key}' is ignored by aggregation '{aggregation}'",
}


def render(code: str, params: dict[str, object]) -> str:
    """The message of an error or warning class with its parameters filled in."""
    template = ERROR_CLASSES.get(code) or WARNING_CLASSES[code]
    return template.format(**params)


class QueryError(Exception):
    """A query that cannot be compiled. ``pos`` is the 0-based offset inside the query."""

    def __init__(self, code: str, pos: int, **params: object) -> None:
        self.code = code
        self.pos = pos
        self.params = params
        super().__init__(f"{code} at {pos}: {render(code, params)}")

    @property
    def message(self) -> str:
        return render(self.code, self.params)


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


class RuleValidationError(Exception):
    """Raised when rule files hold errors; carries every problem found."""

    def __init__(self, problems: list[Problem]) -> None:
        self.problems = problems
        errors = [p for p in problems if p.severity == "error"]
        super().__init__("\n".join(str(p) for p in errors))
