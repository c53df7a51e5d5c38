"""Running the streaming job: session, the query, progress lines, graceful shutdown, and
riding out Kafka outages.

Input: a :class:`~l2m.config.job.JobConfig` and the rules. Output: the running query, one
progress line per micro-batch on ``out``, and an exit code (0 stopped or finished, 1 failed). A
query that fails because Kafka cannot be reached (sink, dead letters, offsets, records) is started
again on the same checkpoint after a backoff (1 s doubling to 60 s), for as long as the outage
lasts; the batch it was running is replayed."""

from __future__ import annotations

import contextlib
import faulthandler
import itertools
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from pyspark.sql import SparkSession
from pyspark.sql.streaming import StreamingQuery

from l2m.config.job import JobConfig
from l2m.errors import INTERRUPTED, L2mError
from l2m.rules.model import Rule
from l2m.runtime.failures import failure, retriable
from l2m.runtime.progress import describe, ran_a_batch
from l2m.runtime.reload import ReloadStatus, RuleWatcher
from l2m.runtime.session import build_session
from l2m.runtime.signals import SignalRelay
from l2m.runtime.sparkstatus import BatchTasks, ExecutorLoad
from l2m.runtime.telemetry import RunObserver
from l2m.state.checkpoint import check_checkpoint
from l2m.state.tally import RefusedCount
from l2m.streaming.job import QUERY, Job, start_job, stop_file, streaming_conf

# After a second signal: how long the ordinary way out (the KeyboardInterrupt unwinding, then
# Spark's stop) may take before l2m stops Spark's context itself, and how long that may take
# before the process exits anyway; then, Spark stopped, how long the process's own exit may
# take. All three within the 30 s a kubelet gives by default.
HARD_STOP_S = 12.0
CONTEXT_STOP_S = 8.0
EXIT_GRACE_S = 5.0
LAST_RESORT_S = 2.0  # past the grace, when Python's own exit is what hangs (_guard_exit)


def session_for(cfg: JobConfig) -> SparkSession:
    conf = {**streaming_conf(cfg.checkpoint), **cfg.spark}
    return build_session(cfg.master, "l2m", conf)


@dataclass
class Runner:
    """Starts the job and watches it. ``stop()`` (or SIGINT/SIGTERM via
    :meth:`install_signals`) lets the running micro-batch finish, then stops the query."""

    cfg: JobConfig
    rules: Sequence[Rule]
    once: bool = False
    out: TextIO | None = sys.stderr  # None: no progress lines (the demo draws its own)
    on_progress: Callable[[str, dict[str, Any]], None] | None = None
    spark: SparkSession | None = None
    job: Job | None = None
    retry: bool = True  # restart the query after Kafka outages (backoff) instead of failing
    max_backoff_s: float = 60.0
    error: L2mError | None = None  # why the job failed, when it did
    restarts: int = 0
    # Told of starts, ticks, batches, failures and stops: the driver's metrics
    # (docs/metrics.md, :class:`~l2m.runtime.telemetry.Telemetry`) or, by default, nobody.
    telemetry: RunObserver = field(default_factory=RunObserver)
    watcher: RuleWatcher | None = None  # live rules: changed rule files applied while running
    # What /metrics shows of the rules (the watcher's own when there is one; --once: the
    # start's, a refusal of the rule files among it).
    rules_status: ReloadStatus | None = None
    _tasks: BatchTasks | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _now: threading.Event = field(default_factory=threading.Event)  # a second signal
    # The signals so far (next() is one C call: a nested handler cannot lose a count), and
    # the second one's request, read by the main thread without a lock.
    _signalled: Iterator[int] = field(default_factory=itertools.count)
    _now_requested: bool = False
    _relay: SignalRelay | None = None  # where the handler hands its work (lock-free)
    # Per query, the last progress reported: (batch id, whether it ran a batch). Spark also
    # reports a trigger that found no data, under the id of the batch it would run next,
    # so the batch that then runs under that id is new although its id was seen.
    _seen: dict[str, tuple[int, bool]] = field(default_factory=dict)
    _counted: tuple[int, int, int] = (0, 0, 0)
    _progressed: bool = False
    _signals: bool = False  # install_signals was called: keep them installed
    _refusals: RefusalLog = field(default_factory=lambda: RefusalLog())
    _closed: threading.Event = field(default_factory=threading.Event)  # Spark stopped
    _hard_stop: threading.Thread | None = None
    _exit: Callable[[int], None] = os._exit  # the hard stop's way out (tests: a recorder)
    # What the command must undo even when the hard stop ends the process (``os._exit`` runs
    # no ``finally``): the demo's embedded broker, its scratch folder. Called in order, each
    # error ignored, before the exit.
    at_hard_stop: list[Callable[[], None]] = field(default_factory=list)

    def start(self) -> Job | None:
        """Start the query (after the session, when there is none yet). None when a stop was
        requested while Spark started: a query started only to be stopped at once would
        leave its half-initialised source processes complaining."""
        marker = Path(stop_file(self.cfg))
        marker.unlink(missing_ok=True)  # left over from a stop that did not finish
        check_checkpoint(self.cfg.checkpoint, QUERY)  # before the slow part: Spark
        if self.spark is None:
            self.spark = session_for(self.cfg)
            if self._signals:
                # pyspark's SparkContext replaces the SIGINT handler with one that cancels
                # every job and raises KeyboardInterrupt (a traceback, no graceful stop).
                self.install_signals()
        if self._stop.is_set():
            self.job = None
            return None
        self.job = start_job(self.spark, self.cfg, self.rules, once=self.once)
        status = self.watcher.status if self.watcher is not None else self.rules_status
        if status is not None and self.job.rulesets is not None and not status.version:
            status.version = self.job.rulesets.version
            status.loaded_at = self.job.rulesets.loaded_at
        self._counted = (0, 0, 0)  # a new query has new accumulators
        self.telemetry.started(self.job.counts)
        return self.job

    def install_signals(self) -> None:
        if self._relay is None:
            self._relay = SignalRelay()
        relay = self._relay

        def handler(signum: int, _frame: Any) -> None:
            # No lock taken here, not even an Event's (l2m.runtime.signals): the relay's thread
            # prints and sets the events. is_set() reads a flag: a stop already under way
            # (stop()) makes the first signal a second.
            if next(self._signalled) or self._stop.is_set():  # a second Ctrl-C: stop now
                self._now_requested = True
                relay.call(self._stop_now)
                raise KeyboardInterrupt
            relay.call(self._stop_gracefully, signum)

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)
        if self.watcher is not None:
            watcher = self.watcher
            signal.signal(signal.SIGHUP, lambda *_: watcher.request())
        self._signals = True

    def stop(self) -> None:
        self._stop.set()

    def _stop_gracefully(self, signum: int) -> None:
        """A first signal (the relay's thread): the running batch finishes, then the query
        stops."""
        print(f"\nl2m: {signal.Signals(signum).name} received, finishing the current batch…",
              file=self.out, flush=True)
        self._stop.set()

    def _stop_now(self) -> None:
        """A second signal (the relay's thread; the handler raised KeyboardInterrupt in the
        main thread): the hard stop armed, then the events set."""
        self._arm_hard_stop()
        self._stop.set()
        self._now.set()

    def closed(self) -> None:
        """Spark is stopped (the command's last step): the hard stop need not stop it, and
        only sees that the process exits (:meth:`_guard_exit`)."""
        if self._now_requested:
            self._now.wait(1)  # the relay's thread arms the hard stop first, then sets this
        if self._hard_stop is not None and not self._closed.is_set():
            # Armed here, not in the hard stop's thread: the main thread may reach Python's
            # own exit before that thread runs again, and then it never does.
            faulthandler.dump_traceback_later(EXIT_GRACE_S + LAST_RESORT_S, exit=True, file=2)
        self._closed.set()

    def _arm_hard_stop(self) -> None:
        """Make sure a second signal ends the process, wherever the main thread is. Its
        KeyboardInterrupt unwinds the main thread to the command's stop of Spark, unless the
        thread sits in a JVM call that does not return (a query's stop waiting for a batch
        whose executors never come: the flaky k8s test) or a finalizer swallows it. Then,
        after :data:`HARD_STOP_S`, this thread stops Spark's context itself — jobs
        cancelled, executors released (on Kubernetes their pods deleted) — waits for that at
        most :data:`CONTEXT_STOP_S`, and exits with :data:`INTERRUPTED`. Once Spark is
        stopped, it still sees that the process exits (:meth:`_guard_exit`)."""
        if self._hard_stop is not None:
            return
        self._hard_stop = threading.Thread(target=self._stop_hard, name="l2m-hard-stop",
                                           daemon=True)
        self._hard_stop.start()

    def _stop_hard(self) -> None:
        if self._closed.wait(HARD_STOP_S):
            self._guard_exit()
            return
        print(f"l2m: interrupted; Spark did not stop within {HARD_STOP_S:.0f} s of the second "
              "signal: stopping its context and exiting", file=sys.stderr, flush=True)
        spark = self.spark
        deadline = time.monotonic() + CONTEXT_STOP_S
        if spark is not None:
            stopper = threading.Thread(target=_stop_context, args=(spark,),
                                       name="l2m-context-stop", daemon=True)
            stopper.start()
            stopper.join(CONTEXT_STOP_S)
            # A stop already under way in the main thread makes the JVM's stop return at
            # once: that one is given the rest of the time to finish (executors deleted),
            # and when it does, the command exits its own way.
            if self._closed.wait(max(0.0, deadline - time.monotonic())):
                self._guard_exit()
                return
        self._end()

    def _guard_exit(self) -> None:
        """Spark is stopped after a second signal, and the process is on its way out: if it
        has not exited :data:`EXIT_GRACE_S` later, it ends here, with the threads still
        running named. A CI run of the Kubernetes SIGTERM test saw l2m print "interrupted"
        and still be there 30 s later, with nothing left to end it.

        Should Python's own exit be what hangs, this thread ends with the interpreter
        (daemon threads stop when it finalizes); faulthandler's watchdog (armed by
        :meth:`closed`), which needs no interpreter, then ends the process
        :data:`LAST_RESORT_S` later — exit code 1, every thread's stack on stderr."""
        time.sleep(EXIT_GRACE_S)
        faulthandler.cancel_dump_traceback_later()
        alive = sorted(t.name for t in threading.enumerate()
                       if t is not threading.current_thread() and t.is_alive())
        print(f"l2m: interrupted; the process did not exit within {EXIT_GRACE_S:g} s of "
              f"Spark's stop (threads: {', '.join(alive) or 'none'}): exiting",
              file=sys.stderr, flush=True)
        self._end()

    def _end(self) -> None:
        """Undo what must not outlive the process (:attr:`at_hard_stop`), then exit with
        :data:`INTERRUPTED` at once (no ``finally`` runs)."""
        for undo in self.at_hard_stop:
            with contextlib.suppress(Exception):
                undo()
        with contextlib.suppress(Exception):
            sys.stdout.flush()
        self._exit(INTERRUPTED)

    def _interrupted(self) -> None:
        """Raise the second signal's KeyboardInterrupt again: where the handler raised it, a
        finalizer may have been talking to the JVM (py4j's JavaObject.__del__), and Python
        prints an exception raised in a finalizer and goes on — l2m then waited out the
        graceful stop it was asked to cut short."""
        if self._now_requested:
            raise KeyboardInterrupt

    def wait(self, duration: float | None = None, poll: float = 1.0,
             on_tick: Callable[[], None] | None = None) -> int:
        """Watch until stopped, ``duration`` passes, the query fails, or (``once``) it ends.
        Returns the exit code: 0, or 1 if a query failed."""
        deadline = time.monotonic() + duration if duration else None
        backoff = 1.0
        while True:
            self._interrupted()
            if self.job is None:  # stopped while (re)starting
                return 0
            self._report()
            self._reload()
            self.telemetry.tick()
            if on_tick is not None:
                on_tick()
            failed = [q for q in self.job.queries if q.exception() is not None]
            if failed:
                error = failure(failed[0].exception())
                self._shutdown()
                self.telemetry.failed_batch(error.code)
                if not (self.retry and retriable(error)):
                    return self._failed(error)
                self._say(f"l2m: {error.code.lower().replace('_', ' ')}: {error.message}; "
                          f"retrying in {backoff:.0f} s (the batch will be replayed)")
                if self._stop.wait(backoff) or (deadline is not None
                                                and time.monotonic() > deadline):
                    return 0
                backoff = min(backoff * 2, self.max_backoff_s)
                self.restarts += 1
                self.telemetry.restarted(error.code)
                try:
                    self.start()
                except Exception as exc:  # Kafka still down while the query starts
                    error = failure(exc)
                    if not retriable(error):
                        return self._failed(error)
                    self._say(f"l2m: {error.message}; retrying")
                continue
            if self._progressed:
                backoff = 1.0  # progress again: the next outage starts from a short wait
                self._progressed = False
            if all(not q.isActive for q in self.job.queries):
                self._report()
                self.job.close()
                return 0
            if self._stop.is_set() or (deadline is not None and time.monotonic() > deadline):
                self._shutdown()
                return 0
            if self.once:
                self._await_end(poll)
            else:
                self._stop.wait(poll)

    def _reload(self) -> None:
        """Apply changed rules (:mod:`l2m.runtime.reload`); a query started again after an
        outage starts with the newest good set."""
        if self.watcher is None or self.job is None or self.job.rulesets is None:
            return
        if self.watcher.check(self.job.rulesets):
            self.rules = self.watcher.rules
        self.job.rulesets.tidy()

    def _await_end(self, timeout: float) -> None:
        """Until a query of a ``once`` run ends, at most ``timeout`` seconds: its end is seen
        at once, not at the next poll (a whole ``--once`` run was up to a poll longer)."""
        assert self.job is not None
        active = [q for q in self.job.queries if q.isActive]
        if active:
            with contextlib.suppress(Exception):  # a failure: seen by the loop's next turn
                active[0].awaitTermination(max(1, round(timeout)))

    def _failed(self, error: L2mError) -> int:
        """Record and say why the job stops; the exit code."""
        self.error = error
        self.telemetry.failed_job()
        self._say(error.render())
        return 1

    def _say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)

    def _report(self) -> None:
        assert self.job is not None
        for query in self.job.queries:
            name = (query.name or "query").removeprefix("l2m-")
            for progress in query.recentProgress:
                seen = (int(progress.get("batchId", -1)), ran_a_batch(progress))
                if seen <= self._seen.get(name, (-1, True)):
                    continue
                self._seen[name] = seen
                self._progressed = True
                rows_in, rows_out, late = self._counts()
                self._observe(progress)
                if self.on_progress:
                    self.on_progress(name, progress)
                if self.out is not None:
                    print(describe(name, progress, (rows_in, rows_out), late), file=self.out,
                          flush=True)
                    if self.job.counts is not None and self.job.counts.activity is not None:
                        for line in self._refusals.lines(self.job.counts.activity.value):
                            print(line, file=self.out, flush=True)

    def _observe(self, progress: dict[str, Any]) -> None:
        """Hand a completed batch to the metrics, with what each executor did in it (read
        only when they use it)."""
        if not self.telemetry.per_executor:
            self.telemetry.batch(progress)
            return
        loads: dict[str, ExecutorLoad] | None = None
        registered = None
        try:
            if self._tasks is None and self.spark is not None:
                self._tasks = BatchTasks(self.spark)
            if self._tasks is not None:
                loads = self._tasks.loads(str(progress.get("runId")),
                                          int(progress.get("batchId", -1)))
                registered = self._tasks.registered()
        except Exception:  # Spark's bookkeeping is best effort; the job is not
            loads = None
        self.telemetry.batch(progress, loads, registered)

    def _counts(self) -> tuple[int, int, int]:
        """Pre-aggregation rows in and out, and late logs dropped, since the last report."""
        assert self.job is not None
        if self.job.counts is None:
            return 0, 0, 0
        c = self.job.counts
        now = (c.reduction.rows_in.value, c.reduction.rows_out.value, c.late.value)
        delta = (now[0] - self._counted[0], now[1] - self._counted[1], now[2] - self._counted[2])
        self._counted = now
        return delta

    def _shutdown(self) -> None:
        """Graceful stop: the sources stop admitting data (stop file), running batches
        complete — their samples flushed and acknowledged by the sink before they commit —
        then the queries stop."""
        assert self.job is not None
        self.telemetry.stopping()
        marker = Path(stop_file(self.cfg))
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.touch()
        try:
            deadline = time.monotonic() + 120
            for query in self.job.queries:
                idle = 0
                while idle < 3 and time.monotonic() < deadline:
                    self._interrupted()
                    idle = idle + 1 if not _busy(query) else 0
                    time.sleep(0.1)
                query.stop()
        finally:
            marker.unlink(missing_ok=True)
        self._report()
        self.job.close()


@dataclass
class RefusalLog:
    """The first refusal of each rule per hour (``every_s``) as a line: a rule past its series
    cap is news once, not once per batch. ``clock``: seconds, monotonic."""

    every_s: float = 3600.0
    clock: Callable[[], float] = time.monotonic
    _seen: dict[Any, float] = field(default_factory=dict)  # refusal key → logs last seen
    _said: dict[str, float] = field(default_factory=dict)  # rule → when last logged

    def lines(self, activity: dict[Any, float]) -> list[str]:
        """Lines for the rules whose refusals grew since the last call (the query's
        accumulator: it restarts at 0 with each query)."""
        out = []
        now = self.clock()
        for key, logs in sorted(activity.items(), key=lambda kv: str(kv[0])):
            if not isinstance(key, RefusedCount):
                continue
            before = self._seen.get(key, 0.0)
            self._seen[key] = logs
            grew = logs - before if logs >= before else logs
            said = self._said.get(key.rule)
            if grew <= 0 or (said is not None and now - said < self.every_s):
                continue
            self._said[key.rule] = now
            account = f" (account {key.account})" if key.account else ""
            out.append(f"l2m: rule '{key.rule}'{account} is at its {key.limit} series cap: "
                       f"{grew:.0f} log(s) of new series counted into its overflow series "
                       f"(l2m_overflow=\"true\"); counted in l2m_series_refused_total, next "
                       f"line for this rule in an hour at the earliest")
        return out


def _stop_context(spark: SparkSession) -> None:
    """Stop the JVM's SparkContext directly (its own once-only guard makes a stop already
    under way in another thread a no-op), not through pyspark's ``stop``, whose Python-side
    bookkeeping may be what the main thread is in the middle of."""
    with contextlib.suppress(Exception):  # the process exits next whatever happens here
        spark.sparkContext._jsc.stop()


def _busy(query: StreamingQuery) -> bool:
    try:
        status = query.status
        # A query still initialising its source (the planner process starting) counts as
        # busy: stopped then, that process dies mid-handshake with a traceback.
        return bool(query.isActive and (status.get("isTriggerActive") or str(
            status.get("message", "")).startswith("Initializing")))
    except Exception:
        return False
