"""Layer 8 — tools for development, tests and demos.

* :mod:`l2m.dev.broker` — the embedded Kafka-compatible broker (tansu, in memory), and
  ``l2m broker``'s foreground run of it;
* :mod:`l2m.dev.generator` — deterministic, realistic JSON logs (late, malformed, skewed), and
  ``l2m generate``'s file of them;
* :mod:`l2m.dev.demo` — ``l2m demo``: broker, generator, the job and a live view together;
* :mod:`l2m.dev.memory` — the in-memory stand-in for the Kafka source, for tests;
* :mod:`l2m.dev.jvmarchive` — the driver JVM's class-data archive, built by a training run
  of the whole job;
* :mod:`l2m.dev.skew` — how logs spread over partitions (uniform, hot, Zipf), for ``l2m load``
  and the benchmarks;
* :mod:`l2m.dev.loadgen` — ``l2m load``'s producers: logs stamped with their production time,
  at a steady rate, by a skew;
* :mod:`l2m.dev.loadwatch` — ``l2m load``'s watchers: latency and lag from the metrics topic,
  the delay until Prometheus counts the logs;
* :mod:`l2m.dev.loadreport` — ``l2m load``'s report: the table, the JSON document, the plot;
* :mod:`l2m.dev.loadcli` — ``l2m load``'s run: the watchers, the load, the drain, the report
  printed."""
