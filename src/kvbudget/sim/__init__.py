"""L2: deterministic discrete-event simulator of a serving engine and a cluster."""

from kvbudget.sim import native

# a mypyc build of the hot modules, used only when it matches these sources (kvbudget.sim.native)
native.activate(__path__)
