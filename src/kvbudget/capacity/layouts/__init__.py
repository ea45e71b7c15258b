"""Engine layouts: how each engine really lays the KV cache out (hf, vllm, sglang, llamacpp)."""
