"""Layer 5 — the streaming state stage (``applyInPandasWithState``): counters and gauge windows
per series, kept in versioned blobs.

* :mod:`l2m.state.function` — the state function, dispatching keys to
  :mod:`l2m.state.counters` and :mod:`l2m.state.gauges`;
* :mod:`l2m.state.format` — every stored layout and its version;
* :mod:`l2m.state.checkpoint` — the checkpoint folder's format marker;
* :mod:`l2m.state.tally` — what state tasks report to the driver (accumulators, named keys)."""
