"""The ``l2m`` command line (SPEC §5)."""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

from l2m import defaults
from l2m.errors import INTERRUPTED, ConfigError, L2mError, Problem, RuleValidationError
from l2m.policy.limits import Limits, check_label_limit
from l2m.policy.tenancy import Tenancy, account_problem, shown_account
from l2m.query.nodes import QueryConfig

if TYPE_CHECKING:
    from l2m.config.job import JobConfig
    from l2m.dev.loadgen import LoadSpec
    from l2m.rules.model import RuleSet

PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def _fields(text: str) -> tuple[str, ...]:
    return tuple(f.strip() for f in text.split(",") if f.strip())


def _add_query_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--text-fields", type=_fields, metavar="F,F",
                        help="fields analysed as text (default: message)")
    parser.add_argument("--default-fields", type=_fields, metavar="F,F",
                        help="fields searched by terms without a field (default: message)")


def _add_limit_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-label-value-length", type=int, metavar="N",
                   help="label values from logs longer than N characters are cut to N, ending "
                        f"in '…(cut)', and counted (default {defaults.MAX_LABEL_VALUE_LENGTH}; "
                        "the job's limits.max_label_value_length)")
    for scope, default in (("rule", defaults.MAX_SERIES_PER_RULE),
                           ("metric", defaults.MAX_SERIES_PER_METRIC),
                           ("account", defaults.MAX_SERIES_PER_ACCOUNT)):
        parser.add_argument(f"--max-series-per-{scope}", type=_cap, metavar="N",
                       help=f"series cap per {scope} (default {default:,}, or --config's; 0: "
                            "none; --config's per-account overrides still apply); a series "
                            "past a cap counts into its rule's overflow series, as in l2m run")


def _query_config(args: argparse.Namespace) -> QueryConfig:
    text = defaults.TEXT_FIELDS if args.text_fields is None else args.text_fields
    default = defaults.DEFAULT_FIELDS if args.default_fields is None else args.default_fields
    return QueryConfig(text_fields=text, default_fields=default)


# Settings a job file holds, which a command taking --config must not also take as a flag.
_JOB_FILE_FLAGS = (("text_fields", "--text-fields"), ("default_fields", "--default-fields"),
                   ("timestamp_field", "--timestamp-field"))


def _target(text: str) -> tuple[str, str]:
    account, sep, target = text.partition("=")
    if not sep or not account or not target:
        raise argparse.ArgumentTypeError(f"expected ACCOUNT=TARGET, got '{text}'")
    for name in (account, target):
        problem = account_problem(name)
        if problem is not None:
            raise argparse.ArgumentTypeError(
                f"account {shown_account(name)} {problem} (docs/rules.md, \"Accounts\")")
    return account, target


def _add_tenancy_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tenants", action="store_true",
                        help="tenant mode: each rules path holds one directory per account, "
                        "whose rules see only that account's logs (docs/rules.md)")
    parser.add_argument("--tenant-target", type=_target, action="append", default=[],
                        metavar="ACCOUNT=TARGET",
                        help="with --tenants: ACCOUNT may also write to TARGET (repeatable)")


def _tenancy(args: argparse.Namespace) -> Tenancy | None:
    if not args.tenants:
        if args.tenant_target:
            raise ConfigError("--tenant-target needs --tenants")
        return None
    targets: dict[str, list[str]] = {}
    for account, target in args.tenant_target:
        targets.setdefault(account, []).append(target)
    return Tenancy(targets=tuple(sorted((a, tuple(t)) for a, t in targets.items())))


def _print_problems(problems: Sequence[Problem]) -> None:
    order = {p.file: i for i, p in reversed(list(enumerate(problems)))}
    for problem in sorted(problems, key=lambda p: (order[p.file], p.line, p.column)):
        print(problem, file=sys.stderr)


# `l2m validate`'s rule-reading processes at most (l2m.rules.loader.load_rules' workers).
READ_WORKERS = 8


def _rules(paths: Sequence[str], config: QueryConfig, tenancy: Tenancy | None = None,
           limits: Limits | None = None, workers: int = 1) -> RuleSet:
    """The rules of every command: loaded and validated once; their problems, if any, are
    printed by :func:`main` (every one, each on its own line). ``workers``: reading
    processes, forked (load_rules), so only for a command with no other threads yet."""
    from l2m.rules.loader import load_rules

    return load_rules(paths, config, tenancy, limits, workers)



def _given_config(args: argparse.Namespace) -> JobConfig | None:
    """``--config``'s job configuration (validate, backfill), which also holds the tenancy the
    tenancy flags would give; None without it."""
    if not args.config:
        return None
    if args.tenants or args.tenant_target:
        raise ConfigError("--tenants and --tenant-target come from --config's tenancy "
                          "section; give one or the other")
    given = [flag for key, flag in _JOB_FILE_FLAGS if getattr(args, key, None) is not None]
    if given:
        raise ConfigError(f"{' and '.join(given)}: the job file given with --config sets "
                          "this (text_fields, default_fields, timestamp_field); give one or the "
                          "other")
    if getattr(args, "_job_config", None) is None:  # read once per command
        args._job_config = _load_config(args.config)
    cfg: JobConfig = args._job_config
    return cfg


def _rule_settings(cfg: JobConfig | None, args: argparse.Namespace
                   ) -> tuple[QueryConfig, Tenancy | None, Limits]:
    """Query fields, tenancy and series caps to load rules with: the job's, or the flags'."""
    if cfg is not None:
        return cfg.query_config, cfg.rule_tenancy, cfg.limits.series
    return _query_config(args), _tenancy(args), Limits()


def cmd_validate(args: argparse.Namespace) -> int:
    # validate starts no other thread: its files are read by a process per core it may run
    # on (the affinity mask, not the machine's count: a container's cpuset), at most
    # READ_WORKERS (each reading process holds its share of the rules).
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
        else os.cpu_count() or 1
    query, tenancy, _, _, limits = _backfill_settings(args)
    ruleset = _rules(args.paths, query, tenancy, limits, workers=min(cores, READ_WORKERS))
    _print_problems(ruleset.warnings)
    files = len({r.file for r in ruleset.rules})
    disabled = len(ruleset.rules) - len(ruleset.enabled)
    print(f"ok: {len(ruleset.rules)} rules in {files} file(s)"
          + (f", {disabled} disabled" if disabled else ""))
    if args.list:
        from l2m.rules.identity import shown_type

        for rule in ruleset.rules:
            print(f"{rule.id}\t{shown_type(rule)}\t{rule.name}\t{rule.unit or '-'}\t"
                  f"{rule.description or '-'}" + ("" if rule.enabled else "\t(disabled)"))
    if args.estimate:
        from l2m.authoring.estimate import estimate_command

        return estimate_command(ruleset.rules, args.estimate, _run_config(args)[0],
                                out=sys.stdout)
    return 0


def _cap(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value < 2**31:
        raise argparse.ArgumentTypeError(f"expected a whole number, 0 for no cap, got '{text}'")
    return value


def _backfill_settings(args: argparse.Namespace
                       ) -> tuple[QueryConfig, Tenancy | None, str, int, Limits]:
    """Query fields, tenancy, timestamp field, label value limit and series caps of a
    backfill: its flags, or with ``--config`` the job's, the limit flags overriding."""
    from dataclasses import replace

    cfg = _given_config(args)
    query, tenancy, limits = _rule_settings(cfg, args)
    ts_field = cfg.timestamp_field if cfg is not None else \
        getattr(args, "timestamp_field", None) or defaults.TIMESTAMP_FIELD
    label_limit = cfg.limits.max_label_value_length if cfg is not None else \
        defaults.MAX_LABEL_VALUE_LENGTH
    if args.max_label_value_length is not None:
        label_limit = args.max_label_value_length
    check_label_limit(label_limit)
    flags = {"per_rule": args.max_series_per_rule, "per_metric": args.max_series_per_metric,
             "per_account": args.max_series_per_account}
    given = {k: v for k, v in flags.items() if v is not None}
    if given:
        limits = replace(limits, series=replace(limits.series, **given))
    return query, tenancy, ts_field, label_limit, limits


def cmd_backfill(args: argparse.Namespace) -> int:
    query, tenancy, ts_field, label_limit, limits = _backfill_settings(args)
    ruleset = _rules(args.rules, query, tenancy, limits)
    from l2m.runtime.app import BackfillOptions, backfill_job

    return backfill_job(ruleset.rules, args.input, args.output, BackfillOptions(
        master=args.master, timestamp_field=ts_field, max_label_value_length=label_limit,
        limits=limits, progress=not args.quiet, strict=args.strict))


def _run_config(args: argparse.Namespace) -> tuple[JobConfig, Tenancy | None]:
    """The job settings of a command that runs rules over logs without Spark (explain,
    validate --estimate) — ``--config``'s, or the defaults with the query flags; the
    timestamp, label and cap flags as backfill takes them — and the tenancy to load the
    rules with."""
    from dataclasses import replace

    from l2m.config.job import JobConfig

    query, tenancy, ts_field, label_limit, limits = _backfill_settings(args)
    cfg = _given_config(args) or JobConfig(text_fields=query.text_fields,
                                           default_fields=query.default_fields)
    return replace(cfg, timestamp_field=ts_field, limits=replace(
        cfg.limits, max_label_value_length=label_limit,
        max_series_per_rule=limits.series.per_rule,
        max_series_per_metric=limits.series.per_metric,
        max_series_per_account=limits.series.per_account)), tenancy


def cmd_test(args: argparse.Namespace) -> int:
    from l2m.authoring.ruletest import run_test_files

    return run_test_files(args.paths, junit=args.junit, only=args.run, verbose=args.verbose,
                          out=sys.stdout)


def cmd_explain(args: argparse.Namespace) -> int:
    from l2m.authoring.explain import explain_command, input_line

    if args.input is not None and args.line is None:
        raise ConfigError("--input needs --line N (the line to explain, 1 = the first)")
    if args.line is not None and args.input is None:
        raise ConfigError("--line goes with --input FILE")
    cfg, tenancy = _run_config(args)
    ruleset = _rules(args.rules, cfg.query_config, tenancy, cfg.limits.series)
    line = args.log if args.log is not None else input_line(args.input, args.line)
    return explain_command(ruleset.rules, line, cfg, rule_id=args.rule, as_json=args.json,
                           out=sys.stdout)


def _load_config(path: str) -> JobConfig:
    from l2m.config.loader import load_config

    return load_config(path)


def _job_config(args: argparse.Namespace) -> JobConfig:
    """``--config``'s job configuration, ``--bootstrap`` (run, deliver) overriding its
    ``bootstrap.servers``."""
    cfg = _load_config(args.config)
    if getattr(args, "bootstrap", None):
        cfg = cfg.with_bootstrap(args.bootstrap)
    return cfg


def _prepare_next_start() -> None:
    # l2m.dev.jvmarchive: a layer above l2m.runtime.app, so handed to it from here.
    from l2m.dev.jvmarchive import build_in_background

    build_in_background()


def cmd_run(args: argparse.Namespace) -> int:
    from l2m.runtime.app import RunOptions, run_job

    return run_job(_job_config(args), RunOptions(once=args.once, duration=args.duration,
                                                 prepare_next_start=_prepare_next_start))


def cmd_deliver(args: argparse.Namespace) -> int:
    from l2m.runtime.app import deliver_job

    return deliver_job(_job_config(args), once=args.once)


def cmd_topology(args: argparse.Namespace) -> int:
    from l2m.runtime.app import job_rules
    from l2m.streaming.topology import describe

    cfg = _load_config(args.config)
    text = describe(cfg, job_rules(cfg).rules)
    print(text, end="")  # the document ends with its own newline
    if args.write:
        Path(args.write).write_text(text)
        print(f"wrote {args.write}", file=sys.stderr)
    return 0


def cmd_broker(args: argparse.Namespace) -> int:
    from l2m.dev.broker import run_broker

    return run_broker(args.port, args.topics, args.partitions)


def cmd_demo(args: argparse.Namespace) -> int:
    from l2m.dev.demo import demo_rules_path, run_demo

    ruleset = _rules([args.rules or demo_rules_path()], QueryConfig())
    return run_demo(ruleset.rules, duration=args.duration, rate=args.rate,
                    hot_share=args.hot_share, port=args.port, rows=args.rows)


def cmd_bench(args: argparse.Namespace) -> int:
    """The benchmark harness in ``benchmarks/`` (a folder of the source tree, not of the
    installed package: run from a checkout). Results go to ``--out``, else to
    ``./bench-results`` in the working directory — never into the source tree (the committed
    results are written by ``python -m benchmarks`` itself)."""
    if not (PACKAGE_ROOT / "benchmarks" / "__main__.py").exists():
        print("l2m bench needs the source checkout (benchmarks/ is not installed)",
              file=sys.stderr)
        return 1
    sys.path.insert(0, str(PACKAGE_ROOT))
    from benchmarks.__main__ import main as bench_main

    out = args.out or str(Path.cwd() / "bench-results")
    size = ["--smoke"] if args.smoke else ["--quick"] if args.quick else []
    return bench_main([*size, "--out", out])


def cmd_generate(args: argparse.Namespace) -> int:
    from l2m.dev.generator import GeneratorConfig, write_logs

    out = write_logs(args.output, args.lines, GeneratorConfig(
        seed=args.seed, rate_per_s=args.rate, malformed_ratio=args.malformed,
        late_ratio=args.late, no_timestamp_ratio=args.no_timestamp))
    print(f"wrote {args.lines} lines to {out}", file=sys.stderr)
    return 0


# --- l2m load (issue 57): argument checks here, the run in l2m.dev.loadcli ----------------

# A bad argument of `l2m load` is one line and exit 2, before any connection is made.
LOAD_USAGE = 2
# After the last log, how long `--watch`/`--prometheus` wait by default (`--drain`) for the
# job to count them all.
LOAD_DRAIN_S = 60.0
# Kafka's own rule for topic names.
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")
# --watch given without a topic: --config's topics.metrics.
_CONFIG_METRICS = "\0config"


class LoadArgumentError(L2mError):
    """A bad argument of ``l2m load``: printed as ``l2m load: message [CODE]``, exit 2."""

    def __init__(self, message: str, code: str = ConfigError.code) -> None:
        super().__init__(message)
        self.code = code


def _load_error(message: str) -> NoReturn:
    # argparse's own errors (missing --rate, an unknown choice) as one line too
    raise LoadArgumentError(message.removeprefix("argument "))


def _number(kind: Callable[[str], float], low: float, high: float, what: str
            ) -> Callable[[str], float]:
    """An argument type: ``kind(text)`` from ``low`` to ``high`` (NaN never is), else
    "expected ``what``"."""
    def parse(text: str) -> float:
        try:
            value: float | None = kind(text)
        except ValueError:
            value = None
        if value is None or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"expected {what}, got '{text}'")
        return value
    return parse


def _load_duration(text: str) -> float:
    from l2m.config.decode import Invalid, parse_duration_ms

    try:
        ms = parse_duration_ms(text)
    except Invalid as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if ms <= 0:
        raise argparse.ArgumentTypeError(f"expected a duration above 0 (e.g. '20s', "
                                         f"'5 minutes'), got '{text}'")
    return ms / 1000


def _bootstrap(text: str) -> str:
    servers = [s.strip() for s in text.split(",")]
    for server in servers:
        host, _, port = server.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536 or " " in host:
            raise argparse.ArgumentTypeError(f"expected HOST:PORT[,HOST:PORT...], got '{text}'")
    return ",".join(servers)


def _add_load_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser],
                     common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("load", parents=[common],
                       help="drive any Kafka with realistic logs at a set rate and skew; "
                       "with --watch, measure the job's latency as users feel it")
    p.error = _load_error  # type: ignore[method-assign]
    p.add_argument("--config", metavar="JOB.yaml",
                   help="the job's configuration: its kafka section (security, SASL, TLS "
                   "files; secrets never printed), topics.logs (--topic's default) and "
                   "topics.metrics (--watch's, given without a topic)")
    p.add_argument("--bootstrap", type=_bootstrap, metavar="HOST:PORT",
                   help="Kafka's bootstrap.servers (overrides --config's)")
    p.add_argument("--topic", help=f"the logs topic (default: --config's topics.logs, else "
                   f"{defaults.LOGS_TOPIC})")
    p.add_argument("--rate", required=True, metavar="LOGS_PER_S",
                   type=_number(float, 0.001, 10_000_000, "logs per second, above 0 and "
                                "at most 10,000,000"), help="logs per second, held steady")
    end = p.add_mutually_exclusive_group(required=True)
    end.add_argument("--duration", type=_load_duration, metavar="DURATION",
                     help="how long to send ('20s', '5 minutes')")
    end.add_argument("--logs", type=_number(int, 1, 10**12, "a whole number of logs, at "
                                            "least 1"), metavar="N", help="how many to send")
    p.add_argument("--drain", type=_load_duration, metavar="DURATION", default=LOAD_DRAIN_S,
                   help=f"after the last log, how long --watch/--prometheus wait for the job "
                   f"to count them all (default {LOAD_DRAIN_S:g}s)")
    p.add_argument("--skew", default="uniform", metavar="uniform|hot:SHARE|zipf:S",
                   help="how logs spread over partitions: evenly, SHARE of them on partition "
                   "0, or partition k weighing 1/k^S (default uniform)")
    p.add_argument("--partitions", metavar="N", type=_number(int, 1, 100_000, "a whole "
                   "number of partitions, at least 1"),
                   help="send to partitions 0..N-1 only (default: all of the topic's)")
    p.add_argument("--accounts", metavar="N", type=_number(int, 0, 1_000_000, "a whole "
                   "number of accounts from 0 to 1,000,000"), default=0,
                   help="spread the logs over N tenant accounts acct-0000… (default 0: "
                   "the generator's acme and globex)")
    p.add_argument("--late-share", metavar="F", default=0.0,
                   type=_number(float, 0, 1, "a share from 0 to 1"),
                   help="share of logs dated 1-30 minutes before they are sent")
    p.add_argument("--malformed-share", metavar="F", default=0.0,
                   type=_number(float, 0, 1, "a share from 0 to 1"),
                   help="share of lines that are not JSON objects")
    p.add_argument("--processes", metavar="N", default=1,
                   type=_number(int, 1, 64, "a whole number of processes from 1 to 64"),
                   help="producer processes sharing the rate (when one cannot keep it)")
    p.add_argument("--watch", nargs="?", const=_CONFIG_METRICS, metavar="METRICS_TOPIC",
                   help="read the job's metrics topic: end-to-end latency of its counter "
                   "samples and its lag (no topic: --config's topics.metrics)")
    p.add_argument("--prometheus", metavar="URL",
                   help="also poll this Prometheus (behind l2m deliver) for "
                   "sum(l2m_input_logs_total): the delay until the logs are queryable")
    p.add_argument("--json", action="store_true", help="print the results as one JSON "
                   "document instead of the table")
    p.add_argument("--plot", metavar="FILE.png",
                   help="also draw rate and latency over time (needs l2m[bench])")
    p.add_argument("--seed", metavar="N", default=7,
                   type=_number(int, 0, 2**32 - 1, "a whole number from 0 to 4294967295"),
                   help="the generator's seed (default 7)")
    p.set_defaults(func=cmd_load)


def _load_plan(args: argparse.Namespace) -> tuple[LoadSpec, dict[str, str], str | None]:
    """The load's spec, the watcher's client settings and the metrics topic to watch (None:
    no --watch), from the arguments; a bad one is a :class:`LoadArgumentError`."""
    from l2m.dev.loadgen import LoadSpec
    from l2m.dev.skew import parse_skew

    cfg = _load_config(args.config) if args.config else None
    if cfg is None and not args.bootstrap:
        raise LoadArgumentError("--bootstrap HOST:PORT or --config JOB.yaml is needed: "
                                "where to send the logs")
    if cfg is not None and args.bootstrap:
        cfg = cfg.with_bootstrap(args.bootstrap)
    kafka = dict(cfg.kafka) if cfg is not None else {"bootstrap.servers": args.bootstrap}
    sink = dict(cfg.sink) if cfg is not None else dict(kafka)
    watch = args.watch
    if watch == _CONFIG_METRICS:
        if cfg is None:
            raise LoadArgumentError("--watch needs the metrics topic (--watch TOPIC), or "
                                    "--config whose topics.metrics it reads")
        watch = cfg.topics.metrics
    topic = args.topic if args.topic is not None else \
        cfg.topics.logs if cfg is not None else defaults.LOGS_TOPIC
    for flag, name in (("--topic", topic), ("--watch", watch)):
        if name is not None and not _TOPIC.fullmatch(name):
            raise LoadArgumentError(f"{flag}: {name!r} is not a Kafka topic name (1 to 249 "
                                    "letters, digits, '.', '_' or '-')")
    if args.prometheus is not None:
        from l2m.dev.loadwatch import prometheus_query_url

        prometheus_query_url(args.prometheus)
    if args.plot is not None:
        import importlib.util

        if importlib.util.find_spec("matplotlib") is None:
            from l2m.dev.loadreport import BENCH_EXTRA

            raise LoadArgumentError(f"--plot needs matplotlib: {BENCH_EXTRA}")
        parent = Path(args.plot).expanduser().resolve().parent
        if not parent.is_dir():
            raise LoadArgumentError(f"--plot: no directory {str(parent)!r} to write "
                                    f"{Path(args.plot).name!r} in")
    if args.late_share + args.malformed_share > 1:
        raise LoadArgumentError("--late-share and --malformed-share add up to more than 1")
    spec = LoadSpec(kafka=kafka, topic=topic, rate=args.rate, duration_s=args.duration,
                    logs=args.logs, skew=parse_skew(args.skew), partitions=args.partitions,
                    accounts=args.accounts, late_share=args.late_share,
                    malformed_share=args.malformed_share, processes=args.processes,
                    seed=args.seed)
    if spec.processes > spec.total:
        raise LoadArgumentError(f"--processes {spec.processes}: more processes than the "
                                f"{spec.total} log(s) to send")
    return spec, sink, watch


def cmd_load(args: argparse.Namespace) -> int:
    """``l2m load``: check every argument (a bad one: one line, exit 2), then run it
    (:func:`l2m.dev.loadcli.run_load_command`)."""
    try:
        spec, sink, watch = _load_plan(args)
    except L2mError as exc:
        print(f"l2m load: {exc.message} [{exc.code}]", file=sys.stderr)
        return LOAD_USAGE
    from l2m.dev.loadcli import run_load_command

    return run_load_command(spec, sink, watch, prometheus=args.prometheus,
                            drain_s=args.drain, as_json=args.json, plot=args.plot)


def build_parser() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                        help="print the full traceback of an error")
    parser = argparse.ArgumentParser(prog="l2m", description="Logs to metrics on Spark.",
                                     parents=[common])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("validate", parents=[common],
                       help="check rule files")
    p.add_argument("paths", nargs="+", help="rule files or directories")
    p.add_argument("--config", help="take query fields, tenancy and series caps from this job "
                   "configuration, as `l2m run` would (default: the defaults)")
    p.add_argument("--list", action="store_true",
                   help="also list each rule: id, type, metric name, unit, description "
                        "(tab-separated)")
    p.add_argument("--estimate", action="append", metavar="LOGS",
                   help="also run the rules over this JSON-lines file or directory (a sample "
                        "of real logs; repeatable) and print each rule's cost: series, the "
                        "largest label, caps hit, live series projected per day at the "
                        "sample's rate (no JVM)")
    p.add_argument("--timestamp-field",
                   help=f"with --estimate: the event-time field (default "
                        f"{defaults.TIMESTAMP_FIELD})")
    _add_limit_options(p)
    _add_query_options(p)
    _add_tenancy_options(p)
    p.set_defaults(func=cmd_validate)

    p = sub.add_parser("test", parents=[common],
                       help="run rule unit tests: input logs, expected samples (no JVM)")
    p.add_argument("paths", nargs="+",
                   help="test files, or directories searched for *.test.yaml files")
    p.add_argument("--junit", metavar="FILE", help="also write the results as JUnit XML")
    p.add_argument("--run", metavar="REGEX",
                   help="only the test cases whose name matches this regular expression")
    p.add_argument("-v", "--verbose", action="store_true",
                   help="list every test case, and each rule's cost per test file")
    p.set_defaults(func=cmd_test)

    p = sub.add_parser("explain", parents=[common],
                       help="why one log did or did not count, rule by rule (no JVM)")
    p.add_argument("--rules", nargs="+", required=True, help="rule files or directories")
    p.add_argument("--rule", metavar="ID", help="only this rule")
    given = p.add_mutually_exclusive_group(required=True)
    given.add_argument("--log", metavar="JSON", help="the log, one JSON object")
    given.add_argument("--input", metavar="FILE", help="a JSON-lines file (with --line)")
    p.add_argument("--line", type=int, metavar="N", help="with --input: the line (1 = first)")
    p.add_argument("--json", action="store_true", help="machine-readable: one JSON document")
    p.add_argument("--timestamp-field",
                   help=f"the event-time field (default {defaults.TIMESTAMP_FIELD})")
    p.add_argument("--config", help="take limits, tenancy, query fields, the timestamp field, "
                   "the grace and the future skew from this job configuration, as `l2m run` "
                   "would")
    _add_limit_options(p)
    _add_query_options(p)
    _add_tenancy_options(p)
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser("backfill", parents=[common],
                       help="run the rules over JSON-lines files (Spark batch)")
    p.add_argument("--rules", nargs="+", required=True, help="rule files or directories")
    p.add_argument("--input", nargs="+", required=True, help="JSON-lines files or directories")
    p.add_argument("--output", required=True, help="file to write samples to (JSON lines)")
    p.add_argument("--master", default=defaults.MASTER, help="Spark master (default %(default)s)")
    p.add_argument("--timestamp-field",
                   help=f"the event-time field (default {defaults.TIMESTAMP_FIELD})")
    p.add_argument("--quiet", action="store_true", help="no progress, no summary")
    p.add_argument("--strict", action="store_true",
                   help="fail on a corrupt or unreadable input file instead of skipping it")
    p.add_argument("--config", help="take limits, tenancy, query fields and the timestamp "
                   "field from this job configuration, as `l2m run` would (--text-fields, "
                   "--default-fields and --timestamp-field are then refused; the limit flags "
                   "below override its limits)")
    _add_limit_options(p)
    _add_query_options(p)
    _add_tenancy_options(p)
    p.set_defaults(func=cmd_backfill)

    p = sub.add_parser("generate", parents=[common],
                       help="write realistic JSON logs (for trying rules)")
    p.add_argument("--lines", type=int, default=10_000)
    p.add_argument("--output", required=True, help="JSON-lines file (.gz to compress)")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--rate", type=float, default=50.0, help="logs per second of event time")
    p.add_argument("--malformed", type=float, default=0.0, help="share of malformed lines")
    p.add_argument("--late", type=float, default=0.0, help="share of late logs")
    p.add_argument("--no-timestamp", type=float, default=0.0, help="share without @timestamp")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("run", parents=[common],
                       help="the streaming job against Kafka")
    p.add_argument("--config", required=True, help="job configuration (see topology/)")
    p.add_argument("--once", action="store_true",
                   help="process everything available now, then exit (availableNow)")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--bootstrap", help="override kafka bootstrap.servers")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("deliver", parents=[common],
                       help="the metrics topic → Prometheus remote-write endpoints")
    p.add_argument("--config", required=True,
                   help="job configuration with a remote_write section (docs/prometheus.md)")
    p.add_argument("--once", action="store_true",
                   help="deliver what the topic holds, then exit (after 3 s without records)")
    p.add_argument("--bootstrap", help="override kafka bootstrap.servers")
    p.set_defaults(func=cmd_deliver)

    p = sub.add_parser("topology", parents=[common],
                       help="print the streaming job's stage graph")
    p.add_argument("--config", required=True)
    p.add_argument("--write", metavar="FILE", help="also write it to FILE (topology/TOPOLOGY.md)")
    p.set_defaults(func=cmd_topology)

    p = sub.add_parser("broker", parents=[common],
                       help="run the embedded Kafka-compatible broker (tansu)")
    p.add_argument("--port", type=int, default=9092)
    p.add_argument("--topics", nargs="*", default=[], help="topics to create")
    p.add_argument("--partitions", type=int, default=4)
    p.set_defaults(func=cmd_broker)

    p = sub.add_parser("bench", parents=[common],
                       help="run the benchmark harness (benchmarks/)")
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true",
                      help="tiny data, a few minutes (a smoke test of the harness)")
    size.add_argument("--smoke", action="store_true",
                      help="every scenario once on hundreds of logs, one-second triggers "
                      "(the harness's own test)")
    p.add_argument("--out", help="results folder (default ./bench-results)")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("demo", parents=[common],
                       help="the embedded default: broker, log generator, "
                       "streaming job, live metrics")
    p.add_argument("--duration", type=float, help="stop after this many seconds")
    p.add_argument("--rate", type=float, default=200.0, help="logs per second")
    p.add_argument("--hot-share", type=float, default=0.0,
                   help="share of logs sent to partition 0 (skew)")
    p.add_argument("--port", type=int, help="broker port (default: a free one)")
    p.add_argument("--rows", type=int, default=30, help="series shown")
    p.add_argument("--rules", help="rules path (default: the example rules)")
    p.set_defaults(func=cmd_demo)

    _add_load_parser(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. Errors are one line, ``l2m: error [CODE]: message`` with the real cause
    (exit 1); ``--debug`` adds the traceback."""
    parser = build_parser()
    try:
        args, unknown = parser.parse_known_args(argv)
    except LoadArgumentError as exc:
        print(f"l2m load: {exc.message} [{exc.code}]", file=sys.stderr)
        return LOAD_USAGE
    if unknown:
        message = f"unrecognized arguments: {' '.join(unknown)}"
        if args.command == "load":
            print(f"l2m load: {message} [{ConfigError.code}]", file=sys.stderr)
            return LOAD_USAGE
        parser.error(message)
    debug = getattr(args, "debug", False)
    if debug:  # Spark's own failure logs too, with their stack traces (runtime/session.py)
        import os

        os.environ["L2M_DEBUG"] = "1"
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("l2m: interrupted", file=sys.stderr)
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`l2m validate --list | head`): nothing more to say, and the
        # interpreter's own flush at exit must not fail on the closed pipe either.
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except RuleValidationError as exc:
        _print_problems(exc.problems)
        print(f"{len(exc.errors)} error(s)", file=sys.stderr)
        return 1
    except Exception as exc:
        from l2m.runtime.failures import failure

        if debug:
            import traceback

            traceback.print_exc()
        error = exc if isinstance(exc, L2mError) else failure(exc)
        print(error.render(), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
