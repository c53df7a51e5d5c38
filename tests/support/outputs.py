"""The state stage's output frames read back as the Kafka sink reads them: every sample's
(key, value, time, mark), a call's packed samples unpacked (l2m.engine.samples)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson
import pandas as pd
import pyarrow as pa

from l2m.engine.samples import unpacked_samples


def output_rows(frames: Iterable[pd.DataFrame]) -> list[tuple[Any, ...]]:
    """(key, value, time, mark) of every sample in ``frames``, in order."""
    batches = (pa.RecordBatch.from_pandas(frame, preserve_index=False) for frame in frames)
    return [(row["key"], row["value"], row["time"], row["mark"])
            for batch in unpacked_samples(batches) for row in batch.to_pylist()]


def output_samples(frames: Iterable[pd.DataFrame]) -> list[dict[str, Any]]:
    """The samples (parsed JSON values) in ``frames``, in order."""
    return [orjson.loads(value) for _key, value, _time, _mark in output_rows(frames)]
