"""Rule sets by version, on the workers: the streaming job's rules change while it runs
(docs/streaming.md "Live rule changes"), and every micro-batch names the version it was
planned with.

Input: a version (:func:`l2m.rules.snapshot.version_of`) — from the batch's source offset
(read tasks), the ``ruleset`` column of its partials or a key's stored version (the state
stage) — and the folder where Spark put the files the driver shipped (``SparkFiles``' root:
the caller's, since the engine never imports pyspark). Output: the version a source plans its
next batch with; for the state stage the :class:`RuleVersion` a call runs under, which the
call passes to the tables it reads (no version is kept between calls); and a version's
:class:`~l2m.engine.routing.Routing`, decoded once per process
(:func:`~l2m.engine.pipeline.routing_from_option`). The read tasks' side (the partials tagged
with their version and shard) is :mod:`l2m.engine.streamtask`.

Light on purpose (no Arrow, no rules engine until a routing is read): the Kafka source's
driver-side processes, started on every query start, plan batches with it."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

from l2m.errors import RuleSnapshotError

if TYPE_CHECKING:
    from l2m.engine.routing import Routing


def routing_file(version: str) -> str:
    """The name under which the driver ships a version's compiled rules (``SparkContext.
    addFile``): its routing option (:func:`~l2m.engine.pipeline.routing_option`)."""
    return f"l2m-routing-{version}"


@dataclass(frozen=True)
class Versions:
    """How a worker finds a version's routing: the job's rules at start travel inline (the
    query's options); every later version is a file Spark shipped."""

    version: str  # the rules the query started with
    option: str  # … and their routing option

    def routing(self, version: str | None, files_dir: str | None) -> Routing:
        """The routing of ``version`` (None: the query's first), read from ``files_dir``."""
        from l2m.engine.pipeline import routing_from_option

        if version is None or version == self.version:
            return routing_from_option(self.option)
        if files_dir is None:
            raise RuleSnapshotError(f"rule set {version}: no shipped files here (not a Spark "
                                    "worker)")
        path = os.path.join(files_dir, routing_file(version))
        try:
            with open(path) as file:
                return routing_from_option(file.read())
        except FileNotFoundError:
            raise RuleSnapshotError(f"rule set {version} was not shipped to this worker "
                                    f"({path} missing)") from None

    def has(self, version: str, files_dir: str | None) -> bool:
        """Whether this worker can read ``version``: the query's first, or a shipped file."""
        return version == self.version or (
            files_dir is not None and os.path.exists(os.path.join(files_dir,
                                                                  routing_file(version))))

    def routing_at(self, at: RuleVersion | None) -> Routing:
        """The routing of the rule set a state call runs under (None: the query's first)."""
        if at is None:
            return self.routing(None, None)
        return self.routing(at.version, at.files_dir)

    def for_rows(self, version: str | None, files_dir: str | None) -> RuleVersion:
        """The state stage: the rule set its rows at hand were planned with (their ``ruleset``
        column; None: the query's first); Spark's shipped files are in ``files_dir``."""
        return RuleVersion(version or self.version, files_dir)

    def for_key(self, version: str | None, files_dir: str | None) -> RuleVersion:
        """The state stage, a call with timers only (no rows to name their rule set): the rule
        set the key's state says it was last written under (``version``, the key's stored
        ``rs``), which the driver ships again after a restart
        (:meth:`l2m.streaming.rulesets.RulesetPublisher.start`).

        Raises nothing. When this worker cannot read ``version`` (none stored, or a version
        the checkpoint no longer kept) the key is under the rules the query started with, as
        a restart puts it."""
        try:
            found = bool(version) and self.has(str(version), files_dir)
        except (OSError, ValueError):  # an odd path in the state: the fallback, never a failure
            found = False
        return RuleVersion(str(version) if found else self.version, files_dir)


@dataclass(frozen=True)
class RuleVersion:
    """The rule set one state call runs under, passed to every table the call reads
    (:meth:`l2m.engine.pipeline.RoutingTable.at`): the version and where Spark put the
    files the driver shipped (None: not a Spark worker)."""

    version: str
    files_dir: str | None


def planned_version(ruleset_file: str | None, first: str) -> str:
    """The version a source plans its next batch with: the driver's latest good rule set
    (``ruleset_file``, written by l2m.streaming.rulesets), else the query's ``first``."""
    if ruleset_file:
        try:
            with open(ruleset_file) as file:
                return file.read().strip() or first
        except FileNotFoundError:
            pass
    return first
