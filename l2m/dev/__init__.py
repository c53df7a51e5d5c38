"""Layer 8 — tools for development, tests and demos: the embedded broker (tansu), a log
generator, ``l2m demo``, the in-memory stand-in for the Kafka source, and the JVM class-data
archive builder (a training run of the whole job)."""
