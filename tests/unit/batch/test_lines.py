"""Backfill line reading: whatever the cut points, block size or stripes, every line of a file
is read exactly once and equals Hadoop's line split (``\\n``, ``\\r\\n`` or ``\\r``)."""

from __future__ import annotations

import bz2
import gzip
import itertools
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from l2m.batch import lines as lines_module
from l2m.batch.lines import Split, plan_splits, read_split

content = st.lists(st.sampled_from([b"a", b"{}", b"\n", b"\r", b"\r\n", b"\xff", b" "]),
                   max_size=60).map(b"".join)


def _read(split: Split) -> list[bytes]:
    return [line for block in read_split(split) for line in block]


@settings(max_examples=300, deadline=None)
@given(content, st.lists(st.integers(0, 70), max_size=6), st.integers(1, 9))
def test_byte_ranges_read_every_line_once(tmp_path_factory, data: bytes, cuts: list[int],
                                          block: int) -> None:
    path = tmp_path_factory.mktemp("lines") / "f.jsonl"
    path.write_bytes(data)
    points = sorted({0, len(data), *(c for c in cuts if c < len(data))})
    old = lines_module.BLOCK
    lines_module.BLOCK = block
    try:
        got = [line for start, end in itertools.pairwise(points)
               for line in _read(Split(str(path), start, end))]
    finally:
        lines_module.BLOCK = old
    assert got == data.splitlines()


@pytest.mark.parametrize("opener", [gzip.open, bz2.open])
@settings(max_examples=60, deadline=None)
@given(data=content, stripes=st.integers(1, 4), block=st.integers(1, 9))
def test_compressed_stripes_read_every_line_once(tmp_path_factory, opener, data: bytes,
                                                 stripes: int, block: int) -> None:
    suffix = ".gz" if opener is gzip.open else ".bz2"
    path = tmp_path_factory.mktemp("lines") / f"f.jsonl{suffix}"
    with opener(path, "wb") as f:
        f.write(data)
    old = lines_module.BLOCK
    lines_module.BLOCK = block
    try:
        parts = [_read(Split(str(path), stripe=k, stripes=stripes)) for k in range(stripes)]
    finally:
        lines_module.BLOCK = old
    assert sorted(line for part in parts for line in part) == sorted(data.splitlines())
    assert sum(map(len, parts)) == len(data.splitlines())


def test_plan_covers_each_plain_file_and_stripes_compressed_ones(tmp_path: Path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_bytes(b"x" * (20 << 20))
    small = tmp_path / "small.jsonl"
    small.write_bytes(b"{}\n")
    packed = tmp_path / "p.jsonl.gz"
    with gzip.open(packed, "wb") as f:
        f.write(b"{}\n")
    splits = plan_splits([big, small, packed], parallelism=4)
    ranges = [(s.start, s.end) for s in splits if s.path == str(big)]
    assert ranges[0][0] == 0 and ranges[-1][1] == 20 << 20
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert [(s.start, s.end) for s in splits if s.path == str(small)] == [(0, 3)]
    assert [(s.stripe, s.stripes) for s in splits if s.path == str(packed)] == [
        (0, 4), (1, 4), (2, 4), (3, 4)]
