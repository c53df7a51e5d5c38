"""The stored form of streaming state (see :mod:`l2m.state.function` for the layouts): versioned blobs
and partial aggregates, with non-finite floats kept (orjson would write them as null).

Input: a blob from the state store (bytes). Output: its mapping, checked for a version this
l2m reads, or :class:`~l2m.errors.StateFormatError`."""

from __future__ import annotations

from typing import Any

import orjson

from l2m.errors import StateFormatError

STATE_FORMAT = 2  # the version a new checkpoint is written in
READABLE = (1, 2)  # every version this l2m reads (tests/golden pins each)
UPGRADE_HINT = (
    "Start this release on a new checkpoint (a new `checkpoint:` path): counters restart at 0, "
    "which PromQL reads as a counter reset; rebuild history with `l2m backfill` if needed. "
    "Or keep running the release that wrote it. See docs/streaming.md, \"Upgrading\".")

def dump_blob(content: dict[str, Any], version: int = STATE_FORMAT) -> bytes:
    """A state blob of ``version`` (a checkpoint keeps the format it was started with)."""
    return orjson.dumps({"v": version, **content})


def load_blob(raw: bytes) -> dict[str, Any]:
    """The content of a state blob, or :class:`StateFormatError` for a format not read."""
    try:
        content = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StateFormatError(f"a state blob is not readable ({exc}). {UPGRADE_HINT}") from None
    version = content.get("v", 0) if isinstance(content, dict) else "unknown"
    if version not in READABLE:
        raise StateFormatError(
            f"the checkpoint holds state format {version}; this l2m reads format(s) "
            f"{', '.join(map(str, READABLE))}. {UPGRADE_HINT}")
    return content  # type: ignore[no-any-return]
