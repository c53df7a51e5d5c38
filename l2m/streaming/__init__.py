"""Layer 6 — the streaming job: source → read tasks → watermark → state → sink, as one query.

* :mod:`l2m.streaming.job` — builds and starts the query;
* :mod:`l2m.streaming.topology` — ``l2m topology``, the stage graph rendered from the code."""
