"""Offsets and planning: the offset ranges of a micro-batch, how they are cut into tasks, and
how much a micro-batch admits.

Input: per partition, the start and end offsets of a batch (and the backlog, for admission).
Output: tasks — lists of :class:`OffsetRange` — of about equal size; end offsets that admit
about ``maxRecordsPerTrigger`` records."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class OffsetRange:
    partition: int
    start: int  # inclusive
    end: int  # exclusive

    @property
    def size(self) -> int:
        return self.end - self.start


def plan_tasks(ranges: Sequence[OffsetRange], max_per_task: int | None = None,
               min_tasks: int | None = None, balanced: bool = True) -> list[list[OffsetRange]]:
    """Group offset ranges into tasks.

    ``balanced=False`` is the classic plan: one task per partition range, however big. The
    balanced plan decides the number of tasks — enough that none holds more than
    ``max_per_task`` records, at least ``min_tasks`` — and lays the ranges end to end, cutting
    the sequence into tasks of equal size. A hot partition is so read by several tasks at
    once, small partitions share a task instead of each paying a task's fixed cost, and a
    task holds at most one contiguous piece of each partition (read in one pass)."""
    ranges = sorted((r for r in ranges if r.size > 0), key=lambda r: (r.partition, r.start))
    if not balanced or not ranges:
        return [[r] for r in ranges]
    total = sum(r.size for r in ranges)
    tasks = max(min_tasks or 1, math.ceil(total / max_per_task) if max_per_task else 1)
    tasks = min(tasks, total)
    bounds = [total * i // tasks for i in range(tasks + 1)]  # task i: [bounds[i], bounds[i+1])
    plan: list[list[OffsetRange]] = [[] for _ in range(tasks)]
    position = 0  # where this range starts in the end-to-end sequence
    task = 0
    for rng in ranges:
        first, last = position, position + rng.size
        while task < tasks and bounds[task] < last:
            lo = max(first, bounds[task])
            hi = min(last, bounds[task + 1])
            if hi > lo:
                plan[task].append(OffsetRange(rng.partition, rng.start + lo - first,
                                              rng.start + hi - first))
            if bounds[task + 1] <= last:
                task += 1
            else:
                break
        position = last
    return [t for t in plan if t]


def rate_limit(start: dict[int, int], latest: dict[int, int], limit: int) -> dict[int, int]:
    """End offsets admitting about ``limit`` records, shared in proportion to each
    partition's backlog; a partition with any backlog advances by at least one."""
    backlog = {p: max(0, latest[p] - start.get(p, 0)) for p in latest}
    total = sum(backlog.values())
    if total <= limit:
        return dict(latest)
    end = {}
    for p, size in backlog.items():
        share = limit * size / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        end[p] = start.get(p, 0) + min(size, take)
    return end


