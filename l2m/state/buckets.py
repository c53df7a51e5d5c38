"""Format 9's buckets: the groups of several accounts' small rules share one entry of a key's
rule map, so a batch touching most accounts of a key makes a request per few accounts — a
request's fixed cost (two socket round trips to the JVM's state server) is worth ≈ 3 KB of
value.

Input: accounts, the key's bucket count, the groups to store. Output: an account's bucket
(:func:`bucket_of`), how many buckets a key is made with (:func:`bucket_count`, by the accounts
the rule set places in its shard: :func:`shard_accounts`), and the entries to write for
changed buckets, each bounded (:func:`bucket_entries`, :func:`bounded`). Layout:
:mod:`l2m.state.format`."""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from l2m.engine.admission import account_shard
from l2m.state.format import RULE_ACCOUNT, bucket_key, dump_value

# A key has a power of two of buckets, about one per this many accounts placed in its shard by
# the rule set (bucket_count): ≈ 6 to 11 accounts a bucket.
BUCKET_ACCOUNTS = 8
# How far a counter key's buckets may drift from the rule set's before its sweep re-buckets
# it (a write of every group: as rare as that).
REBUCKET = 4
GROUP_SERIES = 2_048  # series of small rules one bucket entry holds at most

Put: TypeAlias = tuple[tuple[str], tuple[bytes]]  # a rule map entry to write: key, value

_BUCKET_HASHES: dict[str, int] = {}


def bucket_of(account: str, buckets: int) -> int:
    """The bucket of an account's group in a key of ``buckets`` buckets: a hash stable across
    processes and releases, and not the shard's (which is a CRC-32 modulo the shards: its low
    bits would leave most buckets of a key empty)."""
    found = _BUCKET_HASHES.get(account)
    if found is None:
        if len(_BUCKET_HASHES) > 1_000_000:
            _BUCKET_HASHES.clear()
        found = int.from_bytes(hashlib.blake2b(account.encode(), digest_size=4).digest(),
                               "little")
        _BUCKET_HASHES[account] = found
    return found % buckets


def bucket_count(accounts: int) -> int:
    """The buckets of a key whose shard holds ``accounts`` accounts: the power of two nearest
    to one per :data:`BUCKET_ACCOUNTS`, at least 1."""
    wanted = accounts / BUCKET_ACCOUNTS
    return 1 << round(math.log2(wanted)) if wanted > 1 else 1


def rebucket(buckets: int, wanted: int) -> bool:
    """Whether a counter key of ``buckets`` buckets is re-bucketed to ``wanted`` at its sweep:
    :data:`REBUCKET`-fold off."""
    return not wanted < buckets * REBUCKET or not buckets < wanted * REBUCKET


# Accounts per shard, by the rule table they were counted from (kept alive here, so that its
# id stays its own): a processor is rebuilt per task, the tables are the worker's.
_SHARD_ACCOUNTS: dict[tuple[int, int], tuple[Any, dict[int, int]]] = {}


def shard_accounts(source: Any, shards: int, accounts: Mapping[str, Any]) -> dict[int, int]:
    """How many of ``accounts`` (those of the rule table ``source``) each shard holds."""
    found = _SHARD_ACCOUNTS.get((id(source), shards))
    if found is not None and found[0] is source:
        return found[1]
    counts: dict[int, int] = {}
    for account in accounts:
        shard = account_shard(account, shards)
        counts[shard] = counts.get(shard, 0) + 1
    if len(_SHARD_ACCOUNTS) >= 4:  # the rule sets of batches in flight
        _SHARD_ACCOUNTS.pop(next(iter(_SHARD_ACCOUNTS)))
    _SHARD_ACCOUNTS[id(source), shards] = (source, counts)
    return counts


def _series_in(entry: dict[str, Any]) -> int:
    return len(entry.get("s", ()))


def bucket_entries(buckets: Mapping[int, dict[str, Any]], own: dict[str, dict[str, Any]],
                   w: int | None) -> tuple[list[Put], list[tuple[str]]]:
    """The entries to write for these buckets by number (each :func:`bounded`, members past
    the bound going to ``own``, and stamped with ``w``, the bucket of the write: counters),
    and the keys of those left without a group, to remove."""
    puts: list[Put] = []
    gone: list[tuple[str]] = []
    for number, bucket in sorted(buckets.items()):
        if not bucket["a"]:
            gone.append((bucket_key(number),))
            continue
        bounded(bucket["a"], own)
        if w is not None:
            bucket["w"] = w
        puts.append(((bucket_key(number),), dump_value(bucket)))
    return puts, gone


def bounded(groups: Mapping[str, dict[str, Any]], own: dict[str, dict[str, Any]]) -> None:
    """Groups stored in one entry, by account, bounded: past :data:`GROUP_SERIES` series in
    all, their largest members go to entries of their own for good (marked ``"o"``, recording
    their account, added to ``own``)."""
    total = sum(_series_in(e) for group in groups.values() for e in group["r"].values())
    # Sorted only when some must go: most buckets are well within the bound, and sorting
    # every member of every written bucket was 2% of a 100,000-rule state call.
    members = [] if total <= GROUP_SERIES else sorted(
        ((-_series_in(e), rule_id, account) for account, group in groups.items()
         for rule_id, e in group["r"].items()), key=lambda m: (m[0], m[1]))
    for minus, rule_id, account in members:
        if total <= GROUP_SERIES:
            break
        total += minus
        group = groups[account]
        entry = group["r"].pop(rule_id)
        entry["o"] = 1
        entry[RULE_ACCOUNT] = account
        group["own"].append(rule_id)
        own[rule_id] = entry
    for group in groups.values():
        group["own"].sort()
