"""Layer 1 — reading the files people write (rule files, job configurations):

* :mod:`l2m.yamlio.yamlsafe` — bounded, positioned YAML: no bombs, no hangs, no echo;
* :mod:`l2m.yamlio.suggest` — "did you mean …?" for a misspelled key."""
