"""L3: audits: cross-tenant prefix-cache isolation and reused-KV correctness.

Entry points (import the modules; this package imports nothing heavy on its own):

* :func:`kvbudget.audit.isolation.run_isolation` (``IsolationConfig`` -> ``IsolationResult``)
* :func:`kvbudget.audit.reuse.run_reuse` (``ReuseConfig`` -> ``ReuseResult``)
* probes: :class:`kvbudget.audit.probe_http.HttpProbe` (``async with``; measured) and
  :class:`kvbudget.audit.probe_sim.SimProbe` (virtual time; simulated)

Each result is a :class:`kvbudget.records.ResultDocument` with ``summary()`` (headline fields,
e.g. ``cross_tenant_cached_tokens`` for accept's stop condition) and ``to_markdown(level)``
(a report section). Protocol and rules: ``docs/audits.md``.
"""
