"""Input statuses: what the parse stage made of each record, as a named type.

Input: none. Output: :class:`Status` (the ``_status`` column's values), each status's label
(the ``status`` label of ``l2m_input_logs_total``, the backfill summary's lines), which
statuses the rules see and which go to the dead-letter topic, and the status rows' series —
every log also yields one status row (rule :data:`STATUS_RULE`) whose one-value series is its
status label, so one job yields both the metrics and the run's summary."""

from __future__ import annotations

from enum import IntEnum

from l2m.engine.labels import one_value_series

# The rule id of the status rows (never a valid rule id: ids are [a-z0-9][a-z0-9_-]*).
STATUS_RULE = "__status__"


class Status(IntEnum):
    """A record's parse status (the ``_status`` column, ``int8``)."""

    OK = 0
    MALFORMED = 1
    # No usable event time: skipped (backfill, or streaming without a Kafka time).
    NO_TIMESTAMP = 2
    # An empty line in a JSON-lines file or an empty Kafka record: skipped, not a log.
    BLANK = 3
    # Streaming: no usable event time, dated by the Kafka record instead; routed.
    KAFKA_TIME = 4
    # Streaming: event time too far ahead of the record's time; not routed.
    FUTURE = 5

    @property
    def label(self) -> str:
        """The status as metrics and summaries show it (a log dated by its Kafka time is
        reported as ``no_timestamp``)."""
        return STATUS_NAMES[self]

    @property
    def series(self) -> str:
        """The series key of this status's rows (:func:`status_series`)."""
        return status_series(self.label)


# Index = status code.
STATUS_NAMES: tuple[str, ...] = ("ok", "malformed", "no_timestamp", "blank", "no_timestamp",
                                 "future")
ROUTED: tuple[Status, ...] = (Status.OK, Status.KAFKA_TIME)  # the rules see these logs
# These records go to the dead-letter topic.
DEAD_LETTERED: tuple[Status, ...] = (Status.MALFORMED, Status.FUTURE)


def status_series(label: str) -> str:
    """A status row's series key: its label as a one-value series (``2:ok``), in the series
    key encoding of :mod:`l2m.engine.labels` (``<length>:<value>``)."""
    return one_value_series(label)


def status_label(series: str) -> str:
    """The label of a status row's series key (:func:`status_series` inverted; also a cut
    row's rule id, :mod:`l2m.engine.labels`)."""
    return series.partition(":")[2]
