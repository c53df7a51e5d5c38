"""The checkpoint folder's own marker: which state format a checkpoint holds, checked before
Spark starts, so a checkpoint this l2m cannot continue is refused with ``[STATE_FORMAT]`` and
what to do, instead of failing inside a task.

Input: a checkpoint location (a local path, a ``file://`` URI or an object-store URI) and the
query's folder name. Output: the checkpoint's state format, 2 or 7 (a new checkpoint is marked
with :data:`~l2m.state.format.STATE_FORMAT` in ``l2m.json``), or
:class:`~l2m.errors.StateFormatError` for formats 0, 1 and 3 to 6
(:func:`l2m.state.format.refusal`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Protocol

from l2m.errors import StateFormatError
from l2m.state.format import BLOB_FORMAT, READABLE, STATE_FORMAT, refusal

CHECKPOINT_MARKER = "l2m.json"
# The format of a started object-store checkpoint without a marker: the releases that marked
# local checkpoints only (0.1.0, 0.2.0) wrote format 2. Left unmarked: a development build
# of that time wrote format 3 there, and its blobs, which carry their format, are refused at
# the first batch (l2m.state.format.load_blob).
UNMARKED_OBJECT_STORE_FORMAT = BLOB_FORMAT


def local_checkpoint(checkpoint: str) -> str | None:
    """The path of a checkpoint on a local (or mounted) disk — a plain path or a ``file://``
    URI; None for an object store (``s3a://``, ``gs://``, ``hdfs://``…)."""
    if checkpoint.startswith("file://"):
        return checkpoint.removeprefix("file://")
    return None if "://" in checkpoint else checkpoint


class Files(Protocol):
    """The few file operations the marker needs, on the checkpoint's own file system."""

    def read(self, path: str) -> str | None:
        """The file's text; None when it does not exist."""

    def write(self, path: str, text: str) -> None:
        """Write the file whole (atomically where the file system can)."""

    def is_dir(self, path: str) -> bool:
        """Whether the folder exists."""

    def names(self, folder: str) -> list[str]:
        """The names of the files in the folder (none when it does not exist)."""

    def delete(self, path: str) -> None:
        """Remove the file, if it exists."""


class LocalFiles:
    """A local (or mounted) disk."""

    def read(self, path: str) -> str | None:
        try:
            return Path(path).read_text()
        except FileNotFoundError:
            return None

    def write(self, path: str, text: str) -> None:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_suffix(".tmp")
        tmp.write_text(text)
        tmp.replace(target)

    def is_dir(self, path: str) -> bool:
        return Path(path).is_dir()

    def names(self, folder: str) -> list[str]:
        found = Path(folder)
        return sorted(p.name for p in found.iterdir() if p.is_file()) if found.is_dir() else []

    def delete(self, path: str) -> None:
        Path(path).unlink(missing_ok=True)


def check_checkpoint(checkpoint: str, query_dir: str, files: Files | None = None) -> int:
    """The state format of a checkpoint this l2m continues (a new one is marked with
    :data:`STATE_FORMAT`); a checkpoint it cannot continue is refused before Spark starts.

    ``files`` reads the checkpoint's file system: a local path's own disk by default; an
    object store (``s3a://``…) needs Spark's (:mod:`l2m.streaming.job`), and without it the
    checkpoint is taken for :data:`STATE_FORMAT` unread. A checkpoint with a query folder but
    no ``l2m.json``: on a local disk it was written before state versions and is refused; on an
    object store by a release that marked only local checkpoints (0.1.0, 0.2.0), of format 2
    (:data:`UNMARKED_OBJECT_STORE_FORMAT`). The two-query layout (``counters/``, ``gauges/``)
    is refused on both."""
    local = local_checkpoint(checkpoint)
    if local is None and files is None:
        return STATE_FORMAT
    root = (local if local is not None else checkpoint).rstrip("/")
    files = files or LocalFiles()
    text = files.read(f"{root}/{CHECKPOINT_MARKER}")
    if text is not None:
        try:
            found = json.loads(text).get("state_format")
        except (ValueError, AttributeError):
            found = "unreadable"
        if found not in READABLE:
            raise StateFormatError(refusal(found, f"checkpoint {checkpoint}"))
        return int(found)
    started = files.is_dir(f"{root}/{query_dir}/offsets")
    # The two-query layout (``counters/``, ``gauges/``) predates every release: its state would
    # not be read by the one query, which would start over from empty state unnoticed.
    two_queries = files.is_dir(f"{root}/counters") or files.is_dir(f"{root}/gauges")
    if started and local is None and not two_queries:
        return UNMARKED_OBJECT_STORE_FORMAT
    if started or two_queries:
        raise StateFormatError(refusal(0, f"checkpoint {checkpoint}"))
    files.write(f"{root}/{CHECKPOINT_MARKER}", json.dumps({"state_format": STATE_FORMAT}) + "\n")
    return STATE_FORMAT
