"""Layer 6 — the streaming job: source → read tasks → watermark → state → sink, as one query.

* :mod:`l2m.streaming.job` — builds and starts the query;
* :mod:`l2m.streaming.topology` — ``l2m topology``, the stage graph rendered from the code;
* :mod:`l2m.streaming.rulesets` — the driver's side of live rules: versions published to the
  source, shipped to the executors, kept while a replay may need them;
* :mod:`l2m.streaming.accountmetrics` — the per-account samples, written by a thread of
  their own after each batch."""
