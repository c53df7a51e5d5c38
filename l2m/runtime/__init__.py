"""Layer 7 — running the job on Spark: the application's wiring of each command, the session
and its JVM, the worker daemon, failures as operator errors, the runner (restarts, graceful
stop), live rules, the driver's metrics and endpoint, and ``l2m deliver``.

* :mod:`l2m.runtime.app` — what ``l2m run``, ``l2m deliver`` and ``l2m backfill`` put
  together (the command line only parses and dispatches);
* :mod:`l2m.runtime.session` — Spark session settings; :mod:`l2m.runtime.jvm` — JVM options
  (the class-data archive);
* :mod:`l2m.runtime.daemon` — Spark's Python worker daemon, stages pre-imported;
* :mod:`l2m.runtime.forkserver` — forks the Python processes Spark starts on the driver's
  machine;
* :mod:`l2m.runtime.failures` — any failure → one :class:`~l2m.errors.L2mError`;
* :mod:`l2m.runtime.runner` — starts, watches, restarts and stops the query;
* :mod:`l2m.runtime.signals` — signal handlers that take no lock (their work on a relay
  thread);
* :mod:`l2m.runtime.reload` — live rules: a changed rule set noticed, validated whole,
  published or refused;
* :mod:`l2m.runtime.progress` — Spark's progress events read;
* :mod:`l2m.runtime.sparkstatus` — Spark's status store read (per-executor work);
* :mod:`l2m.runtime.telemetry` — the ``l2m_*`` metrics (what the runner reports, as
  :class:`~l2m.runtime.telemetry.RunObserver`); :mod:`l2m.runtime.endpoint` — the HTTP
  endpoint of ``run`` and ``deliver`` (``/metrics``, ``/healthz``, ``/readyz``);
* :mod:`l2m.runtime.deliver` — ``l2m deliver``: the metrics topic → remote-write endpoints,
  one consumer and thread each; :mod:`l2m.runtime.delivermetrics` — its
  ``l2m_remote_write_*`` metrics."""
