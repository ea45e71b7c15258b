"""L0: per-request records, metric samples and versioned result documents."""
