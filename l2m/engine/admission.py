"""Series caps enforced (SPEC §7): which new series a state domain admits, and where the logs
of the others go.

Input: the rules and the job's :class:`~l2m.policy.limits.Limits` (:func:`rule_caps`, where the
caps are first needed); then, per state domain — a counter key, or one gauge window of a key
— the live series each rule holds there and the series a micro-batch brings
(:class:`Admission`). Output: per new series, admitted or the :class:`Limit` that refused
it; a refused series' partials are merged into its rule's overflow series
(:data:`OVERFLOW_SERIES`, labels: the rule's static labels and
:data:`~l2m.policy.limits.OVERFLOW_LABEL` in place of every group-by label), and the logs refused
are counted per (rule, account, limit). :class:`Admission` decides series by series (the
state stage, :mod:`l2m.state`); backfill decides whole domains at once on Arrow, the same
way (:func:`admitted_table`), after each read task has collapsed what a per-rule cap refuses
for certain (:func:`beyond_rule_caps`).

**Domains are whole.** A cap is exact only where every series it counts is in one place.
The state is keyed by (shard, window); under state format 3 the shard of a rule's series is
that of its *placement* (:func:`placement`): its account, or for a rule without an account
the rule itself. So one key holds every series of an account (per rule, per metric name,
in all), each cap is counted exactly in one Python call, and each rule's overflow series is
one series. (Splitting a cap across shards, as Mimir does across ingesters, would give every
shard its own overflow series of the rule — several values for one series — and refuse
series early on unlucky shards.)

**Order.** Within one call, rules are admitted in id order and a rule's new series in key
order, so a replayed batch decides the same way; backfill is one batch holding all its logs.
A series refused once is admitted later if there is room by then (it starts at 0; what it
had is in the overflow series). The overflow series never counts against a cap."""

from __future__ import annotations

import enum
import zlib
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from l2m.engine.labels import one_value_series
from l2m.engine.nativebuckets import counts_logs
from l2m.engine.partials import Partial, merge
from l2m.policy.limits import Limits
from l2m.process.records import FieldValues
from l2m.rules.model import Rule

# A rule's overflow series key: never an encoded series key (those are empty or start with a
# digit or `-`), so it cannot collide with a real series.
OVERFLOW_SERIES = "!overflow"


class Limit(enum.StrEnum):
    """The cap that refused a series: the ``limit`` label of the refusal counts."""

    RULE = "rule"
    METRIC = "metric"
    ACCOUNT = "account"


@dataclass(frozen=True, slots=True)
class RuleCaps(FieldValues):
    """One rule's caps (0: none) and the domains its series count in besides its own: the
    account (None: a rule without an account is capped per rule only) and the metric name
    within that account."""

    rule: int
    metric: int = 0
    account: int = 0
    account_name: str | None = None
    metric_name: str = ""


def rule_caps(rules: Iterable[Rule], limits: Limits) -> dict[str, RuleCaps]:
    """Each rule's caps: its ``max_series`` or its account's per-rule cap, and its account's
    per-metric and per-account caps (the job's, with the account's overrides)."""
    caps = {}
    for rule in rules:
        series = limits.for_account(rule.account)
        per_rule = rule.max_series if rule.max_series is not None else series.per_rule
        if rule.account is None:
            caps[rule.id] = RuleCaps(per_rule)
        else:
            caps[rule.id] = RuleCaps(per_rule, series.per_metric, series.per_account,
                                     rule.account, rule.name)
    return caps


def placement(rule: Rule) -> str:
    """What decides the shard of a rule's series (state format 3): its account, so that every
    cap an account's series count against is counted in one key; a rule without an account
    on its own."""
    return account_placement(rule.account) if rule.account is not None else f"rule:{rule.id}"


def account_placement(account: str) -> str:
    """:func:`placement` of an account's rules."""
    return f"account:{account}"


def placement_shard(rule: Rule, shards: int) -> int:
    """The shard of every series of ``rule`` (stable across processes and releases)."""
    return zlib.crc32(placement(rule).encode()) % shards


def account_shard(account: str, shards: int) -> int:
    """The shard of every series of an account's rules (:func:`placement_shard`)."""
    return zlib.crc32(account_placement(account).encode()) % shards


def refused_series(rule_id: str, account: str | None, limit: Limit) -> str:
    """The series key of a refusal count: labels ``rule``, ``account`` (empty without one),
    ``limit`` (:data:`REFUSED_GROUP_BY`), in the encoding of :mod:`l2m.engine.labels`."""
    return one_value_series(rule_id) + one_value_series(account or "") + \
        one_value_series(str(limit))


REFUSED_GROUP_BY = ("rule", "account", "limit")


@dataclass
class Admission:
    """The live series of one state domain, by rule and by the account domains; decides each
    new series and counts the logs refused.

    ``sizes``: live series per rule id in the domain now (overflow series excluded)."""

    caps: Mapping[str, RuleCaps]
    sizes: Mapping[str, int]
    # (rule id, limit) → logs refused in this call, and the latest event time among them
    refused: dict[tuple[str, Limit], list[int]] = field(default_factory=dict)
    _rules: dict[str, int] = field(default_factory=dict)
    _metrics: dict[tuple[str, str], int] = field(default_factory=dict)
    _accounts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for rule_id, size in self.sizes.items():
            self._rules[rule_id] = size
            caps = self.caps.get(rule_id)
            if caps is not None and caps.account_name is not None:
                metric = (caps.account_name, caps.metric_name)
                self._metrics[metric] = self._metrics.get(metric, 0) + size
                self._accounts[caps.account_name] = \
                    self._accounts.get(caps.account_name, 0) + size

    def admit(self, rule_id: str) -> Limit | None:
        """One new series of ``rule_id``: None when admitted (and counted), else the first cap
        it would exceed — rule, then metric name, then account."""
        caps = self.caps.get(rule_id)
        if caps is None:  # l2m's own counters, rules of a checkpoint's past: never capped
            return None
        if caps.rule and self._rules.get(rule_id, 0) >= caps.rule:
            return Limit.RULE
        account = caps.account_name
        if account is not None:
            metric = (account, caps.metric_name)
            if caps.metric and self._metrics.get(metric, 0) >= caps.metric:
                return Limit.METRIC
            if caps.account and self._accounts.get(account, 0) >= caps.account:
                return Limit.ACCOUNT
            self._metrics[metric] = self._metrics.get(metric, 0) + 1
            self._accounts[account] = self._accounts.get(account, 0) + 1
        self._rules[rule_id] = self._rules.get(rule_id, 0) + 1
        return None

    def count(self, rule_id: str, limit: Limit, logs: int, ts: int | None) -> None:
        """Logs of a refused series, counted into the refusals."""
        entry = self.refused.setdefault((rule_id, limit), [0, 0])
        entry[0] += logs
        entry[1] = max(entry[1], ts or 0)

    def account_of(self, rule_id: str) -> str | None:
        caps = self.caps.get(rule_id)
        return None if caps is None else caps.account_name


def redirected(rows: list[tuple[str, str, Partial]], known: Mapping[str, object],
               admission: Admission | None, rule_id: str, twice: bool = False
               ) -> list[tuple[str, str, Partial]]:
    """A rule's partial rows of one call with the series ``known`` does not hold admitted or
    renamed to :data:`OVERFLOW_SERIES` (refusals counted in ``admission``; ``twice``: the
    rule has two rows per log, its logs counted from one kind,
    :func:`~l2m.engine.nativebuckets.logs_twice`). Without an admission (caps off) the rows
    as they are. Rows come back ordered by series key."""
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    if admission is None:
        return rows
    decided: dict[str, Limit | None] = {}
    out = []
    for name, le, part in rows:
        if name != OVERFLOW_SERIES and name not in known:
            if name not in decided:
                decided[name] = admission.admit(rule_id)
            limit = decided[name]
            if limit is not None:
                if counts_logs(le, twice):
                    admission.count(rule_id, limit, part.matches, part.ts)
                name = OVERFLOW_SERIES
        out.append((name, le, part))
    return out


def beyond_rule_caps(table: pa.Table, caps: Mapping[str, int]) -> pa.Table:
    """Merged partials (one row per rule, series, le, window; every (rule, window) whole) with
    the series a rule's cap refuses for certain merged into its :data:`OVERFLOW_SERIES`, so
    that only candidates go on through backfill's shuffle (each read task, on its own
    partials) to :func:`admitted_table`.

    Admission takes a rule's new series in key order, and a refusal is final for the rest of
    the call — counts only grow — so the series it admits are a prefix of the key order no
    longer than the rule's cap (``caps``: rule id → per-rule cap): a series ranked past the
    cap in its (rule, window) is refused whatever the metric and account caps do. With
    1,000,000 unique ids, 10,000 series per (rule, window) remain.

    In Arrow: the distinct candidates counted per (rule, window); only a group over its cap
    is ranked (its cap-th smallest name is the last it may admit; Arrow orders strings by
    their UTF-8 bytes, which is Python's code point order)."""
    if not caps or not table.num_rows:
        return table
    # One chunk: a task's partials come in many batches, and every step below goes over them
    # all (0.18 -> 0.12 s for a task of 125,000 logs with a unique id each).
    table = table.combine_chunks()
    series = table.column("series")
    # An overflow series (a read task's own cut, l2m.batch.backfill) is not a candidate.
    capped = pc.is_in(table.column("rule"), pa.array(sorted(caps), pa.string()))
    candidate = pc.and_(capped, pc.not_equal(series, OVERFLOW_SERIES))
    candidates = table.filter(candidate).select(["rule", "window", "series", "le"])
    bucketed = pc.is_valid(candidates.column("le"))
    names = ["rule", "window", "series"]
    if pc.any(bucketed).as_py():
        # A histogram's series has a row per bucket: its names counted once. Only the
        # histograms' rows are grouped; any other series is one row already (a rule grouping
        # by a unique id has a task's every log among them).
        candidates = pa.concat_tables([
            candidates.filter(pc.invert(bucketed)).select(names),
            candidates.filter(bucketed).group_by(names, use_threads=False).aggregate([])
            .select(names)])
    counts = candidates.group_by(["rule", "window"], use_threads=False).aggregate(
        [("series", "count")])
    beyond = None
    for rule, window, count in zip(counts.column("rule").to_pylist(),
                                   counts.column("window").to_pylist(),
                                   counts.column("series_count").to_pylist(), strict=True):
        cap = caps[rule]
        if count <= cap:
            continue
        names = candidates.filter(_group(candidates, rule, window)).column("series")
        last = names.take(pc.select_k_unstable(names, cap, [("dummy", "ascending")]))
        group = pc.and_(_group(table, rule, window),
                        pc.and_(candidate, pc.greater(series, pc.max(last))))
        beyond = group if beyond is None else pc.or_(beyond, group)
    if beyond is None:
        return table
    return _into_overflow(table, beyond, pc.and_(capped, pc.equal(series, OVERFLOW_SERIES)))


def _into_overflow(table: pa.Table, refused: pa.Array | pa.ChunkedArray,
                   overflow: pa.Array | pa.ChunkedArray) -> pa.Table:
    """``table`` with its ``refused`` rows renamed to :data:`OVERFLOW_SERIES` and merged with
    its ``overflow`` rows (the overflow series they join). Only those are merged (few keys):
    every other row is already one per key and passes as it is."""
    joined = pc.or_(refused, overflow)
    moved = table.filter(joined)
    moved = moved.set_column(table.schema.get_field_index("series"), "series",
                             pa.repeat(pa.scalar(OVERFLOW_SERIES, pa.string()), moved.num_rows))
    return pa.concat_tables([table.filter(pc.invert(joined)), merge([moved], unique=False)])


def admitted_table(table: pa.Table, caps: Mapping[str, RuleCaps], twice: Collection[str] = ()
                   ) -> tuple[pa.Table, dict[tuple[str, Limit], int]]:
    """Backfill's admission, on Arrow: merged partials (one row per rule, series, le, window)
    of whole domains → the same rows with every refused series merged into its rule's
    :data:`OVERFLOW_SERIES`, and the logs refused per (rule, limit).

    Decides exactly as one :class:`Admission` per window with no live series, fed by
    :func:`redirected` rule by rule in id order, each rule's new series in key order — the
    streaming state stage's decision for a batch holding every log. Without a call per
    series: a refusal leaves the counts as they were, so every later series of the rule is
    refused for the same cap, and the series a rule admits are the first ``k`` of its key
    order, ``k`` the least of its candidates and what its rule, metric and account caps have
    left. So one step per (window, rule) decides, and the rows follow by their rank.

    The logs of a rule's overflow series that came in (cut before admission,
    :func:`beyond_rule_caps`) are refused for the cap that refused the rule's own series
    here, or its per-rule cap when it refused none. The rules ``twice`` names have two rows
    per log (:func:`~l2m.engine.nativebuckets.logs_twice`): their native keys' rows count no
    logs."""
    refused: dict[tuple[str, Limit], int] = {}
    if not caps or not table.num_rows:
        return table, refused
    series = table.column("series")
    overflow = pc.equal(series, OVERFLOW_SERIES)
    capped = pc.is_in(table.column("rule"), pa.array(sorted(caps), pa.string()))
    candidate = pc.and_(capped, pc.invert(overflow))
    rows = pc.indices_nonzero(candidate)
    cand = table.take(rows)
    rule_codes = pc.dictionary_encode(cand.column("rule").combine_chunks())
    window = cand.column("window")
    ordered = pa.table({"null": pc.is_null(window), "window": pc.fill_null(window, 0),
                        "rule": rule_codes.indices, "series": cand.column("series")})
    order = pc.sort_indices(ordered, [("null", "ascending"), ("window", "ascending"),
                                      ("rule", "ascending"), ("series", "ascending")])
    ordered = ordered.take(order)
    count = ordered.num_rows
    domain = np.zeros(count, np.bool_)  # a new (window, rule) starts here
    named = np.zeros(count, np.bool_)  # a new series starts here
    if count:
        domain[0] = named[0] = True
        for column in ("null", "window", "rule"):
            values = ordered.column(column).to_numpy()
            domain[1:] |= values[1:] != values[:-1]
        names = ordered.column("series").combine_chunks()
        named[1:] = pc.not_equal(names.slice(1), names.slice(0, count - 1)).to_numpy(
            zero_copy_only=False)
        named |= domain
    group = np.cumsum(domain) - 1
    starts = np.flatnonzero(domain)
    distinct = np.cumsum(named)
    rank = distinct - distinct[starts][group]  # the series' place in its rule's key order
    sizes = np.add.reduceat(named.astype(np.int64), starts) if count else np.zeros(0, np.int64)
    ids = rule_codes.dictionary.to_pylist()
    nulls = ordered.column("null").to_numpy(zero_copy_only=False)[starts]
    windows = ordered.column("window").to_numpy()[starts]
    codes = ordered.column("rule").to_numpy()[starts]
    allowed = sizes.copy()
    reasons: list[Limit | None] = [None] * len(starts)
    by_domain: dict[tuple[bool, int], list[int]] = {}
    for g in range(len(starts)):
        by_domain.setdefault((bool(nulls[g]), int(windows[g])), []).append(g)
    for groups in by_domain.values():
        metrics: dict[tuple[str, str], int] = {}
        accounts: dict[str, int] = {}
        for g in sorted(groups, key=lambda g: ids[codes[g]]):
            rule_caps = caps[ids[codes[g]]]
            admits, reasons[g] = _admits(rule_caps, int(sizes[g]), metrics, accounts)
            allowed[g] = admits
    beyond = rank >= allowed[group]
    at = order.to_numpy()  # each sorted candidate's row in cand
    logs = logs_column(cand, twice)[at]
    refused_logs = np.zeros(len(starts), np.int64)
    np.add.at(refused_logs, group[beyond], logs[beyond])
    for g in np.flatnonzero(allowed < sizes).tolist():
        limit = reasons[g]
        assert limit is not None
        key = (ids[codes[g]], limit)
        refused[key] = refused.get(key, 0) + int(refused_logs[g])
    _count_overflow(table.filter(overflow), ids, codes, nulls, windows, reasons, refused,
                    twice)
    if not beyond.any():
        return table, refused
    moved = np.zeros(table.num_rows, np.bool_)
    moved[rows.to_numpy()[at[beyond]]] = True
    return _into_overflow(table, pa.array(moved), pc.and_(capped, overflow)), refused


def _admits(caps: RuleCaps, size: int, metrics: dict[tuple[str, str], int],
            accounts: dict[str, int]) -> tuple[int, Limit | None]:
    """How many of a rule's ``size`` new series one domain admits, first in key order, and
    the cap that refuses the rest (None: none refused); the domain's counts of the rule's
    metric and account grow by them (:meth:`Admission.admit`, one series at a time)."""
    admits = min(size, caps.rule) if caps.rule else size
    account = caps.account_name
    metric = (account or "", caps.metric_name)
    if account is not None:
        if caps.metric:
            admits = min(admits, max(0, caps.metric - metrics.get(metric, 0)))
        if caps.account:
            admits = min(admits, max(0, caps.account - accounts.get(account, 0)))
    reason = None
    if admits < size:
        if caps.rule and admits >= caps.rule:
            reason = Limit.RULE
        elif caps.metric and metrics.get(metric, 0) + admits >= caps.metric:
            reason = Limit.METRIC
        else:
            reason = Limit.ACCOUNT
    if account is not None:
        metrics[metric] = metrics.get(metric, 0) + admits
        accounts[account] = accounts.get(account, 0) + admits
    return admits, reason


def logs_column(table: pa.Table, twice: Collection[str]) -> np.ndarray:
    """The logs each partial row counts (int64): its ``matches``, 0 for the native keys' rows
    of the rules ``twice`` names (:func:`~l2m.engine.nativebuckets.counts_logs`)."""
    logs = table.column("matches").to_numpy().astype(np.int64)
    if twice and table.num_rows:
        repeated = pc.and_(pc.is_in(table.column("rule"), pa.array(sorted(twice), pa.string())),
                           pc.fill_null(pc.match_substring(table.column("le"), "/"), False))
        logs[np.asarray(repeated.to_numpy(zero_copy_only=False), np.bool_)] = 0
    return logs


def _count_overflow(rows: pa.Table, ids: list[str], codes: np.ndarray, nulls: np.ndarray,
                    windows: np.ndarray, reasons: list[Limit | None],
                    refused: dict[tuple[str, Limit], int], twice: Collection[str]) -> None:
    """The logs of overflow series that came in, refused as :func:`admitted_table` says."""
    if not rows.num_rows:
        return
    reason_of = {(ids[c], bool(n), int(w)): r
                 for c, n, w, r in zip(codes, nulls, windows, reasons, strict=True)}
    for rule_id, window, logs in zip(rows.column("rule").to_pylist(),
                                     rows.column("window").to_pylist(),
                                     logs_column(rows, twice).tolist(), strict=True):
        key = (rule_id, window is None, window or 0)
        limit = reason_of.get(key) or Limit.RULE
        refused[(rule_id, limit)] = refused.get((rule_id, limit), 0) + int(logs)


def _group(table: pa.Table, rule: str, window: int | None) -> pa.ChunkedArray:
    """The rows of one (rule, window) (a counter's window is null)."""
    same = pc.equal(table.column("rule"), rule)
    at = pc.is_null(table.column("window")) if window is None else \
        pc.equal(table.column("window"), window)
    return pc.and_(same, pc.fill_null(at, False))
