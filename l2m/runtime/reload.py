"""Live rule changes on the driver (SPEC §8, docs/streaming.md "Live rule changes"): notice a
changed rule set, validate it whole, and hand a good one to the running query.

Input: the job's rule paths (files, folders, tenant roots; on Kubernetes a ConfigMap mounted
as a folder, which the kubelet swaps in place), a loader that validates them (the same as at
start), and requests (SIGHUP, ``POST /-/reload``). Output: each good set published to the
query (:class:`~l2m.streaming.rulesets.RulesetPublisher`: the next planned micro-batch uses
it); each refused set's problems printed, one per line with its file and position, while the
job keeps its last good set; the outcome kept for ``/metrics`` (:class:`ReloadStatus`).

A change is noticed by a fingerprint of the paths — every file's path, size and modification
time — taken at most every ``rules_poll`` (a ConfigMap update replaces the files, so their
times change); only a changed fingerprint or a request loads and validates the rules."""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from l2m.errors import L2mError, RuleValidationError
from l2m.rules.model import Rule, RuleSet


class Publisher(Protocol):
    """Where a good rule set goes (:class:`l2m.streaming.rulesets.RulesetPublisher`)."""

    def publish(self, rules: Sequence[Rule]) -> str: ...


def fingerprint(paths: Iterable[str]) -> str:
    """A digest of every file under ``paths`` (path, size, modification time); a missing
    path counts as such, so its coming back is a change too."""
    entries: list[str] = []

    def walk(path: str) -> None:
        try:
            with os.scandir(path) as found:
                children = sorted(found, key=lambda e: e.name)
        except NotADirectoryError:
            try:
                st = os.stat(path)
            except OSError:
                entries.append(f"{path}\0missing")
                return
            entries.append(f"{path}\0{st.st_size}\0{st.st_mtime_ns}")
            return
        except OSError:
            entries.append(f"{path}\0missing")
            return
        for child in children:
            # The kubelet's own entries (..data, ..2024_…) are what the visible names link
            # to: following the visible names is enough and sees every swap.
            if child.name.startswith(".."):
                continue
            walk(child.path)

    for path in paths:
        walk(path)
    return hashlib.sha256("\n".join(entries).encode()).hexdigest()


@dataclass
class ReloadStatus:
    """What ``/metrics`` shows of live rules (docs/metrics.md)."""

    version: str = ""
    loaded_at: float = 0.0  # s since the epoch
    rules: int = 0
    successes: int = 0
    failures: int = 0
    last_ok: bool = True
    last_at: float = 0.0  # the last attempt, good or not
    last_error: str = ""


    def refused(self, error: L2mError) -> None:
        """A rule set refused (its ``error``), the job going on with its last good one."""
        self.failures += 1
        self.last_ok = False
        self.last_error = error.code
        self.last_at = time.time()


# The rule set a job last ran (l2m.streaming.rulesets.last_good_rules): its version and rules.
LastGood = tuple[str, tuple[Rule, ...]]


def rules_at_start(load: Callable[[], RuleSet], last_good: Callable[[], LastGood | None],
                   out: TextIO, once: bool = False) -> tuple[RuleSet, ReloadStatus]:
    """The rules ``l2m run`` starts with, continuous and ``--once`` alike (docs/streaming.md
    "Live rule changes"), and what ``/metrics`` shows of them: the rule files' set when it
    validates; otherwise the last good set the checkpoint keeps, every error of the refused
    files and that choice printed on ``out`` and counted as a refused reload — a bad change
    never takes the shared job down at its next start. Without a last good set (a new
    checkpoint, an object store's: not readable before Spark starts) the
    :class:`RuleValidationError` is raised: the command exits 1 with the errors."""
    status = ReloadStatus()
    try:
        ruleset = load()
    except RuleValidationError as exc:
        try:
            kept = last_good()
        except L2mError:  # an unreadable snapshot: the files' own problems are the news
            kept = None
        if kept is None:
            raise
        order = {p.file: i for i, p in reversed(list(enumerate(exc.errors)))}
        for problem in sorted(exc.errors, key=lambda p: (order[p.file], p.line, p.column)):
            print(problem, file=out)
        later = "the next run applies them" if once else "they are applied"
        print(f"l2m run: the rule files do not validate ({len(exc.errors)} error(s) above); "
              f"starting with the last good rule set, version {kept[0]}, kept in the "
              f"checkpoint — fix the files: {later} once they validate", file=out, flush=True)
        ruleset = RuleSet(kept[1])
        status.refused(exc)
    status.rules = len(ruleset.enabled)
    return ruleset, status


@dataclass
class Request:
    """A reload asked for (SIGHUP, ``POST /-/reload``): done once the job has tried it."""

    done: threading.Event = field(default_factory=threading.Event)
    ok: bool = False
    message: str = ""


@dataclass
class RuleWatcher:
    """Notices and applies rule changes; :meth:`check` runs on the driver's watch loop."""

    paths: Sequence[str]
    load: Callable[[], RuleSet]
    poll_s: float
    out: TextIO | None = None
    status: ReloadStatus = field(default_factory=ReloadStatus)
    rules: tuple[Rule, ...] = ()  # the last good set
    on_change: Callable[[RuleSet], None] | None = None  # after a good set is published
    _seen: str = ""
    _next: float = 0.0
    # SimpleQueue: put() may run in a signal handler (SIGHUP) interrupting check() itself.
    _requests: queue.SimpleQueue[Request] = field(default_factory=queue.SimpleQueue)

    def started(self, ruleset: RuleSet) -> None:
        """The rules the job starts with (loaded before Spark; their version is known once
        the query has published them)."""
        self._seen = fingerprint(self.paths)
        self.rules = ruleset.rules
        self.status.rules = len(ruleset.enabled)
        self._next = time.monotonic() + self.poll_s

    def request(self) -> Request:
        """Ask for a reload at the next check, changed files or not."""
        request = Request()
        self._requests.put(request)
        return request

    def ask(self, timeout_s: float = 300.0) -> tuple[int, str]:
        """A reload over HTTP (``POST /-/reload``): (status, text) once the job has tried it —
        200 published, 422 refused (the problems), 503 not tried within ``timeout_s`` (the
        job is starting, or stopping)."""
        request = self.request()
        if not request.done.wait(timeout_s):
            return 503, f"reload asked; not tried within {timeout_s:.0f} s (is the job running?)"
        return (200 if request.ok else 422), request.message

    def check(self, publisher: Publisher) -> bool | None:
        """Reload if asked or the files changed: True published, False refused, None
        nothing to do."""
        requests: list[Request] = []
        while not self._requests.empty():
            requests.append(self._requests.get_nowait())
        now = time.monotonic()
        if not requests and (self.poll_s <= 0 or now < self._next):
            return None
        self._next = now + self.poll_s
        seen = fingerprint(self.paths)
        if not requests and seen == self._seen:
            return None
        self._seen = seen
        ok, message = self._reload(publisher)
        for request in requests:
            request.ok, request.message = ok, message
            request.done.set()
        return ok

    def _reload(self, publisher: Publisher) -> tuple[bool, str]:
        started = time.monotonic()
        self.status.last_at = time.time()
        try:
            ruleset = self.load()
        except RuleValidationError as exc:
            return self._refused(exc, [str(p) for p in exc.errors])
        except L2mError as exc:
            return self._refused(exc, [])
        try:
            version = publisher.publish(ruleset.rules)
        except Exception as exc:  # the checkpoint's store, addFile: tried again next poll
            self._seen = ""
            error = exc if isinstance(exc, L2mError) else None
            return self._refused(error, [f"not applied: {exc}"])
        changed = version != self.status.version
        self.rules = ruleset.rules
        self.status.successes += 1
        self.status.last_ok, self.status.last_error = True, ""
        if changed:
            self.status.version, self.status.loaded_at = version, time.time()
        self.status.rules = len(ruleset.enabled)
        message = (f"l2m run: rules reloaded: {len(ruleset.enabled)} rules, version "
                   f"{version}{'' if changed else ' (unchanged)'}, in "
                   f"{time.monotonic() - started:.1f} s; new micro-batches use them")
        self._say(message)
        if changed and self.on_change is not None:
            self.on_change(ruleset)
        return True, message

    def _refused(self, exc: L2mError | None, lines: list[str]) -> tuple[bool, str]:
        self.status.failures += 1
        self.status.last_ok = False
        self.status.last_error = exc.code if exc is not None else "PUBLISH"
        why = "does not validate" if isinstance(exc, RuleValidationError) else "was not applied"
        head = (f"l2m run: rules not reloaded: the changed rule set {why}; still running "
                f"version {self.status.version}")
        self._say(head)
        detail = lines or [exc.render() if exc is not None else "unknown error"]
        for line in detail:
            self._say(f"  {line}")
        return False, "\n".join([head, *detail])

    def _say(self, line: str) -> None:
        if self.out is not None:
            print(line, file=self.out, flush=True)
