"""Layer 5 — ``l2m backfill``: the rules over JSON-lines files as one Spark batch job.

* :mod:`l2m.batch.backfill` — the job;
* :mod:`l2m.batch.local` — the same stages in this process, without a JVM (``l2m test``,
  ``l2m validate --estimate``);
* :mod:`l2m.batch.summary` — what a run read and wrote, per rule;
* :mod:`l2m.batch.lines` — each task's split of the files, read in Python;
* :mod:`l2m.batch.packs` — Arrow tables through Spark's shuffle and collect as a few binary
  values instead of row by row;
* :mod:`l2m.batch.finals` — the last stage, on the executors: whole admission domains'
  partials → sample lines with their output order, and the run's tallies;
* :mod:`l2m.batch.progress` — task progress on stderr."""
