"""L3: capacity acceptance: plan file, environment lock, nine-cell execution, verdicts, A/B."""
