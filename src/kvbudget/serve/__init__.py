"""L2: OpenAI-compatible HTTP server backed by the simulator's engine (real time)."""
