"""The checkpoint folder's own marker: which state format a checkpoint holds, checked before
Spark starts, so a checkpoint this l2m cannot continue is refused with ``[STATE_FORMAT]`` and
what to do, instead of failing inside a task.

Input: a checkpoint location (a local path, a ``file://`` URI or an object-store URI) and the
query's folder name. Output: the checkpoint's state format (a new local checkpoint is marked
with :data:`~l2m.state.format.STATE_FORMAT` in ``l2m.json``), or
:class:`~l2m.errors.StateFormatError`."""

from __future__ import annotations

import json
from pathlib import Path

from l2m.errors import StateFormatError
from l2m.state.format import READABLE, STATE_FORMAT, UPGRADE_HINT

CHECKPOINT_MARKER = "l2m.json"


def local_checkpoint(checkpoint: str) -> str | None:
    """The path of a checkpoint on a local (or mounted) disk — a plain path or a ``file://``
    URI; None for an object store (``s3a://``, ``gs://``, ``hdfs://``…)."""
    if checkpoint.startswith("file://"):
        return checkpoint.removeprefix("file://")
    return None if "://" in checkpoint else checkpoint


def check_checkpoint(checkpoint: str, query_dir: str) -> int:
    """The state format of a checkpoint this l2m continues (a new one is marked with
    :data:`STATE_FORMAT`); a checkpoint it cannot continue is refused before Spark starts.

    A checkpoint with a query folder but no ``l2m.json`` was written before state versions
    (or by the two-query layout); one whose version is not :data:`STATE_FORMAT` by another
    release. Only local (and mounted) paths are checked; object-store URIs rely on the
    blobs' own versions."""
    local = local_checkpoint(checkpoint)
    if local is None:
        return STATE_FORMAT
    root = Path(local)
    marker = root / CHECKPOINT_MARKER
    if marker.exists():
        try:
            found = json.loads(marker.read_text()).get("state_format")
        except (OSError, ValueError, AttributeError):
            found = "unreadable"
        if found not in READABLE:
            raise StateFormatError(
                f"checkpoint {checkpoint} holds state format {found}; this l2m reads formats "
                f"{', '.join(map(str, READABLE))}. {UPGRADE_HINT}")
        return int(found)
    started = (root / query_dir / "offsets").is_dir() or (root / "counters").is_dir() \
        or (root / "gauges").is_dir()
    if started:
        raise StateFormatError(
            f"checkpoint {checkpoint} was written by an l2m before state format versions "
            f"(format 0); this l2m reads format {STATE_FORMAT}. {UPGRADE_HINT}")
    root.mkdir(parents=True, exist_ok=True)
    tmp = marker.with_suffix(".tmp")
    tmp.write_text(json.dumps({"state_format": STATE_FORMAT}) + "\n")
    tmp.replace(marker)
    return STATE_FORMAT
