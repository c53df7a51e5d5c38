"""Layer 4 — the Arrow engine: everything l2m does per log, without a JVM (no pyspark import;
checked by tests/unit/project/test_layers.py).

    records → parse (decoding, parse) → route (routing, match, fanout)
            → pre-aggregate (preaggregate) → partials (partials) → samples (samples)

:mod:`l2m.engine.readtask` runs these for one read task (the Kafka reader's, the in-memory
source's, backfill's); :mod:`l2m.engine.pipeline` holds a task's partials and ships the rules
to executors."""
