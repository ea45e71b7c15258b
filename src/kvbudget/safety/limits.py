"""Documented upper bounds (docs/limits.md): every count a user can type has one, so a tiny
input never asks for unbounded work. Each refusal is one line naming the field and the bound.
"""

from __future__ import annotations

#: any integer flag, unless its own bound is lower (about 9e15: exact in a float)
MAX_INT_FLAG = 2**53
#: any real-valued flag, in magnitude (values must also be finite: no nan, no inf)
MAX_FLOAT_FLAG = 1e15
#: seeds: 0 <= seed <= this (numpy's SeedSequence takes non-negative integers)
MAX_SEED = 2**63 - 1
#: a text flag (model names, ids, URLs)
MAX_TEXT_FLAG_CHARS = 4096

#: decoder layers of one model, like every model dimension (arithmetic sanity, not memory:
#: model mode works per run of alike layers, so 10^8 layers cost a few objects)
MAX_LAYERS = 2**31 - 1
#: layers ``--from-transformers`` lets transformers build (it makes one module per layer)
MAX_TRANSFORMERS_LAYERS = 10_000
#: attention / KV heads, head dimension, hidden size, intermediate size, vocabulary entries
MAX_MODEL_DIM = 2**31 - 1
#: tokens of one sequence or one budget (about 1.1e12)
MAX_TOKENS = 2**40
#: concurrent sequences / slots / in-flight requests
MAX_CONCURRENCY = 100_000
#: requests of one run
MAX_REQUESTS = 10_000_000
#: client worker processes of ``bench --workers``
MAX_WORKERS = 256
#: llama.cpp slots (``--parallel``) in the simulator
MAX_SLOTS = 4096
#: smallest arrival rate (requests per second) the simulator and bench accept
MIN_RATE_PER_S = 1e-6
#: largest arrival rate (requests per second)
MAX_RATE_PER_S = 1e9
#: prompt or output tokens of one generated request
MAX_REQUEST_TOKENS = 10_000_000
#: largest serve vocabulary (tokens)
MAX_VOCAB = 10_000_000
#: largest config.json read (bytes)
MAX_CONFIG_BYTES = 16 * 1024 * 1024
#: deepest nesting of a JSON config file
MAX_JSON_DEPTH = 64
#: one load tier's or run's duration (seconds; 30 days)
MAX_DURATION_S = 30 * 86400.0
#: points of one ``kvbudget sweep`` grid (the product of its axes' lengths), checked before any
#: point is built or validated
MAX_SWEEP_POINTS = 100_000
