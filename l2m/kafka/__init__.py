"""Layer 5 — the Kafka side of l2m, as PySpark Python Data Sources on confluent-kafka.

* :mod:`l2m.kafka.options` — the source's options, parsed and checked in one place;
* :mod:`l2m.kafka.offsets` — offset ranges and the task plan of a micro-batch (skew-aware
  splitting, admission control);
* :mod:`l2m.kafka.source` — the streaming source ``format("l2m-kafka")``: the driver side
  (offsets, planning, data loss, commits) and each task's ``read`` (consume → the read task,
  :mod:`l2m.engine.readtask`);
* :mod:`l2m.kafka.consumer` — the executor's consume loop over a task's offset ranges;
* :mod:`l2m.kafka.producer` — producers cached per Python worker, shared by the sink and the
  dead letters;
* :mod:`l2m.kafka.deadletters` — malformed and future-dated logs → the dead-letter topic;
* :mod:`l2m.kafka.sink` — the sink ``format("l2m-kafka-sink")``: samples → the metrics topic.
"""
