"""One-minute tumbling windows (SPEC §3): the window a time falls in, and when the watermark
has closed one. Defined once for the fan-out (which dates each match row), the gauge state
(which closes windows) and the input statuses (which count late logs)."""

from __future__ import annotations

MINUTE_MS = 60_000  # a gauge window's length


def window_start(ts_ms: int) -> int:
    """Start of the one-minute tumbling window holding ``ts_ms``."""
    return ts_ms // MINUTE_MS * MINUTE_MS


def window_final(window: int, watermark: int, grace_ms: int, publish_delay_ms: int) -> bool:
    """The newest event time (the watermark plus the grace) has passed the end of the window
    starting at ``window`` by ``publish_delay_ms``: its value is published as final."""
    return watermark > 0 and window + MINUTE_MS + publish_delay_ms <= watermark + grace_ms


def window_closed(window: int, watermark: int) -> bool:
    """The watermark has passed the end of the window starting at ``window``: its state goes,
    and logs that still arrive for it are late (dropped by the gauges, counted)."""
    return window + MINUTE_MS <= watermark
