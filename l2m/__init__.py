"""l2m — logs to metrics on Apache Spark.

The public API, for programs that use l2m as a library (the ``l2m`` command is
:mod:`l2m.cli`)::

    import l2m

    ruleset = l2m.load_rules(["rules/"])            # validate: raises l2m.RuleValidationError
    cfg = l2m.load_config("topology/local.yaml")    # a typed l2m.JobConfig
    summary = l2m.run_backfill(spark, ruleset.rules, ["logs/"], "out/samples.jsonl")

Every error l2m raises for a user is an :class:`L2mError` with a stable ``code``.

Names are imported on first use: Spark's Python workers import ``l2m.<stage>`` modules, and
importing this package must not pull in pyspark or the rule compiler before they need it
(:mod:`l2m.runtime.daemon` removes Spark's zipped pyspark from the path first).

Its packages, by layer (``docs/architecture.md``; a module imports its own layer and those
below it):

1. base — :mod:`l2m.errors`, :mod:`l2m.defaults`, :mod:`l2m.version`, :mod:`l2m.semantics`,
   :mod:`l2m.policy`, :mod:`l2m.yamlio`, :mod:`l2m.process`;
2. :mod:`l2m.query`; 3. :mod:`l2m.rules`, :mod:`l2m.config`; 4. :mod:`l2m.engine`;
5. :mod:`l2m.state`, :mod:`l2m.kafka`, :mod:`l2m.batch`, :mod:`l2m.remotewrite`;
6. :mod:`l2m.streaming`; 7. :mod:`l2m.runtime`; 8. :mod:`l2m.dev`, :mod:`l2m.authoring`;

and the entry points: :mod:`l2m.cli` (the ``l2m`` command), :mod:`l2m.__main__`
(``python -m l2m``), and the shims that outside configurations name, :mod:`l2m.daemon` and
:mod:`l2m.jvmcache`. ``l2m/bin`` is not a package: it holds the scripts Spark's interpreter
wrapper runs by path (docs/architecture.md)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from l2m.version import __version__

# public name → the module that defines it
_API = {
    "L2mError": "l2m.errors",
    "ConfigError": "l2m.errors",
    "InputError": "l2m.errors",
    "QueryError": "l2m.errors",
    "RuleValidationError": "l2m.errors",
    "Problem": "l2m.errors",
    "QueryConfig": "l2m.query.nodes",
    "parse_query": "l2m.query.compiler",
    "Rule": "l2m.rules.model",
    "RuleSet": "l2m.rules.model",
    "load_rules": "l2m.rules.loader",
    "load_text": "l2m.rules.loader",
    "JobConfig": "l2m.config.job",
    "load_config": "l2m.config.loader",
    "config_from_dict": "l2m.config.loader",
    "run_backfill": "l2m.batch.backfill",
    "BackfillSummary": "l2m.batch.summary",
    "build_session": "l2m.runtime.session",
}

__all__ = [
    "BackfillSummary",
    "ConfigError",
    "InputError",
    "JobConfig",
    "L2mError",
    "Problem",
    "QueryConfig",
    "QueryError",
    "Rule",
    "RuleSet",
    "RuleValidationError",
    "__version__",
    "build_session",
    "config_from_dict",
    "load_config",
    "load_rules",
    "load_text",
    "parse_query",
    "run_backfill",
]

if TYPE_CHECKING:
    from l2m.batch.backfill import run_backfill
    from l2m.batch.summary import BackfillSummary
    from l2m.config.job import JobConfig
    from l2m.config.loader import config_from_dict, load_config
    from l2m.errors import (
        ConfigError,
        InputError,
        L2mError,
        Problem,
        QueryError,
        RuleValidationError,
    )
    from l2m.query.compiler import parse_query
    from l2m.query.nodes import QueryConfig
    from l2m.rules.loader import load_rules, load_text
    from l2m.rules.model import Rule, RuleSet
    from l2m.runtime.session import build_session


def __getattr__(name: str) -> Any:
    module = _API.get(name)
    if module is None:
        raise AttributeError(f"module 'l2m' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
