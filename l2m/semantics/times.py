"""Times and durations as l2m shows them to people (``l2m test``, ``l2m explain``,
``l2m validate --estimate``): one form everywhere, so that a time a failure prints can be
pasted into a test file.

Input: epoch milliseconds, or a span in milliseconds. Output: text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_text(ms: int) -> str:
    """Epoch milliseconds as ISO-8601 UTC: ``2026-11-22T10:00:00Z``, with the milliseconds
    when there are any (``…10:00:00.250Z``); outside years 1–9999 (no ISO form),
    ``<ms> ms since 1970``."""
    try:
        moment = _EPOCH + timedelta(milliseconds=ms)
    except OverflowError:
        return f"{ms} ms since 1970"
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    # strftime pads years below 1000 only on some platforms: the ISO form has four digits.
    text = f"{moment.year:04d}{text[text.index('-'):]}"
    return text + (f".{ms % 1000:03d}Z" if ms % 1000 else "Z")


def duration_text(ms: int) -> str:
    """A span as people read it and a test file or job file may write it: ``250ms``,
    ``1.5s``, ``20s``, ``5m``, ``16m 39s``, ``7d``."""
    if ms < 0:
        return "-" + duration_text(-ms)
    if ms < 1000:
        return f"{ms}ms"
    if ms < 60_000:
        return f"{ms / 1000:g}s"
    seconds = ms // 1000
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return " ".join(parts)
