"""The stored form of streaming state: the two formats this l2m continues, their keys and
layouts, and the refusal of every other.

Input: a blob of format 2 or a map entry of format 9 from the state store (bytes), a
checkpoint's or a key's format number. Output: the stored mapping, or
:class:`~l2m.errors.StateFormatError` with one ``[STATE_FORMAT]`` line naming the format found,
who wrote it and what to do.

State outlives releases. Releases 0.1.0 and 0.2.0 wrote format 2 (:data:`BLOB_FORMAT`); a
checkpoint of theirs continues in its own layout (:mod:`l2m.state.format2`), a plain restart.
A new checkpoint is written in format 9 (:data:`STATE_FORMAT`, :mod:`l2m.state.processor`).
Formats 1 (builds before 0.1.0) and 3 to 8 (0.3.0 development builds) are refused
(:data:`WRITTEN_BY`), before Spark starts when the checkpoint's ``l2m.json`` names them
(:func:`l2m.state.checkpoint.check_checkpoint`) and at their first blob or key otherwise;
format 0 (no version at all) too. ``tests/golden/`` pins both formats read.

Both formats key the state by (shard, window) (:data:`STATE_KEY`): a counter key by shard with
window :data:`CUMULATIVE`, a gauge key by (shard, one-minute window).

Format 9 (not blobs: ``transformWithStateInPandas`` state variables of a key,
:mod:`l2m.state.variables`, each value orjson bytes, stored framed when longer than
:data:`FRAME_BYTES` — :func:`dump_entry`: a 0 byte (no JSON text starts with it), the JSON's
length as 4 bytes little-endian, then the JSON as one LZ4 frame; a bucket's JSON is ≈ 2.8× its
frame, and Spark's state server, RocksDB and the checkpoint's changelog handle every byte of
every entry a batch touches; shorter values are plain JSON):

* ``meta``: ``{"v": 9, "g": 1, "nb": buckets, "swept": ms}`` (counter keys: when every rule's
  live series were last re-counted) or ``{"v": 9, "g": 1, "nb": buckets, "timer": ms[,
  "published": ms][, "rs": version]}`` (window keys: the pending timer, when the window was
  published final, and the rule set of the key's last input, which its timers publish with);
  ``"nb"``: the key's buckets, a power of two (about one per eight accounts the rule set
  places in the key's shard, :func:`l2m.state.buckets.bucket_count`);
* ``counter_pages`` / ``gauge_pages`` (rule, page number) → ``{"g": generation, "s": {series:
  value}}``: a large rule's series (one past its small size), each in the page
  :func:`page_of` its name (linear hashing over the entry's ``"pg"`` pages, about
  :data:`PAGE_SERIES` series a page); a counter's value ``[last_seen_ms, {le: partial}]``
  (counter pages expire after ``counter_ttl`` without a write, their series one by one as the
  page is next written), a gauge's ``{le: partial}``. A page of another generation than its
  rule's holds none of its series;
* ``counter_series`` (rule, series) → ``[0, last_seen_ms, {le: partial}]``: l2m's own counter
  rules' series (the input statuses', the refusals'), one entry each; the input statuses' late
  count is (``__status__``, :data:`LATE_SERIES`) → ``[0, last_seen_ms, partial]``;
  ``gauge_series`` (rule, series) → ``[0, {le: partial}]``: the refusal gauge's;
* ``counter_rules`` / ``gauge_rules``: a rule's entry — ``{"sig": signature, "gen": generation,
  "n": live series (counters: ``{bucket: count}`` by last-touch bucket, bucket = last touch ms
  // (counter_ttl / 128); gauges: a count), "w": bucket of the entry's last write[, "s":
  {series: [last_seen_ms, {le: partial}]} (gauges: ``{series: {le: partial}}``)][, "pg":
  pages][, "m": [series…]][, "o": 1][, "acct": account]}``. ``"s"``: a small rule's series,
  kept in its entry until it has more than 512; then they move to its pages (``"pg"``: how
  many, grown to one per :data:`PAGE_SERIES` of the series it counts) for the rest of the
  generation. ``"m"``: such a moved rule's series, every live one (and expired ones not yet
  pruned), kept when its per-rule cap is at most 20,000. A page whose generation is not its
  rule's holds none of its series, a counter last touched more than ``counter_ttl`` ago is
  expired. An
  account's small rules' entries are members of its *group*, ``{"r": {rule: entry}, "own":
  [rule…]}`` (``"own"``: its rules with an entry of their own — past the small size, or moved
  out of a group past 2,048 series, marked ``"o"``); the groups of several accounts share one
  entry, a *bucket*, under :func:`bucket_key` → ``{"a": {account: group}, "w": bucket of the
  last write}``, the account's bucket a BLAKE2b hash of the account modulo ``"nb"``
  (:func:`l2m.state.buckets.bucket_of`). Every other rule's entry is its own, keyed by its id,
  and records the account it counts for (``"acct"``, :data:`RULE_ACCOUNT`; absent in entries
  written before it was added: the rule's current account). Its key and its pages' are
  the rule's whatever its account, so a rule moved to another account of the key and back may
  find the other account's entry there: one whose ``"acct"`` is not the rule's account is not
  this account's, and the rule starts a new generation (the other's series read as absent)
  instead of continuing another tenant's counts.

Format 2 (one blob per key, :func:`dump_blob`): ``{"v": 2, "rules": {rule id: section}}``, a
counter key adding ``"swept": ms`` (when its idle series were last dropped for every rule;
touched rules are swept each batch). A section:

* counters: ``{"sig": signature, "series": {series: [last_seen_ms, {le: partial}]}}``; the
  input-status section (rule ``__status__``) adds ``"late": partial`` — logs that came after
  the watermark had closed their window;
* gauges: ``{"sig": signature, "series": {series: {le: partial}}}``;
* partial: ``[matches, n, sum, exact_sum (decimal string or null), min, max, ts]``; a
  non-finite float is stored as ``"+Inf"``, ``"-Inf"`` or ``"NaN"``
  (:meth:`l2m.engine.partials.Partial.dump`)."""

from __future__ import annotations

import functools
import zlib
from typing import Any

import orjson

from l2m.errors import StateFormatError

STATE_FORMAT = 9  # the format a new checkpoint is written in
BLOB_FORMAT = 2  # the format releases 0.1.0 and 0.2.0 wrote: continued, one blob per key
READABLE = (BLOB_FORMAT, STATE_FORMAT)  # every format this l2m continues (tests/golden)
# Who wrote each format this l2m refuses: no release of l2m did.
WRITTEN_BY = {0: "l2m builds before state format versions",
              1: "l2m builds before 0.1.0",
              3: "0.3.0 development builds", 4: "0.3.0 development builds",
              5: "0.3.0 development builds", 6: "0.3.0 development builds",
              7: "0.3.0 development builds", 8: "0.3.0 development builds"}
UPGRADE_HINT = (
    "Start this release on a new `checkpoint:` path with `source.starting_offsets` set to where "
    "the old job stopped: counters restart at 0, which PromQL reads as a counter reset; "
    "rebuild history with `l2m backfill` if needed. See docs/streaming.md, \"Upgrading\".")

STATE_KEY = ("shard", "window")  # the state key's columns, both formats
CUMULATIVE = -1  # the window of every counter key

# Format 9's key layout.
LATE_SERIES = "!late"  # the input statuses' late-log count, beside their series
GROUP_PREFIX = "@"  # a bucket's key in a rule map: a rule id never starts with it
RULE_ACCOUNT = "acct"  # an own rule entry's account (a member's is its group's)
# An entry's JSON longer than this many bytes is stored as an LZ4 frame (dump_entry): below
# it the frame's header would eat most of what it saves.
FRAME_BYTES = 1024
# A rule past its small size keeps its series in pages of about this many (pages_for): a page
# is one state request whichever number of its series a batch touches, and a request's fixed
# cost is that of about 3 KB of value (benchmarks/README.md, "How is state stored?").
PAGE_SERIES = 32
_FRAMED = b"\x00"  # the first byte of a framed entry: never the first of JSON text


def refusal(found: object, where: str) -> str:
    """The one line that refuses state of format ``found`` (``where``: what holds it, e.g.
    "checkpoint s3a://b/cp"): who wrote it, what this l2m continues, what to do."""
    writer = WRITTEN_BY.get(found) if isinstance(found, int) else None
    origin = f", which only {writer} wrote" if writer else ""
    return (f"{where} holds state format {found}{origin}; this l2m continues format "
            f"{BLOB_FORMAT} (releases 0.1.0 and 0.2.0) and format {STATE_FORMAT}. "
            f"{UPGRADE_HINT}")


def bucket_key(number: int) -> str:
    """The key of bucket ``number``'s entry in a rule map."""
    return GROUP_PREFIX + str(number)


def series_hash(name: str) -> int:
    """The hash that places a series in its rule's pages: CRC-32 of its UTF-8 name. Stored
    pages are found by it: it must never change."""
    return zlib.crc32(name.encode("utf-8", "surrogatepass"))


def page_at(h: int, pages: int) -> int:
    """The page of ``pages`` (linear hashing) holding a series of hash ``h``: the low bits of
    ``h`` below the smallest power of two of at least ``pages``, one bit fewer when that names
    a page not made yet. Growing ``pages`` by one splits one page only (:func:`split_from`)."""
    mask = (1 << (pages - 1).bit_length()) - 1 if pages > 1 else 0
    page = h & mask
    return page if page < pages else page & (mask >> 1)


def page_of(name: str, pages: int) -> int:
    """The page of a rule's ``pages`` holding the series ``name``."""
    return page_at(series_hash(name), pages)


def split_from(old: int, new: int) -> list[int]:
    """The pages of ``old`` whose series may move when a rule grows to ``new`` pages: the page
    each new page's series were in (a new page's number is itself a hash that lands in it)."""
    return sorted({page_at(page, old) for page in range(old, new)})


def pages_for(series: int) -> int:
    """How many pages a rule of ``series`` series spreads them over: one per
    :data:`PAGE_SERIES`."""
    return max(1, -(-series // PAGE_SERIES))


def dump_blob(content: dict[str, Any]) -> bytes:
    """A state blob of format 2 (a checkpoint keeps the format it was started with)."""
    return orjson.dumps({"v": BLOB_FORMAT, **content})


def load_blob(raw: bytes) -> dict[str, Any]:
    """The content of a format 2 state blob, or :class:`StateFormatError` for any other."""
    try:
        content = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StateFormatError(f"a state blob is not readable ({exc}). {UPGRADE_HINT}") from None
    version = content.get("v", 0) if isinstance(content, dict) else "unknown"
    if version != BLOB_FORMAT:
        raise StateFormatError(refusal(version, "the checkpoint"))
    assert isinstance(content, dict)  # checked above: a mapping of the format read
    return content


@functools.cache
def _lz4() -> Any:
    """Arrow's LZ4 frame codec (imported on first use: Spark's driver-side Python processes
    import this module and never read an entry)."""
    import pyarrow as pa

    return pa.Codec("lz4")


def dump_entry(value: Any) -> bytes:
    """A map entry's stored value (format 9): its JSON, framed when longer than
    :data:`FRAME_BYTES` (module docstring)."""
    data = orjson.dumps(value)
    if len(data) <= FRAME_BYTES:
        return data
    return _FRAMED + len(data).to_bytes(4, "little") + _lz4().compress(data, asbytes=True)


def load_entry(raw: bytes) -> Any:
    """The value of a stored map entry, framed or not (format 9 writes both)."""
    if raw[:1] == _FRAMED:
        raw = _lz4().decompress(raw[5:], decompressed_size=int.from_bytes(raw[1:5], "little"),
                                asbytes=True)
    return orjson.loads(raw)


def dump_value(value: Any) -> tuple[bytes]:
    """A state variable's value (a one-field row) holding ``value`` as a format 9 entry."""
    return (dump_entry(value),)


def load_value(stored: tuple[Any, ...] | None) -> Any:
    """The entry a state variable's value holds (None: absent)."""
    return None if stored is None else load_entry(stored[0])


def check_key_meta(meta: dict[str, Any]) -> None:
    """A key's stored meta of :data:`STATE_FORMAT`, or :class:`StateFormatError`: a key of
    another format, named as the build that wrote it knew it (a development build continued
    format 4 or 5 keys as 7 without moving them into buckets: no ``"nb"``, or no complete
    groups, ``"g"``)."""
    version = meta.get("v")
    if version == 7 and ("nb" not in meta or meta.get("g") != 1):
        version = 4 if meta.get("g") != 1 else 5
    if version != STATE_FORMAT:
        raise StateFormatError(refusal(version, "a state key of the checkpoint"))
