"""L1: KV bytes per token/sequence/group, engine layouts, pools, budgets, ledger, assumptions."""
