"""Layer 5 — Prometheus remote write 1.0 (docs/prometheus.md): samples → requests a
Prometheus-compatible TSDB accepts.

* :mod:`l2m.remotewrite.encode` — series and metadata → the snappy-compressed protobuf
  ``WriteRequest``, encoded by hand; malformed requests refused before sending;
* :mod:`l2m.remotewrite.client` — one endpoint: tenant header, TLS, retries of what may
  succeed later, never of what cannot;
* :mod:`l2m.remotewrite.outbox` — metrics-topic records checked, then → requests by the
  time-stamping policy, per tenant; the tally of what became of them.

It sits beside ``kafka`` and ``state`` and reads only layers below them: the sample record's
headers and marks (:mod:`l2m.engine.samples`), the rule model (a metric's kind and
aggregation, :mod:`l2m.rules.model`), errors, and from :mod:`l2m.config.job` how an
endpoint's URL is shown (without credentials)."""
