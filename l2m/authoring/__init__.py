"""Layer 8 — tools for rule authors, without a JVM: what a rule will make of logs before it
is submitted, computed by backfill's own stages (:mod:`l2m.batch.local`).

* :mod:`l2m.authoring.testfile` — rule unit test files: the rules, the settings, the cases;
* :mod:`l2m.authoring.ruletest` — ``l2m test``: runs them, reports failures, JUnit XML;
* :mod:`l2m.authoring.explain` — ``l2m explain``: why one log did or did not count;
* :mod:`l2m.authoring.estimate` — ``l2m validate --estimate``: a rule's cost on a sample."""
