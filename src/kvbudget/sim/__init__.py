"""L2: deterministic discrete-event simulator of a serving engine and a cluster."""
