"""Spark's query progress, read: what a micro-batch did, in l2m's terms.

Input: a progress event of the streaming query (``StreamingQuery.recentProgress``: a dict
with offsets as JSON text or dicts, rates, durations, state operators, event time). Output:
records read (offset ranges, not Spark's row count: the read tasks emit only partials),
whether a batch ran, record rates, per-partition offsets, lag, event times in seconds, and
the one progress line ``l2m run`` prints per micro-batch (:func:`describe`)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any


def input_records(progress: dict[str, Any]) -> int:
    """Records a micro-batch read: its offset ranges summed over the sources' partitions.
    Spark's ``numInputRows`` counts the rows the source emitted, and l2m's read tasks emit
    only their partials (about one per two hundred logs)."""
    total = 0
    for source in progress.get("sources", []):
        start = partition_offsets(source.get("startOffset")) or {}
        end = partition_offsets(source.get("endOffset"))
        if end is None:
            return int(progress.get("numInputRows") or 0)
        total += sum(max(0, int(o) - int(start.get(p, 0))) for p, o in end.items())
    return total if progress.get("sources") else int(progress.get("numInputRows") or 0)


def ran_a_batch(progress: dict[str, Any]) -> bool:
    """Whether the progress is of a micro-batch that ran. A trigger that finds no new data
    runs none, yet Spark reports it (at once the first time, then every 10 s while idle)
    under the id of the batch it would run next: the batch that then runs carries the same
    id. Only a batch that ran has an ``addBatch`` duration."""
    return "addBatch" in (progress.get("durationMs") or {})


def input_rates(progress: dict[str, Any]) -> tuple[float, float]:
    """Records per second arriving and processed, as Spark's input and processed row rates
    over the same intervals, in records (:func:`input_records`)."""
    rows = int(progress.get("numInputRows") or 0)
    if not rows:
        return 0.0, 0.0
    scale = input_records(progress) / rows
    return (float(progress.get("inputRowsPerSecond") or 0) * scale,
            float(progress.get("processedRowsPerSecond") or 0) * scale)


def partition_offsets(value: Any) -> dict[str, Any] | None:
    """The ``partitions`` of a source offset as Spark reports it (JSON text, a dict, or
    null), or None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return None
    if not isinstance(value, dict):
        return None
    partitions = value.get("partitions")
    return partitions if isinstance(partitions, dict) else None


def epoch_seconds(text: Any) -> float | None:
    """Seconds since the epoch of Spark's ISO-8601 timestamps (``…T10:00:00.000Z``)."""
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def lag(progress: dict[str, Any]) -> int | None:
    """Records behind the end of the topic after this batch, over all partitions."""
    total = 0
    for source in progress.get("sources", []):
        # A replayed batch (after a crash) is not planned again, so the source never computes
        # its latest offsets: Spark reports null, and the lag is unknown for that batch.
        latest = partition_offsets(source.get("latestOffset"))
        end = partition_offsets(source.get("endOffset"))
        if latest is None or end is None:
            return None
        for p, offset in latest.items():
            total += max(0, int(offset) - int(end.get(p, 0)))
    return total


def describe(name: str, progress: dict[str, Any], reduction: tuple[int, int] | None = None,
             late: int = 0) -> str:
    """One progress line: batch, rows, rates, lag, duration, state, the pre-aggregation's
    rows in → out and the logs dropped past the watermark, when known."""
    state = progress.get("stateOperators") or []
    rows = sum(int(s.get("numRowsTotal", 0)) for s in state)
    dropped = late + sum(int(s.get("numRowsDroppedByWatermark", 0)) for s in state)
    behind = lag(progress)
    arriving, processed = input_rates(progress)
    parts = [
        f"{name:<8} batch {progress.get('batchId'):>5}",
        f"in {input_records(progress):>8} rows",
        f"{arriving:>9.0f}/s in",
        f"{processed:>9.0f}/s processed",
        f"lag {behind if behind is not None else '?':>8}",
        f"{int(progress.get('durationMs', {}).get('triggerExecution', 0)):>6} ms",
        f"state {rows}",
    ]
    if reduction and reduction[0]:
        rows_in, rows_out = reduction
        parts.append(f"preagg {rows_in}→{rows_out} ({rows_in / max(rows_out, 1):.0f}×)")
    if dropped:
        parts.append(f"late dropped {dropped}")
    watermark = (progress.get("eventTime") or {}).get("watermark")
    if watermark and not watermark.startswith("1970"):
        parts.append(f"watermark {watermark}")
    return "  ".join(parts)
