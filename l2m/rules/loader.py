"""Rule files (SPEC §1): YAML → immutable, typed :class:`~l2m.rules.model.Rule` records.

Loading never stops at the first problem: every file is read, every rule checked, and all
problems are reported together, each with ``file:line:column``, the rule id and a stable
error code (:mod:`l2m.errors`). Queries are compiled here, once, on the driver.

Input: rule files and directories (read recursively, ``*.yaml``/``*.yml``, leaving out the
rule unit tests ``*.test.yaml``/``*.test.yml`` that live beside them) or a YAML text,
and the query settings. Output: a :class:`~l2m.rules.model.RuleSet` (the rules and the
warnings), or :class:`~l2m.errors.RuleValidationError` carrying every problem found.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import os
import pickle
import stat
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from l2m.errors import Problem, QueryError, RuleValidationError, render
from l2m.policy.limits import OVERFLOW_LABEL, Limits
from l2m.policy.tenancy import Tenancy, invalid_account
from l2m.process.collector import collector_paused
from l2m.query.compiler import parse_query
from l2m.query.nodes import CompiledQuery, QueryConfig
from l2m.rules.identity import HISTOGRAM_SUFFIXES, collisions
from l2m.rules.model import (
    AGGREGATIONS,
    ALLOWED,
    BUCKETED,
    ID_RE,
    KEYS,
    KINDS,
    LABEL_RE,
    MAX_BUCKETS,
    MAX_DESCRIPTION,
    MAX_LABELS,
    MAX_NATIVE_BUCKETS,
    MAX_QUANTILES,
    NAME_RE,
    NATIVE_MAX_BUCKETS,
    NATIVE_SCHEMA,
    QUANTILE_LABEL,
    QUANTILES_MAX_BUCKETS,
    QUANTILES_SCHEMA,
    REQUIRED,
    RESERVED_ID_PREFIX,
    RESERVED_LABEL_PREFIX,
    RESERVED_NAME_PREFIX,
    UNIT_RE,
    Aggregation,
    Kind,
    Rule,
    RuleSet,
    share_values,
)
from l2m.semantics.exphist import SCHEMA_MAX, SCHEMA_MIN
from l2m.semantics.values import label_name, number, string_form
from l2m.yamlio import yamlsafe
from l2m.yamlio.suggest import similar

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
    """A node's Python value. Scalars — almost every node of a rule file — are constructed
    directly by one shared loader (a loader per node cost 6 µs: 10 s of a 100,000-rule
    ``validate``); collections by a fresh one, whose alias bookkeeping starts empty."""
    if isinstance(node, yaml.ScalarNode):
        loader = getattr(_SCALARS, "loader", None)
        if loader is None:
            loader = _SCALARS.loader = yamlsafe.SafeLoader("")
        try:
            return loader.construct_object(node, deep=True)
        finally:
            loader.constructed_objects.pop(node, None)  # it would keep every node it saw
    loader = yamlsafe.SafeLoader("")
    try:
        return loader.construct_object(node, deep=True)
    finally:
        loader.dispose()


_SCALARS = threading.local()  # one scalar loader per thread: loaders keep state per call


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {bool: "boolean", int: "integer", float: "number", str: "string", list: "list",
            dict: "mapping"}.get(type(value), type(value).__name__)


def _shown(value: Any) -> str:
    """A wrong value in a message: a scalar as written, anything else by its type."""
    if isinstance(value, str):
        return repr(value) if len(value) <= 40 else f"a string of {len(value)} characters"
    text = string_form(value) if not isinstance(value, list | dict) else None
    if text is not None and len(text) > 40:  # YAML reads integers of up to 4,300 digits
        return f"{text[:20]}… ({len(text)} characters)"
    return _type_name(value) if text is None else text


def _text_number_hint(value: Any) -> str:
    """Why a number-looking string is one: YAML 1.1 reads an exponent without a dot (1e-1)
    as text."""
    if not isinstance(value, str) or number(value) is None:
        return ""
    if "." not in value and "e" in value.lower():
        return " (YAML reads an exponent without a dot as text: write 0.1 or 1.0e-1)"
    return " (a string: write it without quotes)"


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


# `l2m test`'s files (l2m.authoring.testfile), kept beside the rules they test: a directory
# scan leaves them out (a file named on its own is read as a rule file, as asked).
TEST_SUFFIXES = (".test.yaml", ".test.yml")


def is_rule_file(name: str) -> bool:
    """Whether a directory scan reads the file ``name``: ``*.yaml``/``*.yml`` but not
    :data:`TEST_SUFFIXES`."""
    return name.endswith((".yaml", ".yml")) and not name.endswith(TEST_SUFFIXES)


def rule_files(paths: Iterable[str | Path]) -> tuple[list[Path], list[Problem]]:
    """Expand files and directories (recursively, ``*.yaml``/``*.yml`` but not the unit tests
    ``*.test.yaml``/``*.test.yml``) in a stable order.

    A file given twice, or reached both directly and through a directory (or a symlink), is
    loaded once: it would otherwise count every log twice. An unreadable directory anywhere
    below is an error, not silently skipped; so is a ``*.yaml`` entry that is not a regular
    file (a dangling symlink, a FIFO), reported when :func:`load_rules` reads it. Symlinked
    directories are followed, each real directory walked once (no symlink loop). Folders
    named ``..*`` are skipped: a Kubernetes ConfigMap volume keeps its files in such folders
    (``..2026_11_24_10_00_00.123``, ``..data``) and links the visible names into them, so
    the rules are read by their visible names — and never from a version the kubelet is
    swapping out."""
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
                if name.startswith(".."):
                    continue
                real = os.path.realpath(os.path.join(root, name))
                if real not in walked:
                    walked.add(real)
                    kept.append(name)
            dirs[:] = kept
            found.extend(Path(root) / n for n in names if is_rule_file(n))
        if not found and len(problems) == before:
            problems.append(_file_problem("NO_RULE_FILES", str(path)))
        for found_path in sorted(found):
            add(found_path)
    return files, problems


def _file_problem(code: str, file: str, **params: object) -> Problem:
    return Problem(code, file, 1, 1, None, render(code, params))


def read_rule_file(path: Path) -> tuple[str | None, Problem | None]:
    """The text of one rule file, or the problem that stops it being read.

    Never blocks and never reads more than :data:`l2m.yamlio.yamlsafe.MAX_FILE_BYTES` (+1): the file
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


def load_rules(paths: Iterable[str | Path], config: QueryConfig | None = None,
               tenancy: Tenancy | None = None, limits: Limits | None = None,
               workers: int = 1) -> RuleSet:
    """Load and validate rule files; raise :class:`RuleValidationError` listing every error
    of every file. Warnings ride along on the returned :class:`RuleSet`. With ``tenancy``
    each path is a root of account directories (:class:`~l2m.policy.tenancy.Tenancy`): every rule
    is bound to its directory's account (:func:`_bind`). With ``limits`` a rule's
    ``max_series`` may not exceed its account's cap (:func:`_above_account`). ``workers``:
    processes reading the files (:func:`_read_files`; only where the caller has no threads
    of its own, since they are forked)."""
    config = config or QueryConfig()
    if tenancy is None:
        files, problems = rule_files(paths)
        sources: list[Source] = [(None, path) for path in files]
    else:
        sources, problems = _tenant_files(paths)
    rules: list[Rule] = []
    first_seen: dict[str, str] = {}
    for (account, path), (problem, ctx) in zip(
            sources, _read_files(sources, config, tenancy, workers), strict=True):
        if problem is not None or ctx is None:
            problems.extend([problem] if problem else [])
            continue
        problems.extend(ctx.problems)
        rules.extend(ctx.rules)
        for rule_id, line, column in ctx.ids:
            where = f"{path}:{line}"
            # a tenant's ids are its own: <account>/<id>, as _bind qualifies them
            other = first_seen.setdefault(rule_id if account is None else f"{account}/{rule_id}",
                                          where)
            if other != where:
                problems.append(Problem("DUPLICATE_ID", str(path), line, column, rule_id,
                                        render("DUPLICATE_ID", {"value": rule_id,
                                                                "other": other}), "id"))
    problems.extend(collisions(rules))
    if limits is not None:
        problems.extend(_above_account(rules, limits))
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        raise RuleValidationError(problems)
    share_values(rules)
    return RuleSet(tuple(rules), tuple(problems))


@dataclasses.dataclass
class _FileRead:
    """What one file gave: its problems, its valid rules (a tenant's bound to its account:
    :func:`_bind`) and every rule id seen (id, line, column), without the text (it travels
    back from a reading process)."""

    problems: list[Problem]
    rules: list[Rule]
    ids: list[tuple[str, int, int]]


# Files per reading process at least: below it a process costs more than it saves.
PARALLEL_FILES = 64


Source = tuple[str | None, Path]  # a rule file and its tenant's account (None: no tenancy)


def _read_file(source: Source, config: QueryConfig, tenancy: Tenancy | None
               ) -> tuple[Problem | None, _FileRead | None]:
    account, path = source
    text, problem = read_rule_file(path)
    if problem is not None or text is None:
        return problem, None
    ctx = _read(text, str(path), config)
    if account is None or tenancy is None:
        return None, _FileRead(ctx.problems, ctx.rules, ctx.ids)
    problems = list(ctx.problems)
    bound = [b for rule in ctx.rules
             if (b := _bind(rule, account, tenancy, problems)) is not None]
    return None, _FileRead(problems, bound, ctx.ids)


def _read_chunk(sources: list[Source], config: QueryConfig, tenancy: Tenancy | None
                ) -> bytes:
    # Pickled here, unpickled by the caller with the collector off (below): the pool's own
    # result thread would unpickle them with it on.
    return pickle.dumps([_read_file(source, config, tenancy) for source in sources],
                        protocol=pickle.HIGHEST_PROTOCOL)


def _read_files(sources: list[Source], config: QueryConfig, tenancy: Tenancy | None,
                workers: int) -> Iterator[tuple[Problem | None, _FileRead | None]]:
    """Each file read and checked (:func:`_read`), in order; with ``workers`` > 1 and enough
    files, by that many forked processes, each given runs of consecutive files. A pool that
    breaks (a process killed) leaves the files it did not give back to this process: the
    result is the same either way. Files are independent and reading one is CPU-bound Python
    (YAML, safety checks, queries compiled): 100,000 tenant rules in 10,000 files on 2 cores,
    34.5 → 21.7–23.3 s."""
    # No more processes than runs of PARALLEL_FILES files: a process each costs more.
    workers = min(workers, len(sources) // PARALLEL_FILES)
    done = 0
    if workers > 1:
        for read in _read_in_processes(sources, config, tenancy, workers):
            yield read
            done += 1
    for source in sources[done:]:
        yield _read_file(source, config, tenancy)


def _read_in_processes(sources: list[Source], config: QueryConfig, tenancy: Tenancy | None,
                       workers: int) -> Iterator[tuple[Problem | None, _FileRead | None]]:
    """What :func:`_read_files` reads in ``workers`` forked processes, in order, until the
    pool breaks (or at once where processes cannot be forked): the caller reads the rest."""
    # Here, not at the top: only `l2m validate` reads files in processes, and everything else
    # that loads rules (Spark's driver-side processes among them) would import these.
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    from concurrent.futures.process import BrokenProcessPool

    if "fork" not in multiprocessing.get_all_start_methods():
        return
    size = max(PARALLEL_FILES, -(-len(sources) // (4 * workers)))
    chunks = [sources[i:i + size] for i in range(0, len(sources), size)]
    try:
        with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) \
                as pool:
            for blob in pool.map(_read_chunk, chunks, itertools.repeat(config),
                                 itertools.repeat(tenancy)):
                with collector_paused():  # millions of new objects, no cycles among them
                    results = pickle.loads(blob)
                yield from results
    except BrokenProcessPool:
        pass


def _tenant_files(roots: Iterable[str | Path]
                  ) -> tuple[list[tuple[str | None, Path]], list[Problem]]:
    """Tenant mode: (account, file) of every rule file below ``<root>/<account>/``; a root
    that is not a directory and a rule file directly in a root are problems."""
    sources: list[tuple[str | None, Path]] = []
    problems: list[Problem] = []
    for raw_root in roots:
        root = Path(raw_root)
        if not root.is_dir():
            problems.append(_file_problem("TENANT_ROOT", str(root)))
            continue
        for entry in sorted(root.iterdir()):
            if entry.name.startswith("."):
                continue  # ConfigMap bookkeeping (..data), editor files
            if not entry.is_dir():
                if is_rule_file(entry.name):
                    problems.append(_file_problem("RULE_OUTSIDE_ACCOUNT", str(entry)))
                continue
            # Its files are still read: their own problems are reported with it.
            if (params := invalid_account(entry.name, "account directory ")) is not None:
                problems.append(_file_problem("INVALID_ACCOUNT", str(entry), **params))
            files, found = rule_files([entry])
            problems.extend(p for p in found if p.code != "NO_RULE_FILES")
            sources.extend((entry.name, path) for path in files)
    return sources, problems


def _above_account(rules: Iterable[Rule], limits: Limits) -> list[Problem]:
    """Rules whose ``max_series`` is above their account's per-account cap: a rule may be
    exempted from the per-rule cap, never from its account's."""
    problems = []
    for rule in rules:
        if rule.max_series is None or rule.account is None:
            continue
        cap = limits.for_account(rule.account).per_account
        if cap and rule.max_series > cap:
            params = {"value": rule.max_series, "account": rule.account, "cap": cap}
            problems.append(Problem("MAX_SERIES_ABOVE_ACCOUNT", rule.file, rule.line, 1,
                                    rule.id, render("MAX_SERIES_ABOVE_ACCOUNT", params),
                                    "max_series"))
    return problems


def _bind(rule: Rule, account: str, tenancy: Tenancy, problems: list[Problem]) -> Rule | None:
    """A tenant's rule with its account, target and qualified id, or None (a problem added)."""
    def refuse(code: str, key: str, **params: object) -> None:
        problems.append(Problem(code, rule.file, rule.line, 1, rule.id,
                                render(code, params), key))

    if rule.account is not None and rule.account != account:
        refuse("ACCOUNT_MISMATCH", "account", account=account, named=rule.account)
        return None
    allowed = tenancy.allowed_targets(account)
    target = rule.target_account if rule.target_account is not None else account
    if target not in allowed:
        refuse("TARGET_NOT_ALLOWED", "target_account", account=account, target=target,
               allowed=", ".join(allowed))
        return None
    return dataclasses.replace(rule, id=f"{account}/{rule.id}", account=account,
                               target_account=target)


def load_text(text: str, file: str = "<memory>", config: QueryConfig | None = None
              ) -> tuple[list[Rule], list[Problem]]:
    """Parse one rule file's text: the rules that are valid and the problems found."""
    ctx = _read(text, file, config or QueryConfig())
    return ctx.rules, ctx.problems + collisions(ctx.rules)


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
    """One rule's mapping → a :class:`Rule`, or None with its problems added to ``ctx``."""
    if not isinstance(node, yaml.MappingNode):
        ctx.add("INVALID_RULE", node, None, type=_type_name(_construct(node)))
        return None
    return _RuleReader(node, ctx, config).read()


_NATIVE_KEYS = ("schema", "max_buckets")

# A rule's keys as written: key → (constructed value, key node, value node).
Raw = dict[str, tuple[Any, yaml.Node, yaml.Node]]


class _RuleReader:
    """Reads one rule mapping, one method per key (or group of keys that depend on each
    other); every problem is added to the file's context with the rule's id."""

    def __init__(self, node: yaml.MappingNode, ctx: _Ctx, config: QueryConfig) -> None:
        self.node = node
        self.ctx = ctx
        self.config = config
        self.before = len(ctx.problems)
        self.raw: Raw = {key: (_construct(value), key_node, value)
                         for key, key_node, value in _mapping_items(node, ctx, None)}
        self.rule_id = self._rule_id()

    def _rule_id(self) -> str | None:
        found = self.raw.get("id")
        rule_id = None
        if found is not None and isinstance(found[0], str | int) and not isinstance(found[0],
                                                                                    bool):
            rule_id = str(found[0])
            mark = found[2].start_mark
            self.ctx.ids.append((rule_id, mark.line + 1, mark.column + 1))
        # _mapping_items reported duplicate keys without the id; attach it now.
        self.ctx.problems[self.before:] = [
            Problem(p.code, p.file, p.line, p.column, rule_id, p.message, p.key, p.severity)
            for p in self.ctx.problems[self.before:]
        ]
        return rule_id

    def bad(self, code: str, at: str, **params: Any) -> None:
        """A problem with key ``at`` (at the rule when the key is absent)."""
        target = self.raw[at][2] if at in self.raw else self.node
        self.ctx.add(code, target, self.rule_id, at if at in self.raw else None, **params)

    def add(self, code: str, node: yaml.Node, where: str | None = None, **params: Any
            ) -> None:
        self.ctx.add(code, node, self.rule_id, where, **params)

    def string(self, key: str, *, scalar_ok: bool = False) -> str | None:
        if key not in self.raw:
            return None
        value = self.raw[key][0]
        if isinstance(value, str):
            return value
        if scalar_ok and isinstance(value, int | float) and not isinstance(value, bool):
            return string_form(value)
        self.bad("INVALID_TYPE", key, key=key, expected="a string", type=_type_name(value))
        return None

    def read(self) -> Rule | None:
        self.keys()
        rid, name = self.identity()
        kind, aggregation = self.kind_and_aggregation()
        field_name = self.field(aggregation)
        buckets, bucket_labels = self.buckets(aggregation)
        native_schema, native_max_buckets = self.native(aggregation)
        quantiles, quantile_labels = self.quantiles(aggregation)
        # `native: false` says "no native buckets": classic ones are then needed (a bad
        # `native` value is reported as such, not as missing buckets too)
        if aggregation == Aggregation.HISTOGRAM and "buckets" not in self.raw \
                and self.raw.get("native", (False,))[0] is False:
            self.add("MISSING_BUCKETS", self.node, None)
        classic = aggregation == Aggregation.HISTOGRAM and "buckets" in self.raw
        self.reserved_name(name, classic)
        group_by = self.group_by()
        labels = self.labels()
        self.label_clash(group_by, labels, aggregation, classic)
        account = self.account("account")
        target_account = self.account("target_account")
        enabled = self.enabled()
        max_series = self.max_series()
        description, unit = self.metadata()
        query, compiled = self.query()
        if any(p.severity == "error" for p in self.ctx.problems[self.before:]):
            return None
        assert rid and name and kind and query is not None and aggregation
        return Rule(
            id=rid, name=name, kind=kind, query=query, aggregation=aggregation,
            field=field_name if aggregation != Aggregation.COUNT else None,
            buckets=buckets, bucket_labels=bucket_labels, native_schema=native_schema,
            native_max_buckets=native_max_buckets, quantiles=quantiles,
            quantile_labels=quantile_labels, group_by=group_by, labels=labels,
            account=account, target_account=target_account, enabled=enabled,
            max_series=max_series, description=description, unit=unit,
            file=self.ctx.file, line=self.node.start_mark.line + 1,
            compiled=compiled,
        )

    def keys(self) -> None:
        """Unknown keys (with a suggestion) and missing required ones."""
        for key, (_, key_node, _) in self.raw.items():
            if key not in KEYS:
                close = [k for k in KEYS if similar(k, key)]
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                self.add("UNKNOWN_KEY", key_node, None, key=key, hint=hint)
        for key in REQUIRED:
            if key not in self.raw:
                self.add("MISSING_KEY", self.node, None, key=key)

    def identity(self) -> tuple[str | None, str | None]:
        rid = self.string("id", scalar_ok=True)
        if rid is not None and not ID_RE.fullmatch(rid):
            self.bad("INVALID_ID", "id", value=rid)
        elif rid is not None and rid.startswith(RESERVED_ID_PREFIX):
            self.bad("RESERVED_ID", "id", value=rid)
        name = self.string("name")
        if name is not None and not NAME_RE.fullmatch(name):
            self.bad("INVALID_NAME", "name", value=name)
        return rid, name

    def reserved_name(self, name: str | None, classic: bool) -> None:
        """A name of l2m's own metrics (:data:`RESERVED_NAME_PREFIX`), or a classic
        histogram whose series would be one (``l2m`` → ``l2m_bucket``; a native histogram
        and quantile gauges write ``name`` alone)."""
        if name is None or not NAME_RE.fullmatch(name):
            return
        if name.startswith(RESERVED_NAME_PREFIX):
            self.bad("RESERVED_NAME", "name", value=name,
                     reason=f"starts with {RESERVED_NAME_PREFIX}")
        elif classic and any(
                (name + suffix).startswith(RESERVED_NAME_PREFIX)
                for suffix in HISTOGRAM_SUFFIXES):
            *first, last = (name + suffix for suffix in HISTOGRAM_SUFFIXES)
            self.bad("RESERVED_NAME", "name", value=name,
                     reason=f"is a histogram, whose series would be {', '.join(first)} "
                            f"and {last}")

    def kind_and_aggregation(self) -> tuple[Kind | None, Aggregation | None]:
        written_kind = self.string("kind")
        kind = Kind(written_kind) if written_kind in KINDS else None
        if written_kind is not None and kind is None:
            self.bad("INVALID_KIND", "kind", value=written_kind)
        written = self.string("aggregation")
        aggregation = Aggregation(written) if written in AGGREGATIONS else None
        if written is not None and aggregation is None:
            self.bad("INVALID_AGGREGATION", "aggregation", value=written)
        if kind and aggregation and aggregation not in ALLOWED[kind]:
            self.bad("AGGREGATION_KIND_MISMATCH", "aggregation", kind=kind,
                     aggregation=aggregation, allowed=", ".join(ALLOWED[kind]))
        return kind, aggregation

    def field(self, aggregation: Aggregation | None) -> str | None:
        field_name = self.string("field")
        if field_name is not None and not field_name:
            self.bad("INVALID_FIELD_NAME", "field", key="field")
        if aggregation and aggregation != Aggregation.COUNT and "field" not in self.raw:
            self.add("MISSING_FIELD", self.node, None, aggregation=aggregation)
        if aggregation == Aggregation.COUNT and "field" in self.raw:
            self.add("UNUSED_KEY", self.raw["field"][1], None, severity="warning",
                     key="field", aggregation="count")
            return None
        return field_name

    def buckets(self, aggregation: Aggregation | None
                ) -> tuple[tuple[float, ...], tuple[str, ...]]:
        """``buckets``: a classic histogram's upper bounds (MISSING_BUCKETS, which ``native``
        may answer instead, is :meth:`read`'s)."""
        if "buckets" not in self.raw:
            return (), ()
        value, key_node, value_node = self.raw["buckets"]
        if aggregation is not None and aggregation != Aggregation.HISTOGRAM:
            self.add("UNUSED_KEY", key_node, None, severity="warning", key="buckets",
                     aggregation=aggregation)
            return (), ()
        if not isinstance(value, list) or not value:
            self.bad("INVALID_BUCKETS", "buckets", reason="expected a non-empty list of numbers")
            return (), ()
        if len(value) > MAX_BUCKETS:
            self.bad("INVALID_BUCKETS", "buckets", reason=f"at most {MAX_BUCKETS} bounds")
            return (), ()
        bounds: list[float] = []
        for item, item_node in zip(value, value_node.value, strict=True):
            if isinstance(item, bool) or not isinstance(item, int | float) \
                    or not math.isfinite(item):
                self.add("INVALID_BUCKETS", item_node, "buckets",
                         reason=f"bound {item!r} is not a finite number")
                return (), ()
            if bounds and float(item) <= bounds[-1]:
                self.add("INVALID_BUCKETS", item_node, "buckets",
                         reason=f"bounds must be strictly increasing ({item} after "
                                f"{bounds[-1]:g})")
                return (), ()
            bounds.append(float(item))
        return tuple(bounds), tuple(string_form(v) or "" for v in value)

    def native(self, aggregation: Aggregation | None) -> tuple[int | None, int]:
        """``native``: the schema and bucket limit of a histogram's native (exponential)
        buckets — None for none (``false``, or absent on a histogram) — or of the window
        histogram a quantiles rule estimates from (always one: its default when absent)."""
        quantiles = aggregation == Aggregation.QUANTILES
        default = QUANTILES_SCHEMA if quantiles else NATIVE_SCHEMA
        limit = QUANTILES_MAX_BUCKETS if quantiles else NATIVE_MAX_BUCKETS
        unset = default if quantiles else None
        if "native" not in self.raw:
            return unset, limit
        value, key_node, value_node = self.raw["native"]
        if aggregation is not None and aggregation not in BUCKETED:
            self.add("UNUSED_KEY", key_node, None, severity="warning", key="native",
                     aggregation=aggregation)
            return None, NATIVE_MAX_BUCKETS
        if isinstance(value, bool):
            if not value and aggregation == Aggregation.QUANTILES:
                self._bad_native(value_node, "aggregation 'quantiles' always estimates from a "
                                             "native histogram: leave 'native' out or give "
                                             "its resolution, a mapping of schema "
                                             f"({SCHEMA_MIN} to {SCHEMA_MAX}) and "
                                             f"max_buckets (1 to {MAX_NATIVE_BUCKETS})",
                                 form=False)
            return (default if value else unset), limit
        if not isinstance(value_node, yaml.MappingNode):
            self._bad_native(value_node, f"expected true, false or a mapping, got "
                                         f"{_type_name(value)}")
            return unset, limit
        schema, max_buckets = default, limit
        for key, key_node, item_node in _mapping_items(value_node, self.ctx, self.rule_id):
            item = _construct(item_node)
            whole = isinstance(item, int) and not isinstance(item, bool)
            if key == "schema":
                if whole and SCHEMA_MIN <= item <= SCHEMA_MAX:
                    schema = item
                else:
                    self._bad_native(item_node, f"schema must be a whole number from "
                                                f"{SCHEMA_MIN} to {SCHEMA_MAX}, got "
                                                f"{_shown(item)}")
            elif key == "max_buckets":
                if whole and 1 <= item <= MAX_NATIVE_BUCKETS:
                    max_buckets = item
                else:
                    self._bad_native(item_node, f"max_buckets must be a whole number from 1 "
                                                f"to {MAX_NATIVE_BUCKETS}, got {_shown(item)}")
            else:
                close = [k for k in _NATIVE_KEYS if similar(k, key)]
                hint = (f" (did you mean '{close[0]}'?)" if close
                        else f" (expected {' or '.join(_NATIVE_KEYS)})")
                self.add("UNKNOWN_KEY", key_node, "native", key=key, hint=hint)
        return schema, max_buckets

    def _bad_native(self, node: yaml.Node, reason: str, form: bool = True) -> None:
        """An INVALID_NATIVE at ``node``; ``form``: followed by what ``native`` may be."""
        tail = (f"; 'native' is true, false or a mapping of schema ({SCHEMA_MIN} to "
                f"{SCHEMA_MAX}) and max_buckets (1 to {MAX_NATIVE_BUCKETS})") if form else ""
        self.add("INVALID_NATIVE", node, "native", reason=reason, form=tail)

    def quantiles(self, aggregation: Aggregation | None
                  ) -> tuple[tuple[float, ...], tuple[str, ...]]:
        """``quantiles``: the quantiles a quantiles rule writes a gauge for, strictly
        increasing, each from 0 to 1, with their labels as written (``0.5``, ``1``)."""
        if "quantiles" not in self.raw:
            if aggregation == Aggregation.QUANTILES:
                self.add("MISSING_QUANTILES", self.node, None)
            return (), ()
        value, key_node, value_node = self.raw["quantiles"]
        if aggregation is not None and aggregation != Aggregation.QUANTILES:
            self.add("UNUSED_KEY", key_node, None, severity="warning", key="quantiles",
                     aggregation=aggregation)
            return (), ()
        if not isinstance(value, list) or not value:
            self.bad("INVALID_QUANTILES", "quantiles",
                     reason=f"expected a non-empty list of numbers from 0 to 1, got "
                            f"{'an empty list' if value == [] else _type_name(value)}")
            return (), ()
        if len(value) > MAX_QUANTILES:
            self.bad("INVALID_QUANTILES", "quantiles",
                     reason=f"at most {MAX_QUANTILES} quantiles, got {len(value)}")
            return (), ()
        found: list[float] = []
        for item, item_node in zip(value, value_node.value, strict=True):
            if isinstance(item, bool) or not isinstance(item, int | float) \
                    or not 0 <= item <= 1:  # NaN is not either
                self.add("INVALID_QUANTILES", item_node, "quantiles",
                         reason=f"quantile {_shown(item)} is not a number from 0 to 1"
                                + _text_number_hint(item))
                return (), ()
            if found and float(item) <= found[-1]:
                reason = (f"quantile {string_form(item)} is listed twice" if item in found
                          else f"quantiles must be strictly increasing ({string_form(item)} "
                               f"after {string_form(value[len(found) - 1])})")
                self.add("INVALID_QUANTILES", item_node, "quantiles", reason=reason)
                return (), ()
            found.append(float(item) + 0.0)  # -0.0 is 0, its label too
        return tuple(found), tuple("0" if q == 0 else string_form(q) or "" for q in value)

    def group_by(self) -> tuple[str, ...]:
        if "group_by" not in self.raw:
            return ()
        value, _, value_node = self.raw["group_by"]
        if isinstance(value, str):
            value = [value]
        elif not isinstance(value, list):
            self.bad("INVALID_TYPE", "group_by", key="group_by",
                     expected="a list of field names", type=_type_name(value))
            return ()
        nodes = value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]
        fields: list[str] = []
        for item, item_node in zip(value, nodes, strict=True):
            if not isinstance(item, str) or not item:
                self.add("INVALID_FIELD_NAME", item_node, "group_by", key="group_by")
            elif item in fields:
                self.add("DUPLICATE_GROUP_BY", item_node, "group_by", value=item)
            elif not LABEL_RE.fullmatch(label_name(item)) or label_name(item).startswith("__"):
                # Prometheus: [a-zA-Z_][a-zA-Z0-9_]*, and names starting with __ are reserved
                self.add("INVALID_GROUP_BY_LABEL", item_node, "group_by", field=item,
                         label=label_name(item))
            else:
                fields.append(item)
        return tuple(fields)

    def labels(self) -> tuple[tuple[str, str], ...]:
        if "labels" not in self.raw:
            return ()
        value, _, node = self.raw["labels"]
        if not isinstance(node, yaml.MappingNode):
            self.bad("INVALID_TYPE", "labels", key="labels",
                     expected="a mapping of label names to values", type=_type_name(value))
            return ()
        labels: list[tuple[str, str]] = []
        for key, key_node, value_node in _mapping_items(node, self.ctx, self.rule_id):
            item = _construct(value_node)
            if not LABEL_RE.fullmatch(key) or key.startswith("__"):
                self.add("INVALID_LABEL_NAME", key_node, "labels", value=key)
                continue
            text = string_form(item) if not isinstance(item, list | dict) else None
            if text is None:
                self.add("INVALID_TYPE", value_node, "labels", key=f"labels.{key}",
                         expected="a string", type=_type_name(item))
                continue
            if not text:  # remote write would drop it: the series would lose a label
                self.add("EMPTY_LABEL_VALUE", value_node, "labels", label=key)
                continue
            labels.append((key, text))
        return tuple(sorted(labels))

    def label_clash(self, group_by: tuple[str, ...], labels: tuple[tuple[str, str], ...],
                    aggregation: Aggregation | None, classic: bool) -> None:
        names: dict[str, str] = {}
        for field_name in group_by:
            label = label_name(field_name)
            if label in names:
                self.bad("LABEL_CLASH", "group_by", label=label,
                         reason=f"comes from both group_by fields '{names[label]}' and "
                                f"'{field_name}'")
            names[label] = field_name
        for label, _ in labels:
            if label in names:
                self.bad("LABEL_CLASH", "labels", label=label,
                         reason=f"is both a static label and the group_by field "
                                f"'{names[label]}'")
        # the overflow series (l2m.engine.admission) trades the group-by labels for one
        # (a native histogram's buckets are inside its one series: no label)
        count = len(labels) + max(len(names), 1) \
            + (classic or aggregation == Aggregation.QUANTILES)
        if count > MAX_LABELS:
            self.add("TOO_MANY_LABELS", self.node, None, count=count, limit=MAX_LABELS)
        overflow = OVERFLOW_LABEL[0]
        for key, taken in (("group_by", list(names)), ("labels", [n for n, _ in labels])):
            for label in taken:
                if label == overflow:
                    self.bad("LABEL_CLASH", key, label=label, reason="is reserved for the "
                             "overflow series of a rule past its series cap")
                elif label.startswith(RESERVED_LABEL_PREFIX):
                    # l2m deliver's account label (l2m_account by default) among them: a
                    # sample already carrying it is skipped there, never sent
                    self.bad("LABEL_CLASH", key, label=label, reason=f"starts with "
                             f"{RESERVED_LABEL_PREFIX}, reserved for the labels l2m adds "
                             f"({overflow}, l2m deliver's l2m_account)")
        # `le` for every histogram: a rule that is native alone today may add classic bounds
        reserved = {Aggregation.HISTOGRAM: ("le", "histogram buckets"),
                    Aggregation.QUANTILES: (QUANTILE_LABEL, "the quantile of a quantile gauge")}
        if aggregation in reserved:
            label, what = reserved[aggregation]
            if label in names:
                self.bad("LABEL_CLASH", "group_by", label=label, reason=f"is reserved for {what}")
            if any(name == label for name, _ in labels):
                self.bad("LABEL_CLASH", "labels", label=label, reason=f"is reserved for {what}")

    def account(self, key: str) -> str | None:
        """``account`` or ``target_account``: a string (a number in its string form) in the
        accounts' alphabet (:func:`l2m.policy.tenancy.account_problem`)."""
        value = self.string(key, scalar_ok=True)
        if value is not None and (params := invalid_account(value)) is not None:
            self.bad("INVALID_ACCOUNT", key, **params)
        return value

    def enabled(self) -> bool:
        if "enabled" not in self.raw:
            return True
        value = self.raw["enabled"][0]
        if isinstance(value, bool):
            return value
        self.bad("INVALID_TYPE", "enabled", key="enabled", expected="true or false",
                 type=_type_name(value))
        return True

    def max_series(self) -> int | None:
        if "max_series" not in self.raw:
            return None
        value = self.raw["max_series"][0]
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31:
            return value
        self.bad("INVALID_TYPE", "max_series", key="max_series",
                 expected="a whole number from 1 to 2147483647", type=_type_name(value)
                 if not isinstance(value, int) or isinstance(value, bool) else str(value))
        return None

    def metadata(self) -> tuple[str, str]:
        """``description`` (one line of printable text) and ``unit``, the metric's HELP and
        UNIT (docs/rules.md)."""
        description = self.string("description") or ""
        if len(description) > MAX_DESCRIPTION:
            self.bad("INVALID_DESCRIPTION", "description",
                     reason=f"a description is at most {MAX_DESCRIPTION} characters, got "
                            f"{len(description)}")
        elif not description.isprintable():
            self.bad("INVALID_DESCRIPTION", "description",
                     reason="a description is one line of printable text (no line breaks "
                            "or control characters)")
        unit = self.string("unit") or ""
        if "unit" in self.raw and unit and not UNIT_RE.fullmatch(unit):
            self.bad("INVALID_UNIT", "unit", value=unit)
        return description, unit

    def query(self) -> tuple[str | None, CompiledQuery | None]:
        query = self.string("query")
        if query is None:
            return None, None
        try:
            return query, parse_query(query, self.config)
        except QueryError as exc:
            line, column = _query_position(self.raw["query"][2], exc.pos, self.ctx)
            self.ctx.add(exc.code, None, self.rule_id, "query", line=line, column=column,
                         **exc.params)
            return query, None


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
