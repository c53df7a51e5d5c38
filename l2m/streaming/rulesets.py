"""The driver's side of live rules (SPEC §8, docs/streaming.md "Live rule changes"): a rule
set becomes a version every worker can read, and the version the next micro-batches are
planned with.

Input: validated rules (the job's at start, and each good reload), the job configuration and
Spark. Output, for each version:

- its snapshot in the checkpoint, ``<checkpoint>/rulesets/<version>.json``
  (:mod:`l2m.rules.snapshot`), kept while a replay may need it;
- its compiled routing shipped to the executors (``SparkContext.addFile``, named
  :func:`~l2m.engine.rulesets.routing_file`), which fetch it before their next task;
- the file the source reads when it plans a batch (:attr:`RulesetPublisher.current_file`,
  on the driver's local disk): the version goes into the batch's offset, which Spark writes
  to the offset log before the batch runs — so a replay, even after a crash and a restart
  with other rules, is planned with the version its first attempt had.

What is kept is read from the checkpoint, never from what this process remembers of the
query's progress: a version is kept while an offset log entry newer than the last commit names
it (a replay's), or the newest entry does (an idle source's tick repeats that offset, its
version with it), while a batch being planned may still have read it (at most the one after the
newest planned when the next version was written), and — when it has gauge rules — while a
gauge window its batches touched may still be open, for that key's timers (until the
committed watermark has passed those windows' end, and a committed batch started a recheck
after that was seen — a key's timer is due in processing time, which a draining backlog's
watermark outruns; both in ``rulesets/windows``). On start the job ships, besides its own
rules, every kept version, restored from its snapshot: a replay's (required) and those gauge
keys may still name."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeGuard

from pyspark.sql import SparkSession

from l2m import defaults
from l2m.config.job import JobConfig
from l2m.engine.pipeline import routing_option
from l2m.engine.routing import plan_for
from l2m.engine.rulesets import Versions, routing_file
from l2m.errors import RuleSnapshotError
from l2m.process.collector import collector_paused
from l2m.rules.model import Rule
from l2m.rules.snapshot import restore, snapshot, version_of
from l2m.semantics.windows import MINUTE_MS
from l2m.state.checkpoint import Files, LocalFiles, local_checkpoint
from l2m.state.format import STATE_FORMAT

FOLDER = "rulesets"  # under the checkpoint: the snapshots
CURRENT = "CURRENT"  # under the local folder: the version new batches are planned with
LAST_GOOD = "current"  # under the checkpoint's folder: the version last published
WINDOWS = "windows"  # under the checkpoint's folder: each kept version's window bound
WINDOWS_FORMAT = 2  # its format: 1 (no "format" key) held the event-time bounds only
TIDY_S = 10.0  # kept snapshots are looked at again at most this often (a listing each)
# A gauge window ends at most a minute after the newest event time its batches may have seen:
# what a version's window bound adds to it (event time).
WINDOW_MARGIN_MS = MINUTE_MS
# … and its key goes once its next timer has fired after that: due in processing time (Spark's
# batch time) at most one recheck after the key was last looked at — never later than this,
# the longest recheck a job file may set (key `recheck`; --once's is 1 ms).
RECHECK_MARGIN_MS = defaults.RECHECK_MS
# A snapshot with a gauge rule (canonical JSON: never inside a string, where quotes are
# escaped): only gauge window keys name their version in their state.
_GAUGE = '"kind":"gauge"'


def ruleset_version(data: bytes, cfg: JobConfig) -> str:
    """The version of a rule set (its snapshot ``data``) in this job: a digest of the rules
    and of the settings they are compiled with (event time field, future bound, label
    length, series caps, text and default fields) — the same rules under other settings
    route differently, so their shipped files must not share a name."""
    settings = repr((cfg.timestamp_field, cfg.max_future_ms, cfg.limits.max_label_value_length,
                     cfg.limits.series, cfg.query_config)).encode()
    return version_of(data + b"\n" + settings)


class RulesetPublisher:
    """Publishes rule sets for one query (``query_dir`` under the checkpoint)."""

    def __init__(self, spark: SparkSession, cfg: JobConfig, query_dir: str,
                 files: Files | None = None, live: bool = True) -> None:
        self.spark = spark
        self.cfg = cfg
        self.files = files or LocalFiles()
        self.live = live  # False: a checkpoint of state format 2 (changes need a restart)
        self.store = f"{cfg.checkpoint}/{FOLDER}"
        self.offsets = f"{cfg.checkpoint}/{query_dir}/offsets"
        self.commits = f"{cfg.checkpoint}/{query_dir}/commits"
        local = local_checkpoint(cfg.checkpoint)
        if local is None:  # an object store: the driver's own files live in its temp folder
            digest = hashlib.sha256(cfg.checkpoint.encode()).hexdigest()[:16]
            local = str(Path(tempfile.gettempdir()) / f"l2m-{digest}")
        self.local = Path(local) / FOLDER
        self.current_file = str(self.local / CURRENT)
        self.version = ""  # the current version
        self.loaded_at = 0.0  # when it was published (s since the epoch)
        # Every rule's account (l2m.state.accounts' per-tenant view): the current version's,
        # and a removed rule's last one — its lifetime counts stay its account's, never
        # going backwards.
        self.accounts: dict[str, str | None] = {}
        # A replaced version: the newest batch a planning under way at its replacement may
        # still have given it (the newest planned, read after the new version was written,
        # plus one); kept until that batch has committed.
        self._replaced: dict[str, int] = {}
        # The offset log: each planned batch's (version, watermark, batch time).
        self._log: dict[int, tuple[str | None, int, int]] = {}
        # WINDOWS, once read: each version's event-time bound, and the batch time at which the
        # committed watermark was first seen past it (None: not yet).
        self._bounds: dict[str, tuple[int, int | None]] | None = None
        self._gauges: dict[str, bool] = {}  # whether a version has gauge rules
        self._dirty = True  # tidy has something to look at
        self._tidied = 0.0

    def compile(self, rules: Sequence[Rule]) -> str:
        """The routing option of ``rules`` under this job's settings."""
        cfg = self.cfg
        return routing_option(plan_for(rules, cfg.timestamp_field, cfg.max_future_ms,
                                       cfg.limits.max_label_value_length, cfg.limits.series))

    def start(self, rules: Sequence[Rule]) -> Versions:
        """The query's rules at start: published, and every kept version shipped again (a
        pending replay's, and those gauge keys may still name); the :class:`Versions` the
        query's options carry."""
        with collector_paused():  # 100,000 rules: a dict each (the routing pauses its own)
            data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        option = self.compile(rules)
        self.accounts = {**self.accounts, **_accounts(rules)}
        # Shipped files of an earlier process may hold another release's compiled rules:
        # this process ships its own (each version's file written again before it is added).
        if self.spark.sparkContext not in _shipped:
            for old in self.local.glob(f"{routing_file('')}*"):
                old.unlink(missing_ok=True)
        self._publish(version, data, option)
        self._gauges[version] = _GAUGE.encode() in data
        self._dirty = True
        self.tidy(now=True)  # what no batch or key can need any more is not shipped for nothing
        # A replay's version must be shipped (a RuleSnapshotError when it is not stored);
        # every other kept one is, for the timers of gauge keys that may still name it.
        entries, committed = self._entries()
        replays = {v for n, (v, _, _) in entries.items() if n > committed and v is not None}
        for name in self.files.names(self.store):
            kept = name.removesuffix(".json")
            if name.endswith(".json") and kept != version and kept not in replays:
                # Unreadable by this release: the keys naming it fall back (Versions.for_key).
                with contextlib.suppress(RuleSnapshotError):
                    self.ship_stored(kept)
        for pending in sorted(replays - {version}):
            self.ship_stored(pending)
        return Versions(version, option)

    def publish(self, rules: Sequence[Rule]) -> str:
        """A new good rule set: new batches are planned with it from now on; its version."""
        if not self.live:
            raise RuleSnapshotError(
                f"live rule changes need a checkpoint of state format {STATE_FORMAT}; this one "
                "holds format 2, "
                "of release 0.2.0 or earlier (docs/streaming.md \"Upgrading\"): restart l2m run "
                "to apply the changed rules, or start a new checkpoint")
        with collector_paused():
            data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        if version == self.version:
            return version
        previous = self.version
        self._publish(version, data, self.compile(rules))
        self._gauges[version] = _GAUGE.encode() in data
        self.accounts = {**self.accounts, **_accounts(rules)}
        # Read after the new version was written: a batch planned from now on reads it, but
        # a planning under way may have read the previous one just before, for the batch
        # after the newest planned — never a later one (Spark plans a batch once the one
        # before is logged).
        planned, _ = self._progress()
        self._replaced[previous] = max(self._replaced.get(previous, -1), planned + 1)
        self._dirty = True
        self.tidy(now=True)
        return version

    def _publish(self, version: str, data: bytes, option: str) -> None:
        path = f"{self.store}/{version}.json"
        if self.files.read(path) is None:
            self.files.write(path, data.decode())
        self.files.write(f"{self.store}/{LAST_GOOD}", version)
        self._ship(version, option)
        self.local.mkdir(parents=True, exist_ok=True)
        tmp = self.local / f"{CURRENT}.tmp"
        tmp.write_text(version)
        os.replace(tmp, self.current_file)
        self.version, self.loaded_at = version, time.time()

    def _ship(self, version: str, option: str) -> None:
        name = routing_file(version)
        shipped = self.local / name
        sc = self.spark.sparkContext
        # Spark refuses a name added again from another path; once per context is enough
        # (and the file, once added, must stay: an executor that joins later fetches it).
        added = _shipped.setdefault(sc, set())
        if name in added:
            return
        self.local.mkdir(parents=True, exist_ok=True)
        tmp = self.local / f"{name}.tmp"
        tmp.write_text(option)
        os.replace(tmp, shipped)
        sc.addFile(str(shipped))
        added.add(name)

    def ship_stored(self, version: str) -> None:
        """Ship a stored version again (a replay's): restored from its snapshot and compiled
        with this release; a :class:`RuleSnapshotError` when it is not stored."""
        text = self.files.read(f"{self.store}/{version}.json")
        if text is None:
            raise RuleSnapshotError(
                f"the batch to replay was planned with rule set {version}, which the "
                f"checkpoint {self.cfg.checkpoint} no longer holds ({FOLDER}/{version}.json)")
        self._gauges[version] = _GAUGE in text
        rules = restore(text.encode(), self.cfg.query_config)
        self._ship(version, self.compile(rules))

    def _progress(self) -> tuple[int, int]:
        """The newest batch planned (offset log) and committed (commit log); -1: none."""
        planned = _numbered(self.files.names(self.offsets))
        done = _numbered(self.files.names(self.commits))
        return (planned[-1] if planned else -1), (done[-1] if done else -1)

    def _entries(self) -> tuple[dict[int, tuple[str | None, int, int]], int]:
        """The offset log as Spark keeps it — each planned batch's (rule set version,
        watermark, batch time), an entry read once: Spark never rewrites one — and the newest
        committed batch (-1: none)."""
        numbers = _numbered(self.files.names(self.offsets))
        done = _numbered(self.files.names(self.commits))
        log: dict[int, tuple[str | None, int, int]] = {}
        for n in numbers:
            entry = self._log.get(n)
            if entry is None:
                text = self.files.read(f"{self.offsets}/{n}")
                if text is None:  # purged by Spark meanwhile
                    continue
                entry = (ruleset_of(text), watermark_of(text), batch_time_of(text))
            log[n] = entry
        self._log = log
        return log, (done[-1] if done else -1)

    def kept(self) -> set[str]:
        """The versions a batch or a gauge key may still need, read from the checkpoint's
        offset and commit logs: the current one; each named by a batch planned and not
        committed (a replay's) or by the newest batch (a tick repeats its offset); a replaced
        one while a planning under way may have read it; one with gauge rules while a window
        its batches touched may be open: until the committed watermark has passed its bound,
        and then until a committed batch started more than :data:`RECHECK_MARGIN_MS` (batch
        time) after the one at which that was first seen — by then every timer its keys had
        pending was due, so the key of each window past the bound was looked at and closed."""
        entries, committed = self._entries()
        keep = {self.version}
        keep |= {v for n, (v, _, _) in entries.items() if n > committed and v is not None}
        if entries:
            # An idle source's tick (l2m.kafka.source.Ticker) is the newest offset again,
            # its rule set with it: the newest entry's version may name the next batch too.
            newest = entries[max(entries)][0]
            if newest is not None:
                keep.add(newest)
        keep |= {v for v, batch in self._replaced.items() if batch > committed}
        bounds = self._window_bounds()
        changed = False
        # A window a batch touched ends at most a minute after the newest event time it
        # saw: the next batch's watermark plus the grace (Spark's watermark is the newest
        # event time so far less the delay, l2m's grace).
        for n, (version, _, _) in entries.items():
            if version in (None, self.version) or n > committed or \
                    not self._has_gauges(str(version)):
                continue
            after = entries.get(n + 1)
            if after is None:  # its windows' bound is not known yet
                keep.add(version)
                continue
            bound = after[1] + self.cfg.grace_ms + WINDOW_MARGIN_MS
            if bound > bounds.get(version, (-1, None))[0]:  # a later batch: its clock anew
                bounds[version], changed = (bound, None), True
        _, watermark, at = entries.get(committed, (None, 0, 0))
        for version, (bound, passed) in list(bounds.items()):
            if watermark < bound:
                keep.add(version)
            elif passed is None:
                # Seen now, perhaps batches after the watermark passed: later, never earlier.
                bounds[version], changed = (bound, at), True
                keep.add(version)
            elif at <= passed + RECHECK_MARGIN_MS:
                # A draining backlog moves the watermark hours a minute: a key whose timer
                # is not due yet still names the version.
                keep.add(version)
        for version in [v for v in bounds if v not in keep]:
            del bounds[version]
            changed = True
        if changed:
            self.files.write(f"{self.store}/{WINDOWS}", _windows_text(bounds))
        return keep

    def _window_bounds(self) -> dict[str, tuple[int, int | None]]:
        if self._bounds is None:
            self._bounds = windows_of(self.files.read(f"{self.store}/{WINDOWS}"))
        return self._bounds

    def _has_gauges(self, version: str) -> bool:
        found = self._gauges.get(version)
        if found is None:
            text = self.files.read(f"{self.store}/{version}.json")
            found = self._gauges[version] = text is not None and _GAUGE in text
        return found

    def tidy(self, now: bool = False) -> None:
        """Drop the snapshots no batch and no gauge key can need any more (:meth:`kept`);
        the driver's watch loop calls it, and it looks at most every :data:`TIDY_S` unless
        ``now`` (nothing once only the current set is stored)."""
        if not self._dirty or (not now and time.monotonic() - self._tidied < TIDY_S):
            return
        self._tidied = time.monotonic()
        keep = self.kept()
        self._replaced = {v: b for v, b in self._replaced.items() if v in keep}
        stored = 0
        for name in self.files.names(self.store):
            if not name.endswith(".json"):
                continue
            if name.removesuffix(".json") in keep:
                stored += 1
            else:
                self.files.delete(f"{self.store}/{name}")
        self._dirty = stored > 1 or len(keep) > 1


# Keyed by the context itself, held weakly: an id() outlives its object, and a context
# created after another was stopped (or freed) could take its id and skip its own shipping.
_shipped: weakref.WeakKeyDictionary[Any, set[str]] = weakref.WeakKeyDictionary()


def _accounts(rules: Sequence[Rule]) -> dict[str, str | None]:
    return {r.id: r.account for r in rules if r.enabled}


def _numbered(names: Sequence[str]) -> list[int]:
    return sorted(int(n) for n in names if n.isdigit())


def last_good_rules(cfg: JobConfig) -> tuple[str, tuple[Rule, ...]] | None:
    """The rule set the job last ran on this (local) checkpoint, restored from its snapshot:
    what ``l2m run`` starts with when its rule files do not validate; None when there is
    none (a new checkpoint, an object store: not readable before Spark starts)."""
    local = local_checkpoint(cfg.checkpoint)
    if local is None:
        return None
    files = LocalFiles()
    version = (files.read(f"{local}/{FOLDER}/{LAST_GOOD}") or "").strip()
    text = files.read(f"{local}/{FOLDER}/{version}.json") if version else None
    if text is None:
        return None
    return version, restore(text.encode(), cfg.query_config)


def windows_of(text: str | None) -> dict[str, tuple[int, int | None]]:
    """The window bounds ``rulesets/windows`` holds (``text``; None: no file): each version's
    event-time bound and the batch time at which the committed watermark was first seen past
    it (None: not yet). Format 2 is ``{"format": 2, "versions": {version: {"bound": ms,
    "passed": ms}}}`` (``passed`` once seen); format 1, ``{version: bound}``, reads as bounds
    not seen passed yet (their time is taken at the next look). A torn write or a format this
    release does not know reads as none: the offset log gives the bounds again."""
    try:
        found: Any = json.loads(text or "{}")
    except ValueError:
        return {}
    if not isinstance(found, dict):
        return {}
    if "format" not in found:
        return {str(v): (b, None) for v, b in found.items() if _ms(b)}
    versions = found.get("versions")
    if found["format"] != WINDOWS_FORMAT or not isinstance(versions, dict):
        return {}
    bounds: dict[str, tuple[int, int | None]] = {}
    for version, entry in versions.items():
        if isinstance(entry, dict) and _ms(entry.get("bound")):
            passed = entry.get("passed")
            bounds[str(version)] = (entry["bound"], passed if _ms(passed) else None)
    return bounds


def _windows_text(bounds: dict[str, tuple[int, int | None]]) -> str:
    versions = {v: {"bound": b} if passed is None else {"bound": b, "passed": passed}
                for v, (b, passed) in bounds.items()}
    return json.dumps({"format": WINDOWS_FORMAT, "versions": versions}, sort_keys=True)


def _ms(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def watermark_of(offset_log_entry: str) -> int:
    """The watermark a batch ran with (ms; 0: none yet), from its offset log entry's
    metadata line (Spark's ``batchWatermarkMs``)."""
    return _metadata_ms(offset_log_entry, "batchWatermarkMs")


def batch_time_of(offset_log_entry: str) -> int:
    """A batch's processing time (ms since the epoch; 0: not written), from its offset log
    entry's metadata line (Spark's ``batchTimestampMs``): the clock of the state's
    processing-time timers, a replay's the same as its first attempt's."""
    return _metadata_ms(offset_log_entry, "batchTimestampMs")


def _metadata_ms(offset_log_entry: str, field: str) -> int:
    lines = offset_log_entry.splitlines()
    try:
        meta: Any = json.loads(lines[1]) if len(lines) > 1 else {}
    except ValueError:
        return 0
    value = meta.get(field) if isinstance(meta, dict) else None
    return value if _ms(value) else 0


def ruleset_of(offset_log_entry: str) -> str | None:
    """The rule set version in an offset log entry (Spark's: a version line, the batch's
    metadata, then one offset per source — l2m's carries ``ruleset``)."""
    for line in offset_log_entry.splitlines()[2:]:
        try:
            offset: Any = json.loads(line)
        except ValueError:
            continue
        if isinstance(offset, dict) and isinstance(offset.get("ruleset"), str):
            return str(offset["ruleset"])
    return None
