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

On start the job ships, besides its own rules, the version of a batch planned but not
committed (read from the checkpoint's offset log), restored from its snapshot."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession

from l2m.collector import collector_paused
from l2m.config.job import JobConfig
from l2m.engine.pipeline import routing_option
from l2m.engine.routing import plan_for
from l2m.engine.rulesets import Versions, routing_file
from l2m.errors import RuleSnapshotError
from l2m.rules.model import Rule
from l2m.rules.snapshot import restore, snapshot, version_of
from l2m.state.checkpoint import Files, LocalFiles, local_checkpoint

FOLDER = "rulesets"  # under the checkpoint: the snapshots
CURRENT = "CURRENT"  # under the local folder: the version new batches are planned with
LAST_GOOD = "current"  # under the checkpoint's folder: the version last published
TIDY_S = 10.0  # kept snapshots are looked at again at most this often (a listing each)


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
        self.live = live  # False: a checkpoint of state format 1-3 (changes need a restart)
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
        # Versions kept besides the current one, each until the batch that may still use it
        # has committed (that batch's number).
        self._kept: dict[str, int] = {}
        self._dirty = True  # tidy has something to look at
        self._tidied = 0.0

    def compile(self, rules: Sequence[Rule]) -> str:
        """The routing option of ``rules`` under this job's settings."""
        cfg = self.cfg
        return routing_option(plan_for(rules, cfg.timestamp_field, cfg.max_future_ms,
                                       cfg.limits.max_label_value_length, cfg.limits.series))

    def start(self, rules: Sequence[Rule]) -> Versions:
        """The query's rules at start: published, and a pending replay's version shipped; the
        :class:`Versions` the query's options carry."""
        with collector_paused():  # 100,000 rules: a dict each (the routing pauses its own)
            data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        option = self.compile(rules)
        self.accounts = {**self.accounts, **_accounts(rules)}
        # Shipped files of an earlier process may hold another release's compiled rules:
        # this process ships its own (each version's file written again before it is added).
        if _shipped.get(id(self.spark.sparkContext)) is None:
            for old in self.local.glob(f"{routing_file('')}*"):
                old.unlink(missing_ok=True)
        planned, _ = self._progress()
        pending = self.pending_version()
        self._publish(version, data, option)
        if pending is not None and pending != version:
            self.ship_stored(pending)
            self._kept[pending] = planned  # until the replayed batch commits
        self._dirty = True
        self.tidy(now=True)
        return Versions(version, option)

    def publish(self, rules: Sequence[Rule]) -> str:
        """A new good rule set: new batches are planned with it from now on; its version."""
        if not self.live:
            raise RuleSnapshotError(
                "live rule changes need a checkpoint of state format 4 or later; this one holds an "
                "older format (docs/streaming.md \"Upgrading\"): restart l2m run to apply "
                "the changed rules, or start a new checkpoint")
        with collector_paused():
            data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        if version == self.version:
            return version
        previous = self.version
        planned, _ = self._progress()
        self._publish(version, data, self.compile(rules))
        self.accounts = {**self.accounts, **_accounts(rules)}
        # The source may have read the previous version just before this publication, for
        # the batch after the newest one planned: kept until that batch has committed.
        self._kept[previous] = max(self._kept.get(previous, -1), planned + 1)
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
        added = _shipped.setdefault(id(sc), set())
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
        rules = restore(text.encode(), self.cfg.query_config)
        self._ship(version, self.compile(rules))

    def _progress(self) -> tuple[int, int]:
        """The newest batch planned (offset log) and committed (commit log); -1: none."""
        planned = _numbered(self.files.names(self.offsets))
        done = _numbered(self.files.names(self.commits))
        return (planned[-1] if planned else -1), (done[-1] if done else -1)

    def pending_version(self) -> str | None:
        """The rule set of the newest planned batch when it has not committed: a replay's."""
        planned, committed = self._progress()
        if planned < 0 or committed >= planned:
            return None
        text = self.files.read(f"{self.offsets}/{planned}") or ""
        return ruleset_of(text)

    def tidy(self, now: bool = False) -> None:
        """Drop the snapshots no replay can need any more: each kept version once the batch
        that may use it has committed (the driver's watch loop calls it, and it looks at most
        every :data:`TIDY_S` unless ``now``; nothing once only the current set is kept)."""
        if not self._dirty or (not now and time.monotonic() - self._tidied < TIDY_S):
            return
        self._tidied = time.monotonic()
        if self._kept:
            _, committed = self._progress()
            self._kept = {v: batch for v, batch in self._kept.items()
                          if batch > committed and v != self.version}
        keep = {self.version, *self._kept}
        for name in self.files.names(self.store):
            if name.endswith(".json") and name.removesuffix(".json") not in keep:
                self.files.delete(f"{self.store}/{name}")
        self._dirty = bool(self._kept)


_shipped: dict[int, set[str]] = {}


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
