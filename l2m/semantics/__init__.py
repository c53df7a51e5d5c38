"""Layer 1 — what a log's values and times mean (SPEC §2–3), once for every stage:

* :mod:`l2m.semantics.values` — field lookup, string form, numbers, text tokens, event time;
* :mod:`l2m.semantics.windows` — the one-minute window: its start and when the watermark
  closes it;
* :mod:`l2m.semantics.times` — times and durations as l2m shows them to people;
* :mod:`l2m.semantics.exphist` — Prometheus native histograms: bucket of a value, merge,
  bucket limit, spans and deltas, quantile estimates."""
