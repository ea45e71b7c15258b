"""L1: latency metrics, percentiles with confidence intervals, A/B statistics, SLOs."""
