"""The stored form of streaming state: versioned blobs, every layout ever written.

Input: a blob from the state store (bytes). Output: its mapping, checked for a version this
l2m reads, or :class:`~l2m.errors.StateFormatError`.

State outlives releases: every blob (formats 1–3, :data:`BLOB_FORMATS`) is orjson of a mapping
with ``"v"``, its format version. :func:`load_blob` reads every blob version l2m has written
since versions exist (``tests/golden/`` pins each) and refuses anything else with
``[STATE_FORMAT]``, naming the version it found and what to do. The checkpoint folder carries
the format in ``l2m.json`` (:func:`l2m.state.checkpoint.check_checkpoint`), so a wrong
checkpoint is refused before Spark starts.

Layouts, version 7 (:mod:`l2m.state.processor`): version 6's below, but a map entry's value
(orjson bytes) longer than :data:`FRAME_BYTES` is stored framed (:func:`dump_entry`): a 0 byte
(no JSON text starts with it), the JSON's length as 4 bytes little-endian, then the JSON as
one LZ4 frame — a bucket's JSON is ≈ 2.8× its LZ4 frame, and Spark's state server, RocksDB
and the checkpoint's changelog handle every byte of every entry a batch touches. Entries
written unframed (all of version 6's) are read as they are.

Version 6: version 5's below, but the groups of several
accounts share one entry, a *bucket*: ``counter_rules`` / ``gauge_rules`` ``"@" + number`` →
``{"a": {account: its version 5 group, without "w"}, "w": bucket of the last write}``, the
account's bucket being :func:`~l2m.state.processor.bucket_of` (a BLAKE2b hash of the account
modulo the key's buckets). ``meta`` adds ``"nb"``: the key's buckets, a power of two (about one
per four accounts the rule set places in the key's shard); a key without ``"nb"`` (continued
from version 5 or 4) keeps a group per account as version 5 does, until a counter key's sweep
moves them into buckets. A bucket's groups hold at most
:data:`~l2m.state.processor.GROUP_SERIES` series in all (the largest members past it have own
entries, marked ``"o"``).

Version 5: version 4's below, but a small rule of an
account (its series in ``"s"``) is not kept under its own id: ``counter_rules`` /
``gauge_rules`` ``"@" + account`` → ``{"r": {rule: its version 4 entry}, "own": [rule…]["w":
bucket of the group's last write]}`` — the account's *group*, holding its small rules' entries
(``"r"``) and listing its rules with an entry of their own (``"own"``: past the small size,
or moved out of a group past :data:`~l2m.state.processor.GROUP_SERIES` series, such an entry
marked ``"o": 1``). A rule in neither is new. ``meta`` adds ``"g": 1`` on keys started under
version 5: every account with an own entry there has a group (a key continued from version 4
has none, and reads an account's own entries until it has one). A version 4 key is read as a
version 5 key without groups.

Version 4 (not blobs: ``transformWithStateInPandas`` state variables of a (shard, window)
key, each value orjson bytes; the key's ``meta`` carries the version):

* ``meta``: ``{"v": 4, "swept": ms}`` (counter keys: when every rule's live series were last
  re-counted) or ``{"v": 4, "timer": ms[, "published": ms][, "rs": version]}`` (window
  keys: the pending timer; ``rs``, since live rules: the rule set of the key's last input,
  which its timers publish with — absent in entries written before, read as the query's
  first rules);
* ``counter_series`` (rule, series) → ``[generation, last_seen_ms, {le: partial}]``; the
  input statuses' late count is (``__status__``, ``"!late"``) → ``[0, last_seen_ms,
  partial]``; ``gauge_series`` (rule, series) → ``[generation, {le: partial}]``;
* ``counter_rules`` rule → ``{"sig": signature, "gen": generation, "n": {bucket: live
  series}, "w": bucket of the entry's last write[, "s": {series: [last_seen_ms, {le:
  partial}]}][, "m": [series…]]}`` (bucket: last touch ms // (counter_ttl / 128));
  ``gauge_rules`` rule → ``{"sig", "gen", "n": live series[, "s": {series: {le: partial}}][,
  "m"]}``. ``"s"``: a small rule's series, kept in its entry (and not as series entries)
  until it has more than 512; then they move to series entries for the rest of the
  generation. ``"m"``: such a moved rule's series, every live one (and expired ones not yet
  pruned), kept when its per-rule cap is at most 20,000. A series entry whose generation is
  not its rule's is read as absent, and a counter's last touched more than ``counter_ttl``
  ago as expired.

Version 3: as version 2, but a key's shard is its placement's — every series of
an account (a rule without an account: of the rule) in one shard
(:func:`l2m.engine.admission.placement_shard`), so series caps are counted in one key — and a
section may hold its rule's overflow series (key ``"!overflow"``); the section ``"__refused__"``
holds l2m's own refusal counts (series: rule, account, limit).

Version 2: a key's blob is ``{"v": 2, "rules": {rule id: section}}`` — a counter
key adds ``"swept": ms`` (when its idle series were last dropped for every rule; touched rules
are swept each batch) — and each section is what a version 1 blob holds below, without
``"v"``. Version 1:

* counter key: ``{"v": 1, "sig": signature, "series": {series: [last_seen_ms, {le:
  partial}]}}``; the input-status key (rule ``__status__``) adds ``"late": partial`` — logs
  that came after the watermark had closed their window;
* gauge key: ``{"v": 1, "sig": signature, "series": {series: {le: partial}}}``;
* partial: ``[matches, n, sum, exact_sum (decimal string or null), min, max, ts]``; a
  non-finite float is stored as ``"+Inf"``, ``"-Inf"`` or ``"NaN"``.

A partial's stored form is :meth:`l2m.engine.partials.Partial.dump`'s."""

from __future__ import annotations

import functools
from typing import Any

import orjson

from l2m.errors import StateFormatError

STATE_FORMAT = 7  # the version a new checkpoint is written in
READABLE = (1, 2, 3, 4, 5, 6, 7)  # every version this l2m reads (tests/golden pins each)
# Checkpoints this l2m continues in a newer format: format 4's entries are format 5's own
# entries, format 5's groups format 6's before they are bucketed, and format 6's entries
# format 7's unframed ones; the job moves them into groups and buckets, and frames large
# entries, as it goes (l2m.state.processor), so the marker says 7 from the first start on
# (a release that reads only formats up to 6 then refuses it).
UPGRADES = {4: 7, 5: 7, 6: 7}
# Format 7: an entry's JSON longer than this many bytes is stored as an LZ4 frame
# (dump_entry); below it the frame's header would eat most of what it saves.
FRAME_BYTES = 1024
_FRAMED = b"\x00"  # the first byte of a framed entry: never the first of JSON text
# The formats kept as one blob per state key; formats 4 to 7 keep map entries
# (l2m.state.processor), which carry no version of their own: the checkpoint's marker and
# its ``meta`` value do.
BLOB_FORMATS = (1, 2, 3)
UPGRADE_HINT = (
    "Start this release on a new checkpoint (a new `checkpoint:` path): counters restart at 0, "
    "which PromQL reads as a counter reset; rebuild history with `l2m backfill` if needed. "
    "Or keep running the release that wrote it. See docs/streaming.md, \"Upgrading\".")


def dump_blob(content: dict[str, Any], version: int) -> bytes:
    """A state blob of ``version``, one of :data:`BLOB_FORMATS` (a checkpoint keeps the format
    it was started with)."""
    assert version in BLOB_FORMATS, version
    return orjson.dumps({"v": version, **content})


def load_blob(raw: bytes) -> dict[str, Any]:
    """The content of a state blob, or :class:`StateFormatError` for a format not read."""
    try:
        content = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StateFormatError(f"a state blob is not readable ({exc}). {UPGRADE_HINT}") from None
    version = content.get("v", 0) if isinstance(content, dict) else "unknown"
    if version not in BLOB_FORMATS:
        raise StateFormatError(
            f"the checkpoint holds state blobs of format {version}; this l2m reads blobs of "
            f"format(s) {', '.join(map(str, BLOB_FORMATS))} (and format 4's map entries). "
            f"{UPGRADE_HINT}")
    assert isinstance(content, dict)  # checked above: a mapping with a readable version
    return content


@functools.cache
def _lz4() -> Any:
    """Arrow's LZ4 frame codec (imported on first use: Spark's driver-side Python processes
    import this module and never read an entry)."""
    import pyarrow as pa

    return pa.Codec("lz4")


def dump_entry(value: Any) -> bytes:
    """A map entry's stored value (format 7): its JSON, framed when longer than
    :data:`FRAME_BYTES` (module docstring)."""
    data = orjson.dumps(value)
    if len(data) <= FRAME_BYTES:
        return data
    return _FRAMED + len(data).to_bytes(4, "little") + _lz4().compress(data, asbytes=True)


def load_entry(raw: bytes) -> Any:
    """The value of a stored map entry, framed (format 7) or not (formats 4–7)."""
    if raw[:1] == _FRAMED:
        raw = _lz4().decompress(raw[5:], decompressed_size=int.from_bytes(raw[1:5], "little"),
                                asbytes=True)
    return orjson.loads(raw)
