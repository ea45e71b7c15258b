"""vLLM's KV cache groups for a plan: the layer specs (``capacity.layouts.vllm``) as pool layers,
grouped as the requested version groups them (``capacity.pool``), or DeepSeek-V4's packed groups
(``capacity.pool_dsv4``); and the KV bytes one token adds on a pipeline stage."""

from __future__ import annotations

from kvbudget.capacity import pool as vpool
from kvbudget.capacity import pool_templates
from kvbudget.capacity.attention_config import indexer_kv_dtype
from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.vllm import MambaCacheMode, VllmLayerSpec, vllm_layer_specs
from kvbudget.capacity.layouts.vllm_dots3 import dots3_kv_dtype, is_dots3_note
from kvbudget.capacity.layouts.vllm_dsv4 import DSV4_BLOCK_SIZE, dsv4_kv_dtype, is_deepseek_v4
from kvbudget.capacity.layouts.vllm_dsv41 import dsv41_kv_dtype, is_deepseek_v41
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.model_dtype import mamba_dtype_bytes
from kvbudget.capacity.mtp_dots3 import dots3_mtp
from kvbudget.capacity.mtp_layers import (
    mtp_extra_retained_tokens,
    mtp_layers_requested,
    mtp_pool_layers,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.pool_dots3 import check_dots3_request, check_dots3_unified, dots3_groups
from kvbudget.capacity.pool_dsv4 import check_dsv4_request, dsv4_bytes_per_token
from kvbudget.capacity.pool_dsv4 import dsv4_groups as packed_dsv4_groups
from kvbudget.capacity.pool_dsv41 import check_dsv41_request, dsv41_groups
from kvbudget.capacity.pool_qwen4 import (
    check_qwen4_request,
    qwen4_groups,
    qwen4_speculative_tokens,
)
from kvbudget.capacity.versions import VllmBehaviour
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.model import ModelSpec

VllmSpecs = PartRuns[VllmLayerSpec]


def vllm_groups(
    request: PlanRequest,
    model: ModelSpec,
    behaviour: VllmBehaviour,
    version_text: str,
    kv_dtype: KvDtype,
    block_size: int | None,
    mamba_mode: MambaCacheMode,
    notes: list[str],
) -> tuple[KvDtype, VllmSpecs | None, list[vpool.KvCacheGroup]]:
    """``(kv dtype, layer specs, groups)`` of one replica; the specs are ``None`` for DeepSeek-V4
    (its packed groups), whose cache dtype is ``fp8_ds_mla``, and for Dots3-Note (its packed
    groups, ``capacity.pool_dots3``). Appends its notes to ``notes``."""
    kv_name = request.kv_dtype
    indexer = indexer_kv_dtype(request.attention_config)
    if indexer != "auto" and not is_qwen4_exp(model):
        raise ConfigError(
            f"attention_config: indexer_kv_dtype {indexer!r} for {model.model_type}: not modelled "
            "(kvbudget reads it for Qwen4-Exp's QSA indexer only); plan without it, or measure",
            field="attention_config",
        )
    if is_dots3_note(model):
        check_dots3_request(request, behaviour.version)
        kv_name = dots3_kv_dtype(model, kv_name)
        if behaviour.version != (0, 32, 0):
            notes.append(
                f"Dots3-Note's vLLM groups were read from 0.32.0's source, not re-read for "
                f"{version_text}"
            )
        notes.append(
            "Dots3-Note in vLLM 0.32: sliding-window MLA pages (swa_kv_lora_rank + "
            "swa_qk_rope_head_dim per token), DSA latent pages padded to those rows plus the "
            "indexer's keys (index_head_dim + 4 B per 128, uint8); groups packed side by side in "
            "each block (kv_cache_utils.py _get_packed_kv_cache_groups); worked from the source, "
            "not recorded (the model does not import on vLLM's CPU build)"
        )
        drafter = dots3_mtp(request.speculative_config, model)
        if drafter.layer_types:
            notes.append(
                f"--speculative-config mtp: {len(drafter.layer_types)} MTP layer(s) after the "
                f"target's ({', '.join(drafter.layer_types)}: mtp_layer_types, default "
                "sliding_attention), each the target's own spec of that kind, packed with the "
                "target's groups (config/speculative.py lines 664-678; "
                "models/dots3_note/nvidia/mtp.py lines 103-120)"
            )
        if drafter.extra_retained_tokens:
            notes.append(
                f"--speculative-config mtp: several MTP modules, so every sliding spec keeps "
                f"{drafter.extra_retained_tokens} more tokens below its window "
                "(num_speculative_tokens - 1: extra_retained_tokens, v1/core/kv_cache_utils.py "
                "lines 2583-2590); the sliding groups show the window as kept"
            )
        if request.disable_hybrid_kv_cache_manager:
            check_dots3_unified(model, drafter.layer_types)
            notes.append(
                "--disable-hybrid-kv-cache-manager: Dots3-Note's layers are all of one kind, so "
                "vLLM's unification leaves its specs as they are, the same groups "
                "(v1/core/kv_cache_utils.py lines 1700-1703)"
            )
        groups = dots3_groups(
            model,
            kv_dtype=kv_name,
            block_size=request.block_size,
            pp=request.pp,
            mtp_layer_types=drafter.layer_types,
            extra_retained_tokens=drafter.extra_retained_tokens,
        )
        kv = get_kv_dtype(kv_name, engine="vllm", model_dtype=model.torch_dtype)
        return kv, None, groups
    if is_qwen4_exp(model):
        check_qwen4_request(request, behaviour.version)
        if behaviour.version != (0, 32, 0):
            notes.append(
                f"Qwen4-Exp's vLLM groups were read from 0.32.0's source, not re-read for "
                f"{version_text}"
            )
        notes.append(
            "Qwen4-Exp in vLLM 0.32: each QSA layer's K/V plus its indexer's compressed keys "
            f"(one {'fp8' if indexer == 'fp8' else 'bf16'} row per indexer_compress_ratio tokens) "
            "in one group; the indexer's raw-key "
            "ring (one page per request), GDN and PLE states (padded to the attention page) in "
            "groups of their own, packed side by side in each block (kv_cache_utils.py "
            "_get_packed_kv_cache_groups); worked from the source, not recorded (the model does "
            "not start on vLLM's CPU build)"
        )
        groups = qwen4_groups(
            model,
            kv_dtype=kv_name,
            tp=request.tp,
            block_size=request.block_size,
            pp=request.pp,
            mamba_cache_mode=mamba_mode,
            mamba_state_bytes=mamba_dtype_bytes(request.mamba_cache_dtype, "mamba_cache_dtype"),
            mamba_ssm_state_bytes=mamba_dtype_bytes(
                request.mamba_ssm_cache_dtype, "mamba_ssm_cache_dtype"
            ),
            num_speculative_tokens=qwen4_speculative_tokens(request.speculative_config, model),
            mtp_layers=(mtp := mtp_layers_requested(request, model)),
            indexer_kv_dtype=indexer,
        )
        if mtp:
            notes.append(
                f"--speculative-config mtp: {mtp} MTP drafter layer(s) after the target's, each a "
                "QSA layer with the target's K/V, raw-key ring and compressed-key pages, packed "
                "with the target's groups (models/qwen4_exp/nvidia/mtp.py lines 189-230)"
            )
        return kv_dtype, None, groups
    if is_deepseek_v41(model):  # DeepSeek-V4.1: its own specs and packing (capacity.pool_dsv41)
        kv_dtype = get_kv_dtype(
            dsv41_kv_dtype(kv_name), engine="vllm", model_dtype=model.torch_dtype
        )
        check_dsv41_request(request, behaviour.version)
        if behaviour.version != (0, 32, 0):
            notes.append(
                f"DeepSeek-V4.1's vLLM groups were read from 0.32.0's source, not re-read for "
                f"{version_text}"
            )
        notes.append(
            "DeepSeek-V4.1 in vLLM 0.32 on a Hopper GPU: per layer a 32-token sliding-window page; "
            "on kv_source_layer_ids a 64-token compressed-MLA page (ratio 1 or 2), with the "
            "indexer's keys where also an index source, and at ratio 2 a float32 compressor "
            "ring; the other compressed layers read their source's cache; fp8_ds_mla rows "
            "padded to 576 B, groups packed side by side in each block (kv_cache_utils.py "
            "_get_packed_kv_cache_groups)"
        )
        return kv_dtype, None, dsv41_groups(model, pp=request.pp)
    dsv4 = is_deepseek_v4(model)
    if dsv4:  # DeepSeek-V4: its own specs and vLLM's packed groups (capacity.pool_dsv4)
        kv_name = dsv4_kv_dtype(kv_name)
        kv_dtype = get_kv_dtype(kv_name, engine="vllm", model_dtype=model.torch_dtype)
        check_dsv4_request(request, behaviour.version)
        if behaviour.version != (0, 32, 0):
            notes.append(
                f"DeepSeek-V4's vLLM groups were read from 0.32.0's source, not re-read for "
                f"{version_text}"
            )
        if request.block_size not in (None, DSV4_BLOCK_SIZE):
            notes.append(
                f"block size {DSV4_BLOCK_SIZE} for DeepSeek-V4 whatever --block-size "
                f"{request.block_size} says: vLLM 0.32's sparse MLA backends take only 256 "
                "(models/deepseek_v4/sparse_mla.py line 61; platforms/cpu.py line 291 overrides it)"
            )
        notes.append(
            "DeepSeek-V4 in vLLM 0.32: per layer a 64-token sliding-window page, and at compress "
            "ratio 4/128 a 256-token compressed-MLA page plus a float32 compressor-state page "
            "(ratio 4: also the indexer's keys and its compressor state), fp8_ds_mla rows padded "
            "to 576 B; groups packed side by side in each block (kv_cache_utils.py "
            "_get_packed_kv_cache_groups)"
        )
    draft_layers = () if dsv4 else mtp_pool_layers(request, model)
    if draft_layers:
        notes.append(
            f"--speculative-config mtp: {len(draft_layers)} MTP layer(s) after the target's, each "
            "the target's own attention (DeepSeek-V3.2 / GLM-5: always with an indexer; "
            "MiMo-V2-Flash: one sliding layer), grouped with the target's layers "
            "(kvbudget.spec.mtp; v1/core/kv_cache_utils.py lines 1997-2012)"
        )
    all_specs = (
        None
        if dsv4
        else vllm_layer_specs(
            model,
            kv_dtype=kv_name,
            tp=request.tp,
            pp=1,
            block_size=block_size,
            mamba_cache_mode=mamba_mode,
            mamba_state_bytes=mamba_dtype_bytes(request.mamba_cache_dtype, "mamba_cache_dtype"),
            mamba_ssm_state_bytes=mamba_dtype_bytes(
                request.mamba_ssm_cache_dtype, "mamba_ssm_cache_dtype"
            ),
            align_to_block_size=behaviour.version >= (0, 32, 0),
            mamba2_checkpoint_blocks=1 if behaviour.version >= (0, 32, 0) else 0,
            draft_layers=draft_layers,
        )
    )
    if all_specs is None:
        mtp = mtp_layers_requested(request, model)
        extra = mtp_extra_retained_tokens(request, model)
        groups = packed_dsv4_groups(
            model, pp=request.pp, mtp_layers=mtp, extra_retained_tokens=extra
        )
        if mtp:
            notes.append(
                f"--speculative-config mtp: {mtp} MTP layer(s) at compress ratio 1, one 64-token "
                "sliding-window page each, packed with the target's sliding groups "
                "(models/deepseek_v4/nvidia/mtp.py lines 221-247; attention.py lines 229-235)"
            )
        if extra:
            notes.append(
                f"--speculative-config mtp: several MTP modules, so every sliding spec (the "
                f"sliding-window pages and the compressor states) keeps {extra} more tokens below "
                "its window (num_speculative_tokens - 1: extra_retained_tokens, "
                "v1/core/kv_cache_utils.py lines 2583-2590); the sliding groups show the window "
                "as kept"
            )
    else:
        pool_layers = pool_templates.raise_attention_block_for_mamba(all_specs)
        if request.disable_hybrid_kv_cache_manager:
            pool_layers = pool_templates.unify_hybrid_as_full(pool_layers)
            notes.append(
                "--disable-hybrid-kv-cache-manager: sliding/chunked layers are treated as full "
                "attention (the full-length cost is paid)"
            )
        groups = vpool.group_layers(pool_layers, strided=behaviour.strided_groups)
    if len(groups) <= 1:  # the split-style assumption only matters for hybrid models
        notes[:] = [n for n in notes if "group split" not in n]
    return kv_dtype, all_specs, groups


def per_token_bytes(
    specs: VllmSpecs | None, groups: list[vpool.KvCacheGroup], rank_layers: range
) -> int:
    """KV bytes one token adds on the stage of ``rank_layers`` (one rank)."""
    if specs is None:  # packed groups (DeepSeek-V4, Dots3-Note, Qwen4-Exp): token groups grow
        return dsv4_bytes_per_token(groups, rank_layers)
    return sum(
        s.bytes_per_token * len(LayerIndices([indices]).split(rank_layers.start, rank_layers.stop))
        for s, indices in specs.runs()
    )
