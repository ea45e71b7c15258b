"""Dots3-Note (``dots3_note``) in SGLang 0.5.23: a hybrid MLA-SWA pool, DSA on the full side.

All line numbers are the sglang 0.5.23 wheel's (paths under ``sglang/srt/``). SGLang reads the
checkpoint's flat config through its own ``Dots3Config`` (``configs/dots3.py`` line 18,
``model_type = "dots3_note"``; its defaults, lines 47-67, fill absent keys), which sets
``is_hybrid_swa = True`` (line 20), so ``ModelConfig.is_hybrid_swa`` holds
(``configs/model_config.py`` lines 1215-1218, 2695-2696) and the layer split is read from
``layer_types`` as written (lines 2711-2722: ``"sliding_attention"`` -> SWA, ``"full_attention"``
-> full; the decoder asserts no other name, ``models/dots3_common/modeling.py`` line 568).

Pools (``mem_cache/kv_cache_configurator.py`` ``_build_hybrid_mla_swa_kv_pool``, lines 2401-2460,
chosen at line 1858 for an MLA backend with ``is_hybrid_swa``): one ``SWAKVPool``
(``mem_cache/swa_memory_pool.py`` lines 21-107) of two sub-pools:

* full side: ``DSATokenToKVPool`` (``mem_cache/memory_pool.py`` line 5279) over the full layers
  (``index_topk`` set makes Dots3 ``is_deepseek_dsa``, ``configs/model_config.py`` lines 191-212),
  of the DSA layers' own ``kv_lora_rank + qk_rope_head_dim`` (not padded to the sliding rows, as
  vLLM does), plus the indexer's fp8 key with its float32 scale, 132 B, on every full layer;
* SWA side: ``MLATokenToKVPool`` (``memory_pool.py`` lines 4754-4870) of ``swa_kv_lora_rank +
  swa_qk_rope_head_dim`` elements per token in the KV dtype (1 B each for fp8).

Sizing (``model_executor/pool_configurator.py``, ``HybridSWAPoolConfigurator`` lines 656-922,
picked at lines 1720-1723 unless ``SWARequestCapPoolConfigurator.is_applicable``, lines 986-1003:
never with the radix cache on): ``_full_per_token = calculate_mla_kv_cache_dim(...) * kv_size +
132`` (lines 676-699), ``_swa_per_token = (swa_kv_lora_rank + swa_qk_rope_head_dim) * kv_size``
(lines 700-702); ``cell = full_per_token * n_full + ratio * swa_per_token * n_swa`` (lines
786-803, a float); ``max_total = int(rest // cell)`` (line 915); ``full_tokens`` = that floored
to the page, ``swa_tokens = int(full_tokens * ratio)`` floored to the page (lines 879-881); the
SWA pool must exceed ``sliding_window_size + page_size`` (lines 197-216, 884-886).

DSA overrides (Dots3NoteForCausalLM is in the DeepSeek family lists): 64-token pages
(``arg_groups/model_overrides/deepseek_v2.py`` lines 49, 162-173; ``index_kpool`` 1, and the
Dots SWA decode requires 64, ``layers/attention/dots_hybrid_backend.py`` lines 367-371); KV
dtype ``auto`` is bfloat16, fp8_e4m3 on compute capability 10+ (``arg_groups/overrides.py``
lines 490-546, 758); the fp8 latent is the scaled 656-B row with Hopper's default
``flashmla_kv`` backends but the raw 576-B row with Blackwell's default ``trtllm``
(``overrides.py`` lines 714-720; ``kv_cache_configurator.py`` lines 3425-3440, 3458-3475).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
)
from kvbudget.capacity.layouts.sglang_dsa import (
    DSA_INDEX_KEY_BYTES,
    DSA_QUANT_BLOCK,
    dsa_latent_bytes,
    sglang_dsa_dtype,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_kinds import has_sliding_latent
from kvbudget.spec.model import ModelSpec

__all__ = [
    "DOTS3_PAGE_SIZE",
    "DOTS3_SWA_FULL_TOKENS_RATIO",
    "SglangDots3",
    "is_sglang_dots3",
    "sglang_dots3",
    "sglang_dots3_layout",
    "sglang_pp_indices",
]

#: ``Dots3Config.__init__`` defaults (sglang ``configs/dots3.py`` lines 47-67) for absent keys
SGLANG_DOTS3_DEFAULTS: dict[str, int] = {
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "sliding_window_size": 512,
    "swa_kv_lora_rank": 512,
    "swa_qk_rope_head_dim": 64,
    "swa_num_attention_heads": 32,
    "swa_num_key_value_heads": 32,
}
#: the DSA page on CUDA: ``64 * index_kpool`` (``model_overrides/deepseek_v2.py`` lines 162-173)
DOTS3_PAGE_SIZE = 64
#: ``--swa-full-tokens-ratio`` fallback (``arg_groups/fields/schedule.py`` lines 150-161)
DOTS3_SWA_FULL_TOKENS_RATIO = 0.8
#: ``SGLANG_SWA_EVICTION_INTERVAL`` default (``environ.py`` line 730)
SWA_EVICTION_INTERVAL = 128
#: SGLang's names for the two layer kinds (``configs/model_config.py`` lines 2716-2722)
SLIDING, FULL = "sliding_attention", "full_attention"
DOTS3_TYPES = frozenset({"dots3_note", "dots3_note_text"})


def sglang_pp_indices(num_layers: int, pp_rank: int, pp_size: int) -> tuple[int, int]:
    """SGLang's own stage split (``distributed/utils.py`` lines 110-150, no
    ``SGLANG_PP_LAYER_PARTITION``): the LAST ``num_layers % pp_size`` stages take one extra layer
    (vLLM's split gives it to the stages before the last)."""
    base, extra = divmod(num_layers, pp_size)
    if pp_rank >= pp_size - extra:
        start = pp_rank * (base + 1) - (pp_size - extra)
        return start, start + base + 1
    return pp_rank * base, pp_rank * base + base


def is_sglang_dots3(spec: ModelSpec) -> bool:
    """Dots3-Note, or any model with sliding-window MLA layers (all go to :func:`sglang_dots3`,
    which refuses what SGLang's ``Dots3Config`` cannot read)."""
    return spec.model_type in DOTS3_TYPES or has_sliding_latent(spec.layer_seq)


@dataclass(frozen=True, slots=True)
class SglangDots3:
    """Dots3-Note's two pools in SGLang, per token on one rank (MLA rows: not split by TP)."""

    dtype: KvDtype
    full_layers: LayerIndices  # DSA layers: latent + indexer key
    swa_layers: LayerIndices  # sliding layers: latent only
    full_bytes: int  # one token of one full layer
    swa_bytes: int  # one token of one sliding layer
    window: int  # SGLang's ``sliding_window_size``: the config's minus 1 (modeling.py line 503)
    multimodal: bool  # ``Dots3NoteForCausalLM`` is multimodal unless language_model_only

    def counts(self, start: int, end: int) -> tuple[int, int]:
        """Full and sliding layers in ``[start, end)`` (one pipeline stage)."""
        return (
            sum(start <= i < end for i in self.full_layers),
            sum(start <= i < end for i in self.swa_layers),
        )

    def swa_request_tokens(self, page_size: int = DOTS3_PAGE_SIZE) -> int:
        """SGLang's worst case of SWA slots one decoding request holds
        (``compute_swa_request_cap``, ``pool_configurator.py`` lines 924-968, without speculative
        decoding): the window, one eviction interval, a page of padding, a page of decode."""
        return self.window + SWA_EVICTION_INTERVAL + page_size + page_size


def _raw(raw: dict[str, Any], key: str) -> int:
    value = raw.get(key, SGLANG_DOTS3_DEFAULTS.get(key))
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutNotApplicable(
            f"{key}: SGLang 0.5.23's Dots3Config reads it as written (configs/dots3.py lines "
            f"47-67) and the config has {value!r}; fix config.json, or use --engine hf"
        )
    return value


def _check_heads(raw: dict[str, Any], tp: int) -> None:
    """``Dots3AttentionMLA.__init__`` (``modeling.py`` lines 585-589) on both layer kinds."""
    for prefix in ("", "swa_"):
        heads = _raw(raw, f"{prefix}num_attention_heads")
        kv_heads = _raw(raw, f"{prefix}num_key_value_heads")
        if heads != kv_heads:
            raise LayoutNotApplicable(
                f"{prefix}num_key_value_heads: {kv_heads} != {prefix}num_attention_heads {heads}; "
                "SGLang 0.5.23 asserts 'Dots3 Only supports equal number of query and key value "
                "heads.' (models/dots3_common/modeling.py lines 586-589); fix config.json"
            )
        if heads % tp:
            raise ConfigError(
                f"tp: {tp} does not divide {prefix}num_attention_heads {heads}; SGLang 0.5.23 "
                "asserts num_heads % attn_tp_size == 0 (models/dots3_common/modeling.py line "
                "585); choose a --tp that divides it",
                field="tp",
            )


def sglang_dots3(
    spec: ModelSpec, kv_dtype: str, *, tp: int = 1, sm100: bool = False
) -> SglangDots3:
    """Dots3-Note's pools in SGLang (module docstring), or a one-line refusal naming the source.

    ``sm100``: compute capability 10+ (the ``auto`` dtype is fp8 there, and the default trtllm
    DSA backends keep the raw fp8 latent)."""
    if spec.model_type != "dots3_note":
        raise LayoutNotApplicable(
            f"model_type: {spec.model_type!r}: SGLang 0.5.23 serves Dots3-Note from the "
            "checkpoint's flat config only (configs/dots3.py line 18, model_type dots3_note; "
            "get_hybrid_layer_ids reads its layer_types, configs/model_config.py lines 2711-2722); "
            "use that config.json, or --engine hf"
        )
    raw = spec.raw_config
    types = raw.get("layer_types")
    if (
        not isinstance(types, list)
        or len(types) != spec.num_layers
        or any(t not in (SLIDING, FULL) for t in types)
    ):
        raise LayoutNotApplicable(
            f"layer_types: SGLang 0.5.23 reads Dots3-Note's layers from config.layer_types as "
            f"written, each 'sliding_attention' or 'full_attention' (models/dots3_common/"
            f"modeling.py line 568; configs/model_config.py lines 2716-2722) and the config has "
            f"{str(types)[:40]}; list them in config.json, or use --engine hf"
        )
    full = [i for i, t in enumerate(types) if t == FULL]
    swa = [i for i, t in enumerate(types) if t == SLIDING]
    if not swa or not full:
        raise LayoutNotApplicable(
            "layer_types: kvbudget models Dots3-Note in SGLang with both sliding and full layers "
            "(SGLang asserts 'Hybrid SWA model must have at least one SWA layer', "
            "model_executor/pool_configurator.py lines 668-670; the all-SWA pool, lines "
            "865-877, is not modelled); use --engine hf"
        )
    for key in ("index_topk", "index_head_dim", "index_n_heads"):
        if raw.get(key) is None:
            raise LayoutNotApplicable(
                f"{key}: absent, so SGLang 0.5.23 serves Dots3-Note's full layers without the DSA "
                "indexer (models/dots3_common/modeling.py lines 612-617; configs/model_config.py "
                "lines 191-212) on an MLA pool kvbudget has not modelled; use --engine hf"
            )
    if raw.get("index_head_dim") != DSA_QUANT_BLOCK:
        raise LayoutNotApplicable(
            f"index_head_dim: {raw.get('index_head_dim')!r}; SGLang 0.5.23's DSATokenToKVPool "
            "asserts index_head_dim == 128 (mem_cache/memory_pool.py line 5346); fix config.json"
        )
    kpool = raw.get("index_kpool", 1)
    if kpool != 1:
        raise LayoutNotApplicable(
            f"index_kpool: {kpool!r} makes SGLang's DSA page {DOTS3_PAGE_SIZE} x {kpool} tokens "
            "(arg_groups/model_overrides/deepseek_v2.py lines 162-173), and its Dots SWA decode "
            "raises 'Dots SWA latent decode requires page_size=64' (layers/attention/"
            "dots_hybrid_backend.py lines 367-371); drop index_kpool from config.json"
        )
    _check_heads(raw, tp)
    dtype = sglang_dsa_dtype(kv_dtype, spec.model_type, sm100=sm100)  # a DSA model's rule
    rank = _raw(raw, "kv_lora_rank")
    rope = _raw(raw, "qk_rope_head_dim")
    # Hopper's default flashmla_kv scales the fp8 latent; SM100's DSA backends keep it raw
    latent = dsa_latent_bytes(rank, rope, dtype, scaled_fp8=dtype.block_bytes == 1 and not sm100)
    swa_row = dtype.row_bytes(_raw(raw, "swa_kv_lora_rank") + _raw(raw, "swa_qk_rope_head_dim"))
    return SglangDots3(
        dtype=dtype,
        full_layers=LayerIndices.of(full),
        swa_layers=LayerIndices.of(swa),
        full_bytes=latent + DSA_INDEX_KEY_BYTES,
        swa_bytes=swa_row,
        window=_raw(raw, "sliding_window_size") - 1,
        multimodal=not raw.get("language_model_only", False),
    )


def sglang_dots3_layout(
    spec: ModelSpec, *, tokens: int, seqs: int, kv_dtype: str, tp: int, pp: int, dp: int
) -> LayoutResult:
    """Bytes of ``seqs`` sequences of ``tokens`` tokens in Dots3-Note's two SGLang pools, per rank:
    the full layers hold every token in 64-token pages; a sliding layer at most SGLang's own
    per-request SWA worst case (:meth:`SglangDots3.swa_request_tokens`)."""
    check_load(tokens, seqs, tp, pp, dp)
    d3 = sglang_dots3(spec, kv_dtype, tp=tp)
    page = DOTS3_PAGE_SIZE
    kept = -(-tokens // page) * page
    swa_kept = min(kept, d3.swa_request_tokens(page))
    stages: list[StageBytes] = []
    for rank in range(pp):
        start, end = sglang_pp_indices(spec.num_layers, rank, pp)
        groups: list[GroupBytes] = []
        for kind, layers, per_layer, held, note in (
            ("mla", d3.full_layers, d3.full_bytes, kept, "DSATokenToKVPool: latent + indexer key"),
            (
                "sliding",
                d3.swa_layers,
                d3.swa_bytes,
                swa_kept,
                f"SWA MLATokenToKVPool: at most {swa_kept} tokens per request (window "
                f"{d3.window} + eviction interval {SWA_EVICTION_INTERVAL} + 2 pages)",
            ),
        ):
            indices = LayerIndices.of(i for i in layers if start <= i < end)
            if not indices:
                continue
            per_token = per_layer * len(indices)
            groups.append(
                GroupBytes(
                    kind, indices, held, per_token, per_token * held, per_token * held * seqs, note
                )
            )
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    return LayoutResult(
        "sglang",
        d3.dtype.name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=page,
        notes=(
            f"SGLang SWAKVPool for Dots3-Note: full layers in DSATokenToKVPool (latent + 132-B "
            f"indexer key), sliding layers in an MLA pool; {page}-token pages; kv dtype auto is "
            "bfloat16 (fp8_e4m3 on compute capability 10+); the pools' sizes follow "
            "--swa-full-tokens-ratio (plan)",
        ),
        padding=f"{tokens} tokens take whole {page}-token pages" if tokens % page else "",
    )
