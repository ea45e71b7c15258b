"""How ``kvbudget deploy`` renders each engine: one module per engine, registered by name.

See :mod:`kvbudget.deploy.engines.registry` for the entry and the lookup; each other module
here (``vllm``, ``sglang``, ``llamacpp``) registers one engine's launch command, image, health
path, multi-node command and metric series, and is found by scanning this package.
"""
