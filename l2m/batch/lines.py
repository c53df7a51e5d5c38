"""Line reading for the backfill: files → splits (planned on the driver) → lines (read in the
task that parses them, in Python, without the JVM).

Lines end at ``\\n``, ``\\r\\n`` or ``\\r`` — Hadoop's rule, which Spark's text source
followed — and are bytes: a line that is not UTF-8 stays a line (malformed for the parse
stage). A final terminator does not start an empty line.

A plain file is cut into byte ranges; a line belongs to the range holding its first byte, so
every line is read exactly once whatever the cut points. A compressed file (``.gz``,
``.bz2``) cannot be cut: with fewer such files than cores, each is read by several tasks in
*stripes* — every task decompresses the whole stream (cheap next to parsing) and takes every
n-th block of lines.

Input: file paths (a directory: every file under it, :func:`input_files`). Output:
:class:`Split` descriptors (:func:`plan_splits`), and per split
lists of lines (:func:`read_split`).
"""

from __future__ import annotations

import bz2
import gzip
import io
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeAlias

from l2m.errors import InputError

# A binary file: plain (open) or decompressing (gzip, bz2 files are buffered streams).
Binary: TypeAlias = IO[bytes] | io.BufferedIOBase

BLOCK = 8 << 20  # bytes read (or decompressed) at a time
_TERMINATOR = re.compile(rb"[\r\n]")
# Hadoop codecs Spark's text source would decompress by extension that Python's standard
# library cannot: such files are read by Spark (l2m.batch.backfill).
SPARK_CODECS = (".deflate", ".lz4", ".snappy", ".zst", ".zstd")
COMPRESSED = (".gz", ".bz2")  # what Python's standard library decompresses here


@dataclass(frozen=True)
class Split:
    """A byte range ``[start, end)`` of a plain file, or stripe ``stripe`` of ``stripes`` of a
    compressed one (``end`` is then -1)."""

    path: str
    start: int = 0
    end: int = -1
    stripe: int = 0
    stripes: int = 1


def compressed(path: str | Path) -> bool:
    return Path(path).suffix in COMPRESSED


def open_compressed(path: str | Path) -> io.BufferedIOBase:
    """A ``.gz`` or ``.bz2`` file, decompressed as it is read."""
    if Path(path).suffix == ".bz2":
        return bz2.open(path, "rb")
    return gzip.open(path, "rb")


def split_size(total: int, parallelism: int) -> int:
    """Bytes per split for ``total`` bytes: about four splits per core (even work at the tail
    of the job, finer progress), 8–128 MB each, rounded up (no crumb split at the end)."""
    return min(max(-(-total // (4 * parallelism)), 8 << 20), 128 << 20)


def plan_splits(files: Sequence[Path], parallelism: int) -> list[Split]:
    """Plain files cut by :func:`split_size`; compressed files striped over the cores they
    leave."""
    plain = {f: f.stat().st_size for f in files if not compressed(f)}
    packed = [f for f in files if compressed(f)]
    size = split_size(sum(plain.values()), parallelism)
    splits = [Split(str(f), start, min(start + size, length))
              for f, length in plain.items() for start in range(0, length, size)]
    stripes = max(1, parallelism // len(packed)) if packed else 1
    splits += [Split(str(f), stripe=k, stripes=stripes) for f in packed for k in range(stripes)]
    return splits


def read_split(split: Split) -> Iterator[list[bytes]]:
    """The split's lines, a block at a time."""
    if compressed(split.path):
        with open_compressed(split.path) as f:
            for index, chunk in enumerate(_whole_lines(f)):
                if index % split.stripes == split.stripe and chunk:
                    yield chunk.splitlines()
        return
    with open(split.path, "rb") as f:
        size = f.seek(0, 2)
        first = line_start(f, split.start, size)
        stop = line_start(f, split.end, size)
        f.seek(first)
        for chunk in _whole_lines(f, stop - first):
            if chunk:
                yield chunk.splitlines()


def line_start(f: Binary, pos: int, size: int) -> int:
    """The first position at or after ``pos`` where a line starts: 0, or just after a
    terminator (``\\r\\n`` is one terminator), or ``size``."""
    if pos <= 0:
        return 0
    if pos >= size:
        return size
    base = pos - 1
    f.seek(base)
    while True:
        block = f.read(1 << 16)
        if not block:
            return size
        found = _TERMINATOR.search(block)
        if found is None:
            base += len(block)
            continue
        at = base + found.start()
        if block[found.start()] == 0x0A:  # \n
            return at + 1
        # \r: one terminator with a \n right after it
        following = block[found.start() + 1:found.start() + 2]
        if not following and at + 1 < size:
            f.seek(at + 1)
            following = f.read(1)
        return at + 2 if following == b"\n" else at + 1


def _cut(block: bytes, final: bool) -> int:
    """Length of the part of ``block`` made of whole lines."""
    if final:
        return len(block)
    end = max(block.rfind(b"\n"), block.rfind(b"\r"))
    if end == len(block) - 1 and block[end] == 0x0D:  # \r: a \n may follow in the next read
        end = max(block.rfind(b"\n", 0, end), block.rfind(b"\r", 0, end))
    return end + 1


def _whole_lines(f: Binary, limit: int | None = None) -> Iterator[bytes]:
    """``f`` (up to ``limit`` bytes) one read at a time, each cut after its last whole line;
    the rest goes to the next. One chunk per read, empty ones too: stripes count reads."""
    carry = b""
    while True:
        want = BLOCK if limit is None else min(BLOCK, limit)
        data = f.read(want) if want else b""
        if limit is not None:
            limit -= len(data)
        final = len(data) < BLOCK  # read() fills its size until the end (or the limit)
        block = carry + data
        cut = _cut(block, final)
        carry = block[cut:]
        yield block[:cut]
        if final:
            return


def input_files(inputs: Sequence[str]) -> list[Path]:
    """Every file to read, in a stable order: files as given, directories recursively
    (skipping names that start with ``.`` or ``_``, as Spark does). An unreadable file or
    directory is an :class:`InputError`."""
    files: list[Path] = []
    seen: set[Path] = set()

    def add(path: Path) -> None:
        if not os.access(path, os.R_OK):
            raise InputError(f"{path}: cannot read (permission denied)")
        real = path.resolve()
        if real not in seen:
            seen.add(real)
            files.append(path)

    def unreadable(exc: OSError) -> None:
        raise InputError(f"{exc.filename}: cannot read directory ({exc.strerror})")

    for item in inputs:
        path = Path(item)
        if not path.is_dir():
            add(path)
            continue
        for root, dirs, names in os.walk(path, onerror=unreadable):
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            for name in sorted(names):
                if not name.startswith((".", "_")):
                    add(Path(root) / name)
    return files


def check_inputs_exist(inputs: Sequence[str | Path]) -> None:
    """Refuse inputs that do not exist, every one named in one :class:`InputError`."""
    missing = [str(p) for p in inputs if not Path(p).exists()]
    if missing:
        raise InputError("; ".join(f"{p}: no such file or directory" for p in missing))
