"""L3: what-if sweeps: a grid of simulator scenarios run in parallel on Ray (``kvbudget sweep``)."""
