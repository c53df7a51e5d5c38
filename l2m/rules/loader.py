"""Rule files (SPEC §1): YAML → immutable, typed :class:`~l2m.rules.model.Rule` records.

Loading never stops at the first problem: every file is read, every rule checked, and all
problems are reported together, each with ``file:line:column``, the rule id and a stable
error code (:mod:`l2m.errors`). Queries are compiled here, once, on the driver.
"""

from __future__ import annotations

import math
import os
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from l2m import yamlsafe
from l2m.errors import Problem, QueryError, RuleValidationError, render
from l2m.query.compiler import parse_query
from l2m.query.nodes import QueryConfig
from l2m.rules.model import (
    AGGREGATIONS,
    ALLOWED,
    ID_RE,
    KEYS,
    KINDS,
    LABEL_RE,
    MAX_BUCKETS,
    NAME_RE,
    REQUIRED,
    Rule,
    RuleSet,
)
from l2m.text import similar
from l2m.values import label_name, string_form

# --- YAML with positions -------------------------------------------------------------------


class _Ctx:
    """Problems collected while reading one file."""

    def __init__(self, file: str, text: str) -> None:
        self.file = file
        self.lines = text.splitlines()
        self.problems: list[Problem] = []
        self.ids: list[tuple[str, int, int]] = []  # (id, line, column) of every rule seen
        self.rules: list[Rule] = []

    def add(self, code: str, node: yaml.Node | None, rule_id: str | None, where: str | None = None,
            *, line: int | None = None, column: int | None = None, severity: str = "error",
            **params: object) -> None:
        if line is None:
            line = node.start_mark.line + 1 if node is not None else 1
            column = node.start_mark.column + 1 if node is not None else 1
        self.problems.append(Problem(code, self.file, line, column or 1, rule_id,
                                     render(code, params), where, severity))


def _construct(node: yaml.Node) -> Any:
    loader = yamlsafe.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def _mapping_items(node: yaml.MappingNode, ctx: _Ctx, rule_id: str | None
                   ) -> Iterator[tuple[str, yaml.Node, yaml.Node]]:
    seen: set[str] = set()
    for key_node, value_node in node.value:
        key = str(_construct(key_node))
        if key in seen:
            ctx.add("DUPLICATE_KEY", key_node, rule_id, key=key)
            continue
        seen.add(key)
        yield key, key_node, value_node


# --- loading -------------------------------------------------------------------------------


def rule_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[Problem]]:
    """Expand files and directories (recursively, ``*.yaml``/``*.yml``) in a stable order.

    A file given twice, or reached both directly and through a directory (or a symlink), is
    loaded once: it would otherwise count every log twice. An unreadable directory anywhere
    below is an error, not silently skipped; so is a ``*.yaml`` entry that is not a regular
    file (a dangling symlink, a FIFO), reported when :func:`load_rules` reads it. Symlinked
    directories are followed, each real directory walked once (no symlink loop)."""
    files: list[Path] = []
    problems: list[Problem] = []
    seen: set[Path] = set()

    def add(path: Path) -> None:
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            files.append(path)

    def unreadable(exc: OSError) -> None:
        problems.append(_file_problem("FILE_UNREADABLE", str(exc.filename),
                                      reason=exc.strerror or exc))

    for raw in paths:
        path = Path(raw)
        try:
            is_dir = stat.S_ISDIR(os.stat(path).st_mode)
        except FileNotFoundError:
            if os.path.lexists(path):  # a dangling symlink: say so rather than "no such file"
                add(path)
            else:
                problems.append(_file_problem("FILE_NOT_FOUND", str(path)))
            continue
        except OSError as exc:  # e.g. a parent directory that cannot be searched
            problems.append(_file_problem("FILE_UNREADABLE", str(path),
                                          reason=exc.strerror or exc))
            continue
        if not is_dir:
            add(path)  # whatever it is: load_rules reports what is not a readable file
            continue
        found: list[Path] = []
        before = len(problems)
        walked = {os.path.realpath(path)}
        for root, dirs, names in os.walk(path, onerror=unreadable, followlinks=True):
            kept = []
            for name in sorted(dirs):
                real = os.path.realpath(os.path.join(root, name))
                if real not in walked:
                    walked.add(real)
                    kept.append(name)
            dirs[:] = kept
            found.extend(Path(root) / n for n in names if n.endswith((".yaml", ".yml")))
        if not found and len(problems) == before:
            problems.append(_file_problem("NO_RULE_FILES", str(path)))
        for found_path in sorted(found):
            add(found_path)
    return files, problems


def _file_problem(code: str, file: str, **params: object) -> Problem:
    return Problem(code, file, 1, 1, None, render(code, params))


def read_rule_file(path: Path) -> tuple[str | None, Problem | None]:
    """The text of one rule file, or the problem that stops it being read.

    Never blocks and never reads more than :data:`l2m.yamlsafe.MAX_FILE_BYTES` (+1): the file
    is opened non-blocking (a FIFO named ``*.yaml`` would hang ``l2m validate``), must be a
    regular file, and is read up to the cap — its size on disk is not trusted, it may grow
    between the check and the read, and files under ``/proc`` report 0."""
    limit = yamlsafe.MAX_FILE_BYTES
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        reason = "a broken symbolic link" if os.path.islink(path) and not path.exists() \
            else exc.strerror or exc
        return None, _file_problem("FILE_UNREADABLE", str(path), reason=reason)
    try:
        with os.fdopen(fd, "rb") as stream:
            info = os.fstat(stream.fileno())
            if not stat.S_ISREG(info.st_mode):
                return None, _file_problem("FILE_UNREADABLE", str(path),
                                           reason="not a regular file")
            if info.st_size > limit:
                return None, _file_problem("FILE_TOO_LARGE", str(path), size=info.st_size,
                                           limit=limit)
            data = stream.read(limit + 1)
    except OSError as exc:
        return None, _file_problem("FILE_UNREADABLE", str(path), reason=exc.strerror or exc)
    if len(data) > limit:
        return None, _file_problem("FILE_TOO_LARGE", str(path), size=f"more than {limit}",
                                   limit=limit)
    try:
        # universal newlines, as Path.read_text reads them
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n"), None
    except UnicodeDecodeError as exc:
        return None, _file_problem("FILE_UNREADABLE", str(path),
                                   reason=f"not UTF-8 (byte {exc.object[exc.start]:#04x} at "
                                          f"offset {exc.start})")


def load_rules(paths: Iterable[str | Path], config: QueryConfig | None = None) -> RuleSet:
    """Load and validate rule files; raise :class:`RuleValidationError` listing every error
    of every file. Warnings ride along on the returned :class:`RuleSet`."""
    config = config or QueryConfig()
    files, problems = rule_files(paths)
    rules: list[Rule] = []
    first_seen: dict[str, str] = {}
    for path in files:
        text, problem = read_rule_file(path)
        if problem is not None or text is None:
            problems.extend([problem] if problem else [])
            continue
        ctx = _read(text, str(path), config)
        rules.extend(ctx.rules)
        problems.extend(ctx.problems)
        for rule_id, line, column in ctx.ids:
            where = f"{path}:{line}"
            other = first_seen.setdefault(rule_id, where)
            if other != where:
                problems.append(Problem("DUPLICATE_ID", str(path), line, column, rule_id,
                                        render("DUPLICATE_ID", {"value": rule_id,
                                                                "other": other}), "id"))
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise RuleValidationError(problems)
    return RuleSet(tuple(rules), tuple(problems))


def load_text(text: str, file: str = "<memory>", config: QueryConfig | None = None
              ) -> tuple[list[Rule], list[Problem]]:
    """Parse one rule file's text: the rules that are valid and the problems found."""
    ctx = _read(text, file, config or QueryConfig())
    return ctx.rules, ctx.problems


def _read(text: str, file: str, config: QueryConfig) -> _Ctx:
    ctx = _Ctx(file, text)
    if len(text) > yamlsafe.MAX_FILE_BYTES:
        ctx.add("FILE_TOO_LARGE", None, None, size=len(text), limit=yamlsafe.MAX_FILE_BYTES)
        return ctx
    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError as exc:
        line, column, problem = yamlsafe.position(exc, text)
        code = getattr(exc, "code", "YAML_SYNTAX")
        ctx.add(code, None, None, line=line, column=column, reason=problem)
        return ctx
    deep = yamlsafe.too_deep(root)
    if deep is not None:
        ctx.add("YAML_TOO_DEEP", deep, None)
        return ctx
    bad_tags = yamlsafe.tag_problems(root)
    for code, mark, problem in bad_tags:
        ctx.add(code, None, None, line=mark.line + 1, column=mark.column + 1, reason=problem)
    bad_keys = yamlsafe.complex_keys(root)
    for key_node, kind in bad_keys:
        ctx.add("YAML_COMPLEX_KEY", key_node, None, type=kind)
    if bad_tags or bad_keys:
        # Constructing the rules would fail on these (or build what nobody wrote).
        return ctx
    rules_node = None
    if isinstance(root, yaml.MappingNode):
        for key, _, value in _mapping_items(root, ctx, None):
            if key == "rules":
                rules_node = value
            else:
                ctx.add("UNKNOWN_KEY", _key_node(root, key), None, key=key,
                        hint=" at top level (expected 'rules')")
    if not isinstance(rules_node, yaml.SequenceNode):
        ctx.add("INVALID_DOCUMENT", rules_node or root, None)
        return ctx
    for item in rules_node.value:
        rule = _load_rule(item, ctx, config)
        if rule is not None:
            ctx.rules.append(rule)
    return ctx


def _key_node(mapping: yaml.MappingNode, key: str) -> yaml.Node:
    for key_node, _ in mapping.value:
        if _construct(key_node) == key:
            return key_node
    return mapping


def _load_rule(node: yaml.Node, ctx: _Ctx, config: QueryConfig) -> Rule | None:
    if not isinstance(node, yaml.MappingNode):
        ctx.add("INVALID_RULE", node, None, type=_type_name(_construct(node)))
        return None
    before = len(ctx.problems)
    raw: dict[str, tuple[Any, yaml.Node, yaml.Node]] = {}
    rule_id: str | None = None
    for key, key_node, value_node in _mapping_items(node, ctx, None):
        raw[key] = (_construct(value_node), key_node, value_node)
    if "id" in raw and isinstance(raw["id"][0], str | int) and not isinstance(raw["id"][0], bool):
        rule_id = str(raw["id"][0])
        mark = raw["id"][2].start_mark
        ctx.ids.append((rule_id, mark.line + 1, mark.column + 1))
    # _mapping_items reported duplicate keys without the id; attach it now.
    ctx.problems[before:] = [
        Problem(p.code, p.file, p.line, p.column, rule_id, p.message, p.key, p.severity)
        for p in ctx.problems[before:]
    ]

    def bad(code: str, at: str, **params: object) -> None:
        target = raw[at][2] if at in raw else node
        ctx.add(code, target, rule_id, at if at in raw else None, **params)

    for key, (_, key_node, _) in raw.items():
        if key not in KEYS:
            close = [k for k in KEYS if similar(k, key)]
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            ctx.add("UNKNOWN_KEY", key_node, rule_id, None, key=key, hint=hint)
    for key in REQUIRED:
        if key not in raw:
            ctx.add("MISSING_KEY", node, rule_id, None, key=key)

    def get_str(key: str, *, scalar_ok: bool = False) -> str | None:
        if key not in raw:
            return None
        value = raw[key][0]
        if isinstance(value, str):
            return value
        if scalar_ok and isinstance(value, int | float) and not isinstance(value, bool):
            return string_form(value)
        bad("INVALID_TYPE", key, key=key, expected="a string", type=_type_name(value))
        return None

    rid = get_str("id", scalar_ok=True)
    if rid is not None and not ID_RE.fullmatch(rid):
        bad("INVALID_ID", "id", value=rid)
    name = get_str("name")
    if name is not None and not NAME_RE.fullmatch(name):
        bad("INVALID_NAME", "name", value=name)
    kind = get_str("kind")
    if kind is not None and kind not in KINDS:
        bad("INVALID_KIND", "kind", value=kind)
        kind = None
    aggregation = get_str("aggregation")
    if aggregation is not None and aggregation not in AGGREGATIONS:
        bad("INVALID_AGGREGATION", "aggregation", value=aggregation)
        aggregation = None
    if kind and aggregation and aggregation not in ALLOWED[kind]:
        bad("AGGREGATION_KIND_MISMATCH", "aggregation", kind=kind, aggregation=aggregation,
            allowed=", ".join(ALLOWED[kind]))

    field_name = get_str("field")
    if field_name is not None and not field_name:
        bad("INVALID_FIELD_NAME", "field", key="field")
    if aggregation and aggregation != "count" and "field" not in raw:
        ctx.add("MISSING_FIELD", node, rule_id, None, aggregation=aggregation)
    if aggregation == "count" and "field" in raw:
        ctx.add("UNUSED_KEY", raw["field"][1], rule_id, None, severity="warning",
                key="field", aggregation="count")
        field_name = None

    buckets, bucket_labels = _buckets(raw, node, aggregation, ctx, rule_id, bad)
    group_by = _group_by(raw, ctx, rule_id, bad)
    labels = _labels(raw, ctx, rule_id, bad)
    _check_label_clash(raw, group_by, labels, aggregation, ctx, rule_id, bad)

    account = get_str("account", scalar_ok=True)
    target_account = get_str("target_account", scalar_ok=True)
    enabled = True
    if "enabled" in raw:
        if isinstance(raw["enabled"][0], bool):
            enabled = raw["enabled"][0]
        else:
            bad("INVALID_TYPE", "enabled", key="enabled", expected="true or false",
                type=_type_name(raw["enabled"][0]))

    query = get_str("query")
    compiled = None
    if query is not None:
        try:
            compiled = parse_query(query, config)
        except QueryError as exc:
            line, column = _query_position(raw["query"][2], exc.pos, ctx)
            ctx.add(exc.code, None, rule_id, "query", line=line, column=column, **exc.params)

    if any(p.severity == "error" for p in ctx.problems[before:]):
        return None
    assert rid and name and kind and query is not None and aggregation
    return Rule(
        id=rid, name=name, kind=kind, query=query, aggregation=aggregation,
        field=field_name if aggregation != "count" else None,
        buckets=buckets, bucket_labels=bucket_labels, group_by=group_by, labels=labels,
        account=account, target_account=target_account, enabled=enabled,
        file=ctx.file, line=node.start_mark.line + 1, compiled=compiled,
    )


def _buckets(raw, node, aggregation, ctx, rule_id, bad):  # type: ignore[no-untyped-def]
    if "buckets" not in raw:
        if aggregation == "histogram":
            ctx.add("MISSING_BUCKETS", node, rule_id, None)
        return (), ()
    value = raw["buckets"][0]
    if aggregation is not None and aggregation != "histogram":
        ctx.add("UNUSED_KEY", raw["buckets"][1], rule_id, None, severity="warning",
                key="buckets", aggregation=aggregation)
        return (), ()
    if not isinstance(value, list) or not value:
        bad("INVALID_BUCKETS", "buckets", reason="expected a non-empty list of numbers")
        return (), ()
    if len(value) > MAX_BUCKETS:
        bad("INVALID_BUCKETS", "buckets", reason=f"at most {MAX_BUCKETS} bounds")
        return (), ()
    items = raw["buckets"][2].value
    bounds: list[float] = []
    for item, item_node in zip(value, items, strict=True):
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            ctx.add("INVALID_BUCKETS", item_node, rule_id, "buckets",
                    reason=f"bound {item!r} is not a finite number")
            return (), ()
        if bounds and float(item) <= bounds[-1]:
            ctx.add("INVALID_BUCKETS", item_node, rule_id, "buckets",
                    reason=f"bounds must be strictly increasing ({item} after {bounds[-1]:g})")
            return (), ()
        bounds.append(float(item))
    return tuple(bounds), tuple(string_form(v) or "" for v in value)


def _group_by(raw, ctx, rule_id, bad) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    if "group_by" not in raw:
        return ()
    value = raw["group_by"][0]
    if isinstance(value, str):
        value = [value]
    elif not isinstance(value, list):
        bad("INVALID_TYPE", "group_by", key="group_by", expected="a list of field names",
            type=_type_name(value))
        return ()
    nodes = raw["group_by"][2].value if isinstance(raw["group_by"][2], yaml.SequenceNode) \
        else [raw["group_by"][2]]
    fields: list[str] = []
    for item, item_node in zip(value, nodes, strict=True):
        if not isinstance(item, str) or not item:
            ctx.add("INVALID_FIELD_NAME", item_node, rule_id, "group_by", key="group_by")
        elif item in fields:
            ctx.add("DUPLICATE_GROUP_BY", item_node, rule_id, "group_by", value=item)
        elif not LABEL_RE.fullmatch(label_name(item)) or label_name(item).startswith("__"):
            # Prometheus: [a-zA-Z_][a-zA-Z0-9_]*, and names starting with __ are reserved
            ctx.add("INVALID_GROUP_BY_LABEL", item_node, rule_id, "group_by", field=item,
                    label=label_name(item))
        else:
            fields.append(item)
    return tuple(fields)


def _labels(raw, ctx, rule_id, bad) -> tuple[tuple[str, str], ...]:  # type: ignore[no-untyped-def]
    if "labels" not in raw:
        return ()
    node = raw["labels"][2]
    if not isinstance(node, yaml.MappingNode):
        bad("INVALID_TYPE", "labels", key="labels", expected="a mapping of label names to values",
            type=_type_name(raw["labels"][0]))
        return ()
    labels: list[tuple[str, str]] = []
    for key, key_node, value_node in _mapping_items(node, ctx, rule_id):
        value = _construct(value_node)
        if not LABEL_RE.fullmatch(key) or key.startswith("__"):
            ctx.add("INVALID_LABEL_NAME", key_node, rule_id, "labels", value=key)
            continue
        text = string_form(value) if not isinstance(value, list | dict) else None
        if text is None:
            ctx.add("INVALID_TYPE", value_node, rule_id, "labels", key=f"labels.{key}",
                    expected="a string", type=_type_name(value))
            continue
        labels.append((key, text))
    return tuple(sorted(labels))


def _check_label_clash(raw, group_by, labels, aggregation, ctx, rule_id, bad) -> None:  # type: ignore[no-untyped-def]
    names: dict[str, str] = {}
    for field_name in group_by:
        label = label_name(field_name)
        if label in names:
            bad("LABEL_CLASH", "group_by", label=label,
                reason=f"comes from both group_by fields '{names[label]}' and '{field_name}'")
        names[label] = field_name
    for label, _ in labels:
        if label in names:
            bad("LABEL_CLASH", "labels", label=label,
                reason=f"is both a static label and the group_by field '{names[label]}'")
    if aggregation == "histogram":
        if "le" in names:
            bad("LABEL_CLASH", "group_by", label="le",
                reason="is reserved for histogram buckets")
        if any(label == "le" for label, _ in labels):
            bad("LABEL_CLASH", "labels", label="le", reason="is reserved for histogram buckets")


def _query_position(node: yaml.Node, offset: int, ctx: _Ctx) -> tuple[int, int]:
    """File line and column (1-based) of character ``offset`` of a query scalar."""
    start = node.start_mark
    style = getattr(node, "style", None)
    if style in ("|", ">"):
        # Block scalar: content starts on the next line; walk its lines.
        line_no = start.line + 1
        remaining = offset
        while line_no < len(ctx.lines):
            text = ctx.lines[line_no]
            indent = len(text) - len(text.lstrip(" "))
            content = text[indent:]
            if remaining <= len(content):
                return line_no + 1, indent + remaining + 1
            remaining -= len(content) + 1
            line_no += 1
        return start.line + 2, 1
    quote = 1 if style in ("'", '"') else 0
    if start.line == node.end_mark.line:
        return start.line + 1, start.column + quote + offset + 1
    return start.line + 1, start.column + 1
