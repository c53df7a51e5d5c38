"""Layer 3 — rule files (SPEC §1) → validated, immutable rules.

* :mod:`l2m.rules.model` — :class:`~l2m.rules.model.Rule`, :class:`~l2m.rules.model.RuleSet`
  and what a rule may say (kinds, aggregations, keys, name patterns);
* :mod:`l2m.rules.loader` — YAML files → rules, every problem reported with its position;
* :mod:`l2m.rules.identity` — series identity: at most one enabled rule may be able to emit
  a given series;
* :mod:`l2m.rules.snapshot` — a rule set as stored data and its version, so that a replayed
  micro-batch runs with the rules it was planned with.

Depends on the query layer and the base layer; independent of :mod:`l2m.config`."""
