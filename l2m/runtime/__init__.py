"""Layer 7 — running the job on Spark: the session and its JVM, the worker daemon, failures as
operator errors, the runner (restarts, graceful stop), the driver's metrics and endpoint.

* :mod:`l2m.runtime.session` — Spark session settings; :mod:`l2m.runtime.jvm` — JVM options;
* :mod:`l2m.runtime.daemon` — Spark's Python worker daemon, stages pre-imported;
* :mod:`l2m.runtime.failures` — any failure → one :class:`~l2m.errors.L2mError`;
* :mod:`l2m.runtime.runner` — starts, watches, restarts and stops the query;
* :mod:`l2m.runtime.progress` — Spark's progress events read;
* :mod:`l2m.runtime.sparkstatus` — Spark's status store read (per-executor work);
* :mod:`l2m.runtime.telemetry` — the ``l2m_*`` metrics; :mod:`l2m.runtime.endpoint` — their
  HTTP endpoint."""
