"""SGLang layout: a token pool of fixed-size cells, one cell per cached token.

Source: ``engines-kv-accounting.md`` §7.1 (sglang ``model_runner_kv_cache_mixin.py``,
``get_cell_size_per_token``):

* MHA/GQA cell: ``max(1, kv_heads // tp) * (head_dim + v_head_dim) * num_layers * s``.
* MLA cell: ``(kv_lora_rank + qk_rope_head_dim) * num_layers * s`` (576 per layer), not split by TP.
* FP4 (``nvfp4`` here): half a byte per element plus one scale byte per 16 elements.
* ``page_size`` is 1 token for most backends, so a sequence of T tokens takes exactly T cells.
* Sliding-window layers: SGLang's hybrid SWA pool (split by ``--swa-full-tokens-ratio``) is not
  modelled; they are counted at full length, which is what SGLang does for the models that set
  ``disable_hybrid_swa_memory`` (GptOss, Gemma2/3, Olmo2). Chunked layers likewise.
* Mamba-hybrid models keep a separate per-request state pool; here its size is the state shapes of
  vLLM's calculator in the model dtype (conv) and float32 (temporal state; SGLang's
  ``--mamba-ssm-dtype`` default), split by TP.
* Falcon-H1 (parallel hybrid): SGLang's ``FalconH1Config`` (``srt/configs/falcon_h1.py``) lists
  every layer in both ``full_attention_layer_ids`` and ``linear_layer_ids``, so each decoder layer
  is counted once in the token pool and once in the state pool.
"""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    get_pp_indices,
    heads_per_rank,
    refuse_compressed,
    refuse_indexer,
    refuse_short_convs,
)
from kvbudget.capacity.layouts.grouping import group_by_kind
from kvbudget.spec.layers import MLA, FullAttention, StateLayer
from kvbudget.spec.model import ModelSpec

SSM_STATE_BYTES = 4


def sglang_cell_bytes(layer: FullAttention | MLA, dtype: KvDtype, tp: int) -> int:
    """Bytes of one token of one layer on one rank."""
    if isinstance(layer, MLA):
        if dtype.nvfp4 or dtype.row_scale_bytes:
            raise LayoutNotApplicable(f"SGLang MLA with {dtype.name} is not modelled; measure")
        return dtype.row_bytes(layer.latent_dim)
    heads = heads_per_rank(layer.num_kv_heads, tp)
    return heads * (dtype.row_bytes(layer.head_dim) + dtype.row_bytes(layer.v_dim))


def sglang_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str = "auto",
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
) -> LayoutResult:
    """Bytes of ``seqs`` sequences of ``tokens`` tokens in SGLang's token pool, per rank."""
    check_load(tokens, seqs, tp, pp, dp)
    refuse_short_convs(
        spec,
        "sglang",
        "kvbudget has not read SGLang's Inkling pools",
    )
    refuse_compressed(
        spec,
        "sglang",
        "kvbudget has not read SGLang's DeepSeek-V4 memory pools yet",
    )
    refuse_indexer(spec, "sglang")
    dtype = get_kv_dtype(kv_dtype, engine="sglang", model_dtype=spec.torch_dtype)
    model_bytes = 2 if spec.dtype_bytes in (None, 4) else int(spec.dtype_bytes or 2)
    notes: list[str] = []
    stages: list[StageBytes] = []
    for rank in range(pp):
        start, end = get_pp_indices(spec.num_layers, rank, pp)
        groups: list[GroupBytes] = []
        for (kind, _w), layers in group_by_kind(spec.layers[start:end]):
            first = layers.first
            indices = layers.indices
            if isinstance(first, FullAttention | MLA):
                per_token = layers.total(
                    lambda x: (
                        sglang_cell_bytes(x, dtype, tp) if isinstance(x, FullAttention | MLA) else 0
                    )
                )
                note = (
                    "counted at full length (SWA pool not modelled)"
                    if kind in ("sliding", "chunked")
                    else ""
                )
                if note and note not in notes:
                    notes.append(f"{kind} layers {note}")
                groups.append(
                    GroupBytes(
                        kind,
                        indices,
                        tokens,
                        per_token,
                        per_token * tokens,
                        per_token * tokens * seqs,
                        note,
                    )
                )
            elif isinstance(first, StateLayer):
                per_seq = layers.total(
                    lambda x: (
                        x.conv_elements(tp) * model_bytes + x.ssm_elements(tp) * SSM_STATE_BYTES
                        if isinstance(x, StateLayer)
                        else 0
                    )
                )
                groups.append(
                    GroupBytes(
                        kind,
                        indices,
                        0,
                        0,
                        per_seq,
                        per_seq * seqs,
                        "mamba state pool, one per request",
                    )
                )
            else:
                groups.append(GroupBytes(kind, indices, 0, 0, 0, 0))
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    return LayoutResult(
        "sglang",
        dtype.name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=1,
        notes=tuple(notes),
    )
