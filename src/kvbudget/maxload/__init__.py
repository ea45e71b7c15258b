"""How much can it hold: the highest load (Poisson rate, closed-loop concurrency) that meets
an SLO, found by a bracketed bisection over probes (``kvbudget capacity``)."""
