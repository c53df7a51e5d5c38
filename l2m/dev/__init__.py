"""Layer 8 — tools for development, tests and demos.

* :mod:`l2m.dev.broker` — the embedded Kafka-compatible broker (tansu, in memory);
* :mod:`l2m.dev.generator` — deterministic, realistic JSON logs (late, malformed, skewed);
* :mod:`l2m.dev.demo` — ``l2m demo``: broker, generator, the job and a live view together;
* :mod:`l2m.dev.memory` — the in-memory stand-in for the Kafka source, for tests;
* :mod:`l2m.dev.jvmarchive` — the driver JVM's class-data archive, built by a training run
  of the whole job."""
