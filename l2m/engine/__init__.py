"""Layer 4 — the Arrow engine: everything l2m does per log, without a JVM (no pyspark import;
checked by tests/unit/project/test_layers.py).

    records → parse (decoding, parse) → route (routing, match, fanout)
            → pre-aggregate (preaggregate) → partials (partials) → samples (samples)

* :mod:`l2m.engine.readtask` — runs these for one read task (the Kafka reader's, the
  in-memory source's, backfill's); :mod:`l2m.engine.streamtask` — the streaming read task:
  partials tagged with their rule-set version and state shard;
* :mod:`l2m.engine.pipeline` — a task's partials; the rules shipped to executors;
* :mod:`l2m.engine.decoding`, :mod:`l2m.engine.parse` — JSON lines → the referenced fields'
  typed columns; :mod:`l2m.engine._scan` (C) reads the usual lines in one pass;
  :mod:`l2m.engine.status` — what the parse made of each record;
* :mod:`l2m.engine.routing` — the compiled rule set; :mod:`l2m.engine.rulesets` — rule sets by
  version on the workers (live rules);
* :mod:`l2m.engine.match` — queries → boolean masks; :mod:`l2m.engine.fanout` — masks → one
  match row per (log, matching rule);
* :mod:`l2m.engine.labels` — label values cut to the job's limit, the cuts counted;
* :mod:`l2m.engine.preaggregate` — match rows → one partial per series and window in the task;
* :mod:`l2m.engine.columns` — the partials' columns and Spark DDL (no Arrow);
  :mod:`l2m.engine.partials` — the partial aggregate: Arrow schema, merge, stored form;
* :mod:`l2m.engine.admission` — series caps: which new series a state domain admits;
* :mod:`l2m.engine.samples` — partials → samples;
* :mod:`l2m.engine.nativebuckets` — native-histogram bucket indexes of a column (numpy);
* :mod:`l2m.engine.ipc` — Arrow tables as single binary values (LZ4 IPC streams)."""
