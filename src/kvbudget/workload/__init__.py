"""L1: workloads: arrivals, lengths, prompt prefixes and tenants, the nine-cell matrix, traces."""
