"""The application: what each long-running command puts together, so that the command line
(:mod:`l2m.cli`) only reads its arguments and dispatches.

* :func:`run_job` — ``l2m run``: the rules it starts with (the rule files', else the last
  good set the checkpoint keeps), live rules (:class:`~l2m.runtime.reload.RuleWatcher`), the
  driver's metrics and their endpoint, the :class:`~l2m.runtime.runner.Runner`, and what
  prepares the next start (the JVM class-data archive);
* :func:`deliver_job` — ``l2m deliver``: SIGTERM as a stop, the rules' metadata,
  :func:`l2m.runtime.deliver.deliver`;
* :func:`backfill_job` — ``l2m backfill``: its paths checked, a batch session,
  :func:`l2m.batch.backfill.run_backfill`, the session stopped.

Input: a loaded :class:`~l2m.config.job.JobConfig` (or, for backfill, rules and settings)
and the command's options. Output: the exit code; the command's lines on ``out`` (standard
error by default, looked up when called). Errors are raised as :class:`~l2m.errors.L2mError`
for the command line to print. Heavy modules (pyspark, the engine) are imported only inside
the functions: ``l2m validate`` imports none of them."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from l2m.config.job import JobConfig
    from l2m.policy.limits import Limits
    from l2m.rules.model import Rule, RuleSet
    from l2m.runtime.endpoint import Endpoint
    from l2m.runtime.reload import ReloadStatus, RuleWatcher
    from l2m.runtime.telemetry import Telemetry


def job_rules(cfg: JobConfig) -> RuleSet:
    """The job's rules: its rule paths, loaded and validated with its query fields, tenancy
    and series caps (a :class:`~l2m.errors.RuleValidationError` with every problem)."""
    from l2m.rules.loader import load_rules

    return load_rules(cfg.rules, cfg.query_config, cfg.rule_tenancy, cfg.limits.series)


@dataclass(frozen=True)
class RunOptions:
    """How ``l2m run`` runs: ``once`` (what is available now, then exit), ``duration`` (stop
    after this many seconds; None: until stopped), ``out`` (its lines; None: standard error)
    and ``prepare_next_start`` (called once the query runs — after the run with ``once``, so
    as not to take a core from it —; the command line passes
    :func:`l2m.dev.jvmarchive.build_in_background`, which this layer may not import)."""

    once: bool = False
    duration: float | None = None
    out: TextIO | None = None
    prepare_next_start: Callable[[], object] | None = None


def run_job(cfg: JobConfig, options: RunOptions = RunOptions()) -> int:
    """Run the streaming job until it is stopped, ``options.duration`` passes, it fails, or
    (``once``) it ends; the exit code (0, or 1 when it failed). On rule files that do not
    validate it starts with the last good set the checkpoint keeps, said on ``out`` and on
    ``/metrics``; without one it raises. The metrics endpoint (``monitoring.port``) answers
    before Spark starts (not ready yet) and is closed, and Spark stopped, on the way out."""
    from l2m.runtime.reload import rules_at_start
    from l2m.runtime.runner import Runner
    from l2m.runtime.session import stop_at_exit
    from l2m.runtime.telemetry import RunObserver

    out = options.out or sys.stderr

    def last_good() -> tuple[str, tuple[Rule, ...]] | None:
        from l2m.streaming.rulesets import last_good_rules  # only then: the engine's imports

        return last_good_rules(cfg)

    # Continuous and --once alike (docs/streaming.md "Live rule changes").
    ruleset, status = rules_at_start(lambda: job_rules(cfg), last_good, out, once=options.once)
    telemetry = _telemetry(cfg, ruleset.enabled, status)
    watcher = None if options.once else _watcher(cfg, ruleset, status, out, telemetry)
    runner = Runner(cfg, ruleset.rules, once=options.once, watcher=watcher, rules_status=status,
                    telemetry=telemetry if telemetry is not None else RunObserver())
    runner.install_signals()
    endpoint = _endpoint(cfg, telemetry, watcher)
    print(f"l2m run: {len(ruleset.enabled)} rules, topic {cfg.topics.logs} on "
          f"{cfg.kafka['bootstrap.servers']}, checkpoint {cfg.checkpoint}"
          + (" (once)" if options.once else "")
          + (f", metrics on :{endpoint.port}/metrics" if endpoint else ""),
          file=out, flush=True)
    try:
        runner.start()
        if not options.once and options.prepare_next_start is not None:
            options.prepare_next_start()  # a roll-out's or a restart's start, about 4 s sooner
        code = runner.wait(duration=options.duration)
        if options.once and options.prepare_next_start is not None:
            options.prepare_next_start()  # the next scheduled catch-up, about 9 s sooner
        return code
    finally:
        if runner.spark is not None:
            stop_at_exit(runner.spark)
        runner.closed()
        if endpoint is not None:
            endpoint.close()


def _telemetry(cfg: JobConfig, rules: Sequence[Rule], status: ReloadStatus
               ) -> Telemetry | None:
    """The driver's metrics, when the job serves them (``monitoring.port``)."""
    if cfg.monitoring.port is None:
        return None
    from l2m.runtime.telemetry import Telemetry

    return Telemetry(cfg, rules, reload=status)


def _watcher(cfg: JobConfig, ruleset: RuleSet, status: ReloadStatus, out: TextIO,
             telemetry: Telemetry | None) -> RuleWatcher:
    """Live rules: the rule files watched, a changed set validated and published while the
    job runs, the per-rule metrics following it."""
    from l2m.runtime.reload import RuleWatcher

    watcher = RuleWatcher(cfg.rules, lambda: job_rules(cfg), cfg.rules_poll_ms / 1000, out=out,
                          status=status,
                          on_change=None if telemetry is None else
                          lambda changed: telemetry.rules_changed(changed.rules))
    watcher.started(ruleset)
    return watcher


def _endpoint(cfg: JobConfig, telemetry: Telemetry | None, watcher: RuleWatcher | None
              ) -> Endpoint | None:
    """``/metrics``, ``/healthz``, ``/readyz`` (and ``POST /-/reload`` with live rules),
    listening from now on."""
    if telemetry is None or cfg.monitoring.port is None:
        return None
    from l2m.runtime.endpoint import Endpoint

    return Endpoint(telemetry, cfg.monitoring.host, cfg.monitoring.port,
                    reload=watcher.ask if watcher is not None else None)


def deliver_job(cfg: JobConfig, once: bool = False, out: TextIO | None = None) -> int:
    """Deliver the metrics topic to the configured remote-write endpoints until SIGTERM or
    Ctrl-C (``once``: until the topic has given nothing for a while); the exit code. The
    job's rules are loaded first: their metadata goes with their samples."""
    import signal
    import threading

    from l2m.runtime.deliver import deliver, endpoint_name
    from l2m.runtime.signals import setting

    out = out or sys.stderr
    stop = threading.Event()
    signal.signal(signal.SIGTERM, setting(stop))  # never Event.set in a handler
    # Named as its metrics label it (never the URL: it may hold credentials).
    names = ", ".join(endpoint_name(e) for e in cfg.remote_write.endpoints)
    print(f"l2m deliver: topic {cfg.topics.metrics} on {cfg.sink['bootstrap.servers']} → "
          f"{names or 'no endpoints'}" + (" (once)" if once else ""), file=out, flush=True)
    rules = job_rules(cfg).rules
    try:
        deliver(cfg, once=once, stop=stop, rules=rules)
    except KeyboardInterrupt:
        stop.set()
    return 0


@dataclass(frozen=True)
class BackfillOptions:
    """How ``l2m backfill`` reads and writes: the Spark ``master``, the event-time field,
    the label value limit, the series caps, ``progress`` lines and the summary on ``out``
    (None: standard error), and ``strict`` (a corrupt or unreadable input file fails the
    run instead of being skipped)."""

    master: str
    timestamp_field: str
    max_label_value_length: int
    limits: Limits
    progress: bool = True
    strict: bool = False
    out: TextIO | None = None


def backfill_job(rules: Sequence[Rule], inputs: Sequence[str], output: str,
                 options: BackfillOptions) -> int:
    """Run the rules over JSON-lines files into ``output`` (samples as JSON lines) on a batch
    session, stopped on the way out; the exit code. Paths and the label limit are checked
    before Spark starts."""
    from l2m.batch.backfill import check_paths, run_backfill
    from l2m.policy.limits import check_label_limit
    from l2m.runtime.session import BATCH_JIT, build_session, stop_at_exit

    out = options.out or sys.stderr
    check_paths(inputs, output)
    check_label_limit(options.max_label_value_length)
    spark = build_session(options.master, "l2m-backfill", jit=BATCH_JIT)
    try:
        summary = run_backfill(spark, rules, inputs, output, options.timestamp_field,
                               progress=options.progress, strict=options.strict,
                               max_label_value_length=options.max_label_value_length,
                               limits=options.limits)
    finally:
        stop_at_exit(spark)
    if options.progress:
        print(summary.render(), file=out)
    print(f"wrote {summary.samples} samples to {output}", file=out)
    return 0
