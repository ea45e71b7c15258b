"""L0: guards every command shares against hostile input, faults and kill -9.

* :mod:`~kvbudget.safety.outlock` — an exclusive lock on an output directory (one run per
  ``--out`` at a time; a second run refuses in one line).
* :mod:`~kvbudget.safety.redact` — the run's secrets (API keys) scrubbed from every artifact and
  message, whatever source echoed them.
* :mod:`~kvbudget.safety.yamlload` — YAML loaded with size, depth and alias-expansion limits.
* :mod:`~kvbudget.safety.procs` — child processes that die with their parent.
* :mod:`~kvbudget.safety.servers` — local server processes: a free port, a start that waits for
  ready within a deadline, a stop by PID (and process group).
* :mod:`~kvbudget.safety.limits` — the documented upper bounds of counts and sizes.
"""
