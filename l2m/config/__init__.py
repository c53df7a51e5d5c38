"""Layer 3 — job configuration files (``topology/*.yaml``) → a typed
:class:`~l2m.config.job.JobConfig`.

* :mod:`l2m.config.job` — the typed records and their defaults (:mod:`l2m.defaults`);
* :mod:`l2m.config.loader` — YAML → records, every error positioned and secret-safe;
* :mod:`l2m.config.decode` — the loader's typed decoder: plain values → the frozen records,
  driven by their field types.

Depends on the query layer and the base layer; independent of :mod:`l2m.rules`."""
