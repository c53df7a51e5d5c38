"""Job configuration files (``topology/*.yaml``) → a typed :class:`JobConfig`.

Relative paths (rules, checkpoint) are resolved against the configuration file's folder, so a
job runs the same from any working directory; a URI (``s3a://bucket/l2m``) is kept as written.
Unknown keys are errors, as in rule files.

Input: a YAML file (or, :func:`config_from_dict`, its parsed mapping). Output: a
:class:`~l2m.config.job.JobConfig`, or one :class:`~l2m.errors.ConfigError` naming the file,
the line and the key — never a Kafka client value or the file's text (they hold secrets)."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from l2m.config.decode import Decoder, Invalid, parse_duration_ms, shown
from l2m.config.job import JobConfig
from l2m.errors import ConfigError
from l2m.yamlio import yamlsafe


def duration_ms(text: str | int | float, key: str = "duration") -> int:
    """A duration as written in a configuration → milliseconds
    (:func:`l2m.config.decode.parse_duration_ms`); a problem names ``key``."""
    try:
        return parse_duration_ms(text)
    except Invalid as exc:
        raise ConfigError(f"{key}: {exc}") from None


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


def read_yaml_text(path: Path, shown_as: str, too_large: str = "") -> str:
    """A YAML file's text, for a loader that reports positions: at most
    :data:`~l2m.yamlio.yamlsafe.MAX_FILE_BYTES` read (a wrong path may be a huge file), UTF-8,
    line ends made ``\\n``; a :class:`ConfigError` naming ``shown_as`` (never quoting the
    text: a job file holds secrets) otherwise, ``too_large`` appended when it is too big."""
    try:
        with path.open("rb") as stream:
            data = stream.read(yamlsafe.MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(f"{shown_as}: cannot read: {exc.strerror or exc}") from None
    if len(data) > yamlsafe.MAX_FILE_BYTES:
        raise ConfigError(f"{shown_as}: larger than {yamlsafe.MAX_FILE_BYTES} bytes{too_large}")
    try:
        return data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{shown_as}: cannot read: not UTF-8 (byte "
                          f"{exc.object[exc.start]:#04x} at offset {exc.start})") from None


def load_config(path: str | Path) -> JobConfig:
    """Read and check a job configuration file. Every error names the file, the line and the
    key; none ever quotes the file's text or a Kafka client value (they hold secrets)."""
    path = Path(path)
    text = read_yaml_text(path, str(path), "; is this the job configuration?")
    root = _compose(path, text)
    loader = yamlsafe.SafeLoader("")
    try:
        parsed = loader.construct_document(root) if root is not None else {}
    except yaml.MarkedYAMLError as exc:  # not expected after the checks; never quote the text
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: {_redact(problem)}") from None
    finally:
        loader.dispose()
    if parsed is None:
        parsed = {}
    if not isinstance(parsed, dict):
        raise ConfigError(f"{path}:1: top level must be a mapping")
    return config_from_dict(_expand(parsed), path, _lines(root))


def _compose(path: Path, text: str) -> yaml.Node | None:
    """The checked node tree of a configuration: bounded aliases and nesting, merge keys
    (``<<: *base``) applied, no duplicate key, no explicit tag, every key a plain value."""
    try:
        root = yamlsafe.compose(text)
    except yaml.YAMLError as exc:
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: invalid YAML: {_redact(problem)}") from None

    def fail(node: yaml.Node, problem: str) -> ConfigError:
        mark = node.start_mark
        return ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {problem}")

    deep = yamlsafe.too_deep(root)
    if deep is not None:
        raise fail(deep, f"YAML nesting is deeper than {yamlsafe.MAX_DEPTH} levels")
    for key, kind in yamlsafe.complex_keys(root):
        raise fail(key, f"a mapping key must be a plain value, not a {kind}")
    mappings = [n for n in yamlsafe.nodes(root) if isinstance(n, yaml.MappingNode)]
    for node in mappings:
        seen: dict[str, yaml.Node] = {}
        for key, _ in node.value:
            if key.tag == _MERGE:
                continue
            first = seen.setdefault(str(key.value), key)
            if first is not key:
                # YAML would keep the last silently: a second `source:` section would
                # replace the first one whole.
                raise fail(key, f"key '{shown(key.value)}' appears twice (first at line "
                                f"{first.start_mark.line + 1})")
    loader = yamlsafe.SafeLoader("")
    try:
        for node in mappings:
            loader.flatten_mapping(node)  # merge keys, as yaml.safe_load applies them
    except yaml.MarkedYAMLError as exc:
        line, column, problem = yamlsafe.position(exc, text)
        raise ConfigError(f"{path}:{line}:{column}: {_redact(problem)}") from None
    finally:
        loader.dispose()
    for code, mark, problem in yamlsafe.tag_problems(root):
        # an unknown tag's name is not shown: `sasl.password: !s3cret` is a tag to YAML
        what = "an explicit tag l2m does not read (only plain YAML values are allowed)" \
            if code == "YAML_UNKNOWN_TAG" else problem
        raise ConfigError(f"{path}:{mark.line + 1}:{mark.column + 1}: {what}")
    return root


_MERGE = "tag:yaml.org,2002:merge"
# PyYAML quotes names it did not understand: an alias (`sasl.password: *s3cret`), an anchor,
# a tag handle — pieces of the text, which may be a secret. Single characters and token
# names ('<stream end>') say what is wrong without that risk; l2m.yamlio.yamlsafe's limits name the
# alias too.
_QUOTED = re.compile(r"'([^']*)'")
_HARMLESS = re.compile(r"\\?.|\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|<[a-z ]+>")
_ALIAS = re.compile(r"\*[^\s)]+")


def _redact(problem: str) -> str:
    problem = _ALIAS.sub("*(not shown)", problem)
    return _QUOTED.sub(lambda m: m.group(0) if _HARMLESS.fullmatch(m.group(1)) else "(not shown)",
                       problem)


def _lines(root: yaml.Node | None) -> dict[tuple[str, ...], int]:
    """1-based line of every key, by its path (``("source", "planner")``)."""
    lines: dict[tuple[str, ...], int] = {}
    stack: list[tuple[yaml.Node, tuple[str, ...]]] = [(root, ())] if root is not None else []
    while stack:
        node, at = stack.pop()
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                if isinstance(key, yaml.ScalarNode):
                    here = (*at, str(key.value))
                    lines[here] = key.start_mark.line + 1  # the last wins, as in YAML
                    stack.append((value, here))
    return lines


def _expand(value: Any) -> Any:
    """``${VAR}`` in string values from the environment (secrets stay out of the file)."""
    if isinstance(value, str):
        return os.path.expandvars(value)
    if isinstance(value, dict):
        return {k: _expand(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand(v) for v in value]
    return value


def config_from_dict(data: dict[str, Any], path: Path | None = None,
                     lines: dict[tuple[str, ...], int] | None = None) -> JobConfig:
    """A :class:`JobConfig` from parsed YAML, every value checked by the type of its field
    (:mod:`l2m.config.decode`); errors name the key and, with ``lines``, its line."""
    base = path.resolve().parent if path else Path.cwd()

    def resolve(p: str) -> str:
        # A URI (s3a://bucket/p, file:///p) names its own location: kept as written.
        if _URI.match(p) or Path(p).is_absolute():
            return p
        return str((base / p).resolve())

    decoder = Decoder(_Errors(path, lines or {}), resolve=resolve)
    cfg: JobConfig = decoder.record(JobConfig, data)
    return replace(cfg, path=str(path) if path else None)


class _Errors:
    """Problems as ``file:line: key: problem`` (:class:`l2m.config.decode.Fail`)."""

    def __init__(self, path: Path | None, lines: dict[tuple[str, ...], int]) -> None:
        self.path = path
        self.lines = lines

    def __call__(self, at: tuple[str, ...], problem: str, *,
                 line_at: tuple[str, ...] | None = None, hide_key: bool = False
                 ) -> ConfigError:
        where = str(self.path) if self.path else "config"
        key = line_at or at
        line = next((self.lines[key[:n]] for n in range(len(key), 0, -1)
                     if key[:n] in self.lines), None)
        prefix = f"{where}:{line}" if line else where
        name = ".".join(map(shown, at[:-1] if hide_key else at))
        return ConfigError(f"{prefix}: {name}: {problem}" if name else f"{prefix}: {problem}")
