"""L3: audits: cross-tenant prefix-cache isolation and reused-KV correctness."""
