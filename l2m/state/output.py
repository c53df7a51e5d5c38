"""A state call's output, for either format: its samples as the stage's output frame, counted
per rule, and the refusals of its series caps as rows of l2m's own refusal counts.

Input: the samples one call produced (:func:`l2m.engine.samples.rule_samples`' dicts), or an
:class:`~l2m.engine.admission.Admission`'s refusals. Output: :data:`OUTPUT_SCHEMA` frames
(:func:`~l2m.engine.samples.samples_frame`) and refusal rows, each also added to the driver's
per-rule metrics (:mod:`l2m.state.accounts`)."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pandas as pd
from pyspark import Accumulator

from l2m.engine.admission import Admission, refused_series
from l2m.engine.columns import SAMPLE_SCHEMA
from l2m.engine.partials import Partial
from l2m.engine.samples import samples_frame
from l2m.state.rows import Rows
from l2m.state.tally import RefusedCount, SampleCount, Tally

# The state stage's output: a sample's Kafka key, JSON value, time and mark, or in ``pack`` a
# call's samples together (l2m.engine.samples.samples_frame).
OUTPUT_SCHEMA = SAMPLE_SCHEMA


def refusal_rows(admission: Admission | None, activity: Accumulator[Tally] | None) -> Rows:
    """A call's refusals as rows of l2m's own refusal counts (one log each), also added to
    the driver's metrics (``activity``)."""
    if admission is None or not admission.refused:
        return []
    rows = []
    tally: Tally = {}
    for (rule_id, limit), (logs, ts) in sorted(admission.refused.items()):
        account = admission.account_of(rule_id)
        rows.append((refused_series(rule_id, account, limit), "",
                     Partial(logs, logs, float(logs), Decimal(logs), None, None, ts)))
        tally[RefusedCount(rule_id, account or "", str(limit))] = logs
    if activity is not None:
        activity.add(tally)
    return rows


def emitted(samples: list[dict[str, Any]], activity: Accumulator[Tally] | None,
            batch_ms: int, mark: str | None = None) -> Iterator[pd.DataFrame]:
    """The samples of one call as the output frame (:func:`~l2m.engine.samples.
    samples_frame`, at the micro-batch's time ``batch_ms``, gauge windows' ``mark``), counted
    per rule."""
    if not samples:
        return
    if activity is not None:
        # Counted by rule id, then keyed: a record per sample was 95,000 a 100,000-rule batch.
        counts: dict[str, int] = {}
        for s in samples:
            counts[s["rule"]] = counts.get(s["rule"], 0) + 1
        activity.add({SampleCount(rule): n for rule, n in counts.items()})
    yield samples_frame(samples, batch_ms, mark)
