"""Layer 1 — a shared job's policies as plain values, read by ``config``, checked by ``rules``
and applied by the engine:

* :mod:`l2m.policy.tenancy` — tenant mode: which targets each account may write to, and what
  an account may be called;
* :mod:`l2m.policy.limits` — series caps: the job's, per-account overrides."""
