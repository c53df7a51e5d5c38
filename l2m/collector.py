"""The cyclic garbage collector paused around code that builds many short-lived objects
without cycles (a batch's parsed values, a task's samples, a state key's batch): while they
are built, each collection would scan them again, and they are freed by reference counting
anyway.

Input: a block of code. Output: the block run without cyclic collection, the collector's
state restored after it (whatever the block raised)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic collection inside the block; the collector's state restored after it."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()
