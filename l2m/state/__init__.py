"""Layer 5 — the streaming state stage: counters and gauge windows per series, kept across
micro-batches in the checkpoint, in one of the two state formats this l2m continues.

* :mod:`l2m.state.format` — every format number, key and stored layout, and the refusal of
  the formats not read;
* :mod:`l2m.state.checkpoint` — the checkpoint folder's format marker, checked before Spark
  starts;
* :mod:`l2m.state.processor` — format 9's ``transformWithStateInPandas`` processor, a
  dispatcher over :mod:`l2m.state.counterkeys` (counter keys, their sweeps) and
  :mod:`l2m.state.windowkeys` (gauge window keys, their timers and publication), both built
  on :mod:`l2m.state.keycall` (a key's batch applied, series read and written);
* :mod:`l2m.state.rulebook` — format 9's rule entries of one call;
* :mod:`l2m.state.pages` — format 9's pages of a large rule's series in one call;
* :mod:`l2m.state.buckets` — format 9's buckets of accounts' small rules;
* :mod:`l2m.state.caps` — series caps in a format 9 call;
* :mod:`l2m.state.variables` — format 9's state variables, and the light wrapper the query
  is given;
* :mod:`l2m.state.mapio` — format 9's state calls, pipelined;
* :mod:`l2m.state.format2` — format 2's ``applyInPandasWithState`` function (checkpoints of
  0.1.0 and 0.2.0), which format 9's code never imports;
* :mod:`l2m.state.counters` and :mod:`l2m.state.gauges` — one rule's counters and one rule's
  gauge window, for either format;
* :mod:`l2m.state.rows` and :mod:`l2m.state.output` — a call's input (unpacked, counted, by
  rule, its rule set) and output (samples, refusals), for either format;
* :mod:`l2m.state.tally` — what state tasks report to the driver (accumulators, named keys);
* :mod:`l2m.state.accounts` — the per-tenant view of those reports (top accounts plus
  ``__other__``)."""
