"""Layer 1 — how l2m's Python processes spend memory and time on many small objects:

* :mod:`l2m.process.collector` — the cyclic garbage collector paused around code that builds
  many objects without cycles;
* :mod:`l2m.process.records` — small frozen records that pickle as their class and field
  values."""
