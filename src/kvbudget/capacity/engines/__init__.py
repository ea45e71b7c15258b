"""One folder per engine, each registering its KV layout and, if ``plan`` models it, its planner.

See :mod:`kvbudget.capacity.engines.registry` for the protocol and the lookups, and
``README.md`` ("Adding an engine") for what a new folder holds.
"""
