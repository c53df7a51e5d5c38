"""Layer 2 — Lucene query strings → a typed, checked query tree (SPEC §2).

* :mod:`l2m.query.nodes` — the compiled tree's node types, :class:`~l2m.query.nodes.FieldUse`
  (what the parse stage must extract per field) and the query settings;
* :mod:`l2m.query.compiler` — luqum's parse tree → nodes, one ``visit_<node>`` per luqum type;
* :mod:`l2m.query.clauses` — the clause tree as written, each clause's span in the query and
  its compiled node (``l2m explain``);
* :mod:`l2m.query.limits` — every size limit a query must stay within;
* :mod:`l2m.query.patterns` — wildcards and regular expressions as RE2 patterns, checked by the
  engine that runs them.

Depends on the base layer only (errors, values)."""
