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


def ruleset_version(data: bytes, cfg: JobConfig) -> str:
    """The version of a rule set (its snapshot ``data``) in this job: a digest of the rules
    and of the settings they are compiled with (event time field, future bound, label
    length, series caps) — the same rules under other settings route differently, so their
    shipped files must not share a name."""
    settings = repr((cfg.timestamp_field, cfg.max_future_ms, cfg.limits.max_label_value_length,
                     cfg.limits.series)).encode()
    return version_of(data + b"\n" + settings)


class RulesetPublisher:
    """Publishes rule sets for one query (``query_dir`` under the checkpoint)."""

    def __init__(self, spark: SparkSession, cfg: JobConfig, query_dir: str,
                 files: Files | None = None) -> None:
        self.spark = spark
        self.cfg = cfg
        self.files = files or LocalFiles()
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
        self.first: Versions | None = None  # the query's first rules (inline in its options)
        # Each enabled rule's account (l2m.state.accounts' per-tenant view), as of the
        # current version.
        self.accounts: dict[str, str | None] = {}
        self._extra = False  # snapshots besides the current one are kept (tidy drops them)

    def compile(self, rules: Sequence[Rule]) -> str:
        """The routing option of ``rules`` under this job's settings."""
        cfg = self.cfg
        return routing_option(plan_for(rules, cfg.timestamp_field, cfg.max_future_ms,
                                       cfg.limits.max_label_value_length, cfg.limits.series))

    def start(self, rules: Sequence[Rule]) -> Versions:
        """The query's rules at start: published, and a pending replay's version shipped; the
        :class:`Versions` the query's options carry."""
        data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        option = self.compile(rules)
        self.accounts = _accounts(rules)
        pending = self.pending_version()
        self._publish(version, data, option)
        if pending is not None and pending != version:
            self.ship_stored(pending)
        self.first = Versions(version, option)
        self._retain({version, *([pending] if pending else [])})
        return self.first

    def publish(self, rules: Sequence[Rule]) -> str:
        """A new good rule set: new batches are planned with it from now on; its version."""
        data = snapshot(rules)
        version = ruleset_version(data, self.cfg)
        if version == self.version:
            return version
        previous = self.version
        self._publish(version, data, self.compile(rules))
        self.accounts = _accounts(rules)
        keep = {version, previous}
        pending = self.pending_version()
        if pending:
            keep.add(pending)
        self._retain(keep)
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
        if not shipped.exists():
            self.local.mkdir(parents=True, exist_ok=True)
            tmp = self.local / f"{name}.tmp"
            tmp.write_text(option)
            os.replace(tmp, shipped)
        # Spark refuses a name added again from another path; once per context is enough.
        added = _shipped.setdefault(id(sc), set())
        if name not in added:
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

    def pending_version(self) -> str | None:
        """The rule set of the newest planned batch when it has not committed: a replay's."""
        planned = _numbered(self.files.names(self.offsets))
        if not planned:
            return None
        done = _numbered(self.files.names(self.commits))
        if done and done[-1] >= planned[-1]:
            return None
        text = self.files.read(f"{self.offsets}/{planned[-1]}") or ""
        return ruleset_of(text)

    def tidy(self) -> None:
        """Drop the snapshots kept for batches that have committed since (the driver's watch
        loop calls it; it does nothing once only the current set is kept)."""
        if not self._extra:
            return
        pending = self.pending_version()
        self._retain({self.version, *([pending] if pending else [])})

    def _retain(self, keep: set[str]) -> None:
        """Drop the snapshots no replay can need (neither ``keep`` nor the newest batch's)."""
        for name in self.files.names(self.store):
            if name.endswith(".json") and name.removesuffix(".json") not in keep:
                self.files.delete(f"{self.store}/{name}")
        self._extra = len(keep) > 1


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
