"""Qwen4-Exp's target model on one GPU as vLLM 0.32 builds it: every parameter and persistent
buffer, per pipeline stage (``site-packages/vllm/models/qwen4_exp/nvidia``; line numbers are
0.32.0's). An unquantized checkpoint only (QSA refuses any dtype but bfloat16, ``nvidia/qsa.py``
line 355), so ``b`` below is the model dtype's 2 bytes; ``hc = hc_count``, ``r =
hc_lowrank``, ``H = hidden_size`` (the defaults of ``configuration_qwen4_exp.py`` lines
108-161 where a config leaves a field out).

Per decoder layer (``model.py`` lines 198-295):

* two ``GatedResidual`` hyper-connections (``hyperconnection.py`` lines 69-131, always
  bfloat16): ``hc_norm`` ``hc x H``; ``input_mix_weight_down_block_inject`` ``hc x H -> r + hc +
  pad`` (``pad = -(r + hc) mod 16``) and ``input_mix_weight_up`` ``r -> hc x H``, replicated;
* a ``linear_attention`` layer, the gated delta net (``model_executor/layers/mamba/gdn/
  qwen_gdn_linear_attn.py`` lines 501-590; ``kd = k_heads x k_dim``, ``vd = v_heads x v_dim``):
  ``conv1d`` ``kernel x (2 kd + vd) / tp``; ``in_proj_qkvz`` ``H -> (2 kd + 2 vd) / tp``;
  ``in_proj_ba`` ``H -> 2 v_heads / tp``; ``dt_bias`` ``v_heads / tp`` and the fp32 ``A_log``
  ``v_heads / tp``; ``norm`` ``v_dim``; ``out_proj`` ``vd / tp -> H``;
* an indexed (QSA) layer (``qsa.py`` lines 334-521, ``indexer_qsa.py`` lines 132-150): one
  ``qkv_proj`` packing query and sigmoid output gate (``2 x heads x d / tp``), K and V
  (``max(1, kv_heads / tp)`` heads each) and the replicated indexer ``index_qk_proj``
  (``(indexer_n_heads + indexer_kv_heads) x indexer_head_dim``; ``Qwen4ExpQSAQKVIndexerLinear``,
  ``qsa.py`` lines 67-84, 497-507); ``o_proj`` ``heads x d / tp -> H``; ``q_norm``, ``k_norm``
  (``d``) and the indexer's ``q_layernorm``, ``k_layernorm`` (``indexer_head_dim``); four fp32
  scalar KV scales (``layers/attention/attention.py`` lines 135-139); the int32
  ``topk_indices_buffer`` ``max_num_batched_tokens x (indexer_budget + indexer_compress_ratio)``
  (``qsa.py`` lines 514-521; ``packed_output_width``, ``indexer_qsa.py`` lines 183-196), one per
  layer;
* with ``layer + 1`` in ``ple_layer_ids``, a ``Qwen4ExpPLELayer`` (``ple_layer.py`` lines
  65-138): its n-gram embedding (``nvidia/ngram_embedding.py`` lines 141-237: ``n = (ngram_size - 1)
  x heads_per_ngram`` heads of ``ple_embed_dim / n`` columns, head ``g`` of dense PLE layer
  ``j`` holding the ``(j n + g + 1)``-th prime above ``ngram_vocab_size_base - 1`` rows, the
  sum padded to ``make_ngram_vocab_size_divisible_by`` and split over TP, vLLM's default
  engram-TP group, ``distributed/parallel_state.py`` lines 2160-2168; ``ple_embedding_dtype``
  ``float8_e4m3fn`` stores it in 1 byte with one fp32 scale, ``common/ngram_embedding.py`` lines
  175-182, 288-321) and three int64 buffers (``ngram_size`` multipliers, ``n`` vocab sizes,
  ``n`` offsets); ``kv_proj`` ``ple_embed_dim -> hc x H + H``, replicated; ``norm_key``,
  ``norm_query``, ``norm_conv`` (``hc x H`` each); the depthwise ``conv1d`` ``hc x H x kernel``;
* ``Qwen4ExpSparseMoeBlock`` (``model_executor/models/qwen3_next.py`` lines 131-247): the
  ``GateLinear`` router ``H -> num_experts``, ``shared_expert_gate`` ``H -> 1`` (replicated),
  the shared expert ``H -> 2 S / tp``, ``S / tp -> H`` (``S = shared_expert_intermediate_size``;
  not fused on CUDA: AITER's fusion is ROCm's, ``fused_moe/utils.py`` lines 55-128), the routed
  experts ``3 x moe_intermediate_size x H`` each, split over the MoE ranks.

Per stage (``model.py`` lines 414-495, 720-745): ``embed_tokens`` and ``lm_head`` on every stage
(neither is a ``PPMissingLayer``; vocab padded to 64 and split over TP); the final
``hyper_connection_mixer`` (no combine: ``hc x H``, ``hc x H -> r``, ``r -> hc x H``) on the
last; the rotary ``cos_sin_cache`` (:func:`_rope_bytes`) on a stage with a QSA layer; with an
MTP drafter the last stage's ``_mtp_hidden_buffer``
``max_num_batched_tokens x hc x H`` (lines 480-495).

Not counted: tensors freed while building (the unfused ``qkv_proj`` and ``index_qk_proj``,
``qsa.py`` line 507), the attention metadata builders' buffers (built with the KV cache, after the
profile), the PLE n-gram tables, which vLLM's default ``EngramConfig`` (``cpu_offload`` True,
``config/engram.py`` line 37; made for any ``ple_layer_ids`` model, ``config/vllm.py`` lines
1405-1408) keeps in pinned host memory (the GPU keeps the int64 ``_prefetch_ids``; with
``--engram-config '{"cpu_offload": false}'``, which kvbudget has no flag for, they would be on the
device: ``ple_table``), and sequence parallel (``enable_hc_sp`` / sequence-parallel MoE).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.capacity.layouts.base import get_pp_indices
from kvbudget.capacity.weights import WeightsEstimate, with_rope_cache, without_count_notes
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import cdiv

__all__ = [
    "QWEN4_DEFAULTS",
    "ngram_vocab_sizes",
    "qwen4_exp_stage_bytes",
    "qwen4_exp_unpriced",
    "qwen4_exp_weights",
]

#: ``Qwen4ExpTextConfig``'s defaults (transformers ``configuration_qwen4_exp.py`` lines 108-161)
QWEN4_DEFAULTS: dict[str, Any] = {
    "vocab_size": 248320,
    "hc_count": 4,
    "hc_lowrank": 320,
    "ple_conv_kernel_size": 4,
    "ngram_size": 3,
    "heads_per_ngram": 8,
    "ngram_vocab_size_base": 20_000_000,
    "make_ngram_vocab_size_divisible_by": 128,
    "moe_intermediate_size": 512,
    "shared_expert_intermediate_size": 512,
    "num_experts": 512,
}
#: ``VocabParallelEmbedding``'s ``DEFAULT_VOCAB_PADDING_SIZE``
VOCAB_PADDING = 64


def _cfg(model: ModelSpec, key: str) -> int:
    value = model.raw_config.get(key)
    if value is None:
        value = QWEN4_DEFAULTS.get(key, 0)
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else 0


def _is_prime(value: int) -> bool:
    """Miller-Rabin with the bases ``Qwen4ExpNGramEmbedding._is_prime_64`` uses (exact below
    2**64; ``nvidia/ngram_embedding.py`` lines 59-84)."""
    if value < 2:
        return False
    for p in (2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31, 37):
        if value % p == 0:
            return value == p
    d, s = value - 1, 0
    while d % 2 == 0:
        d, s = d // 2, s + 1
    for base in (2, 325, 9375, 28178, 450775, 9780504, 1795265022):
        if base % value == 0:
            continue
        x = pow(base, d, value)
        if x in (1, value - 1):
            continue
        for _ in range(s - 1):
            x = pow(x, 2, value)
            if x == value - 1:
                break
        else:
            return False
    return True


def ngram_vocab_sizes(base: int, count: int) -> list[int]:
    """The first ``count`` primes above ``base - 1``: head ``g`` (global) holds the
    ``(g + 1)``-th (``_nth_prime_after``, ``nvidia/ngram_embedding.py`` lines 86-99, 122-139)."""
    out: list[int] = []
    candidate = base
    while len(out) < count:
        if _is_prime(candidate):
            out.append(candidate)
        candidate += 1
    return out


def qwen4_exp_unpriced(model: ModelSpec) -> str | None:
    """The part of Qwen4-Exp's target vLLM 0.32 builds in a way this module does not price
    (one line), or None when :func:`qwen4_exp_stage_bytes` prices all of it."""
    if model.quantization_config:
        return "a quantized checkpoint (quantization_config) is priced by the generic count"
    if model.model_type != "qwen4_exp_text":
        return f"model_type {model.model_type} (the vision tower) is priced by the generic count"
    if not model.hidden_size or not model.num_attention_heads:
        return "hidden_size or num_attention_heads is missing"
    return None


def _rope_bytes(model: ModelSpec, head_dim: int) -> int:
    """The QSA layers' one rotary ``cos_sin_cache``: ``max_position_embeddings x rotary_dim`` in
    the model dtype, ``rotary_dim`` = ``rope_dim`` or ``head_dim x partial_rotary_factor`` of
    ``rope_parameters`` (``rotary_embedding/__init__.py`` lines 63-72; an mrope section keeps
    ``positions_factor`` 1 text-only, ``qwen3_vl.py`` lines 1818-1825, ``mrope.py`` line 351)."""
    raw = model.raw_config
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    rope = rope if isinstance(rope, dict) else {}
    factor = rope.get("partial_rotary_factor", raw.get("partial_rotary_factor", 1.0))
    rotary = int(rope.get("rope_dim") or int(head_dim * float(factor or 1.0)))
    max_pos = model.max_position_embeddings or int(raw.get("max_position_embeddings") or 32768)
    return max_pos * rotary * (model.dtype_bytes or 2)


def _hyper_connection(h: int, hc: int, r: int, *, combine: bool = True) -> int:
    """One ``GatedResidual`` in bfloat16 (``hyperconnection.py`` lines 69-131)."""
    pad = (-(r + hc)) % 16 if combine else 0
    down = r + hc + pad if combine else r
    return 2 * (hc * h + hc * h * down + r * hc * h)


def _gdn(layer: StateLayer, h: int, tp: int, b: int) -> int:
    kd, vd = layer.num_k_heads * layer.head_k_dim, layer.num_heads * layer.head_dim
    heads = layer.num_heads // tp
    total = layer.conv_kernel * (2 * kd + vd) // tp * b  # conv1d
    total += h * (2 * kd + 2 * vd) // tp * b  # in_proj_qkvz
    total += h * 2 * heads * b  # in_proj_ba
    total += heads * b + heads * 4  # dt_bias, A_log (fp32)
    total += layer.head_dim * b  # norm
    return total + vd // tp * h * b  # out_proj


def _qsa(model: ModelSpec, layer: FullAttention, tp: int, b: int, max_tokens: int) -> int:
    h, heads, d = model.hidden_size or 0, model.num_attention_heads or 0, layer.head_dim
    kv = max(1, layer.num_kv_heads // tp)
    index_dim = _cfg(model, "indexer_head_dim")
    index_qk = (_cfg(model, "indexer_n_heads") + _cfg(model, "indexer_kv_heads")) * index_dim
    total = h * (2 * heads * d // tp + 2 * kv * d + index_qk) * b  # fused qkv_proj
    total += heads * d // tp * h * b  # o_proj
    total += (2 * d + 2 * index_dim) * b + 4 * 4  # q/k norms, indexer norms, KV scales
    width = _cfg(model, "indexer_budget") + _cfg(model, "indexer_compress_ratio")
    return total + max_tokens * width * 4  # topk_indices_buffer


def _ple(model: ModelSpec, dense_id: int, tp: int, b: int, max_tokens: int, table: bool) -> int:
    """One ``Qwen4ExpPLELayer`` on one rank; ``table``: its n-gram table on the GPU (``--engram-config
    '{"cpu_offload": false}'``), else in pinned host memory with the int64 ``_prefetch_ids``
    ``max_num_batched_tokens x n`` on the GPU (``nvidia/ngram_embedding.py`` lines 211-241)."""
    h, hc = model.hidden_size or 0, _cfg(model, "hc_count")
    embed_dim = _cfg(model, "ple_embed_dim") or h
    ngram = _cfg(model, "ngram_size")
    n = (ngram - 1) * _cfg(model, "heads_per_ngram")
    if table:
        sizes = ngram_vocab_sizes(_cfg(model, "ngram_vocab_size_base"), (dense_id + 1) * n)[-n:]
        divisor = _cfg(model, "make_ngram_vocab_size_divisible_by")
        rows = cdiv(sum(sizes), divisor) * divisor // tp
        fp8 = model.raw_config.get("ple_embedding_dtype") == "float8_e4m3fn"
        total = rows * (embed_dim // n) * (1 if fp8 else b) + (4 if fp8 else 0)
    else:
        total = max_tokens * n * 8  # _prefetch_ids
    total += (ngram + 2 * n) * 8  # layer_multipliers, ngram_heads_vocab_sizes, _offsets
    total += embed_dim * (hc * h + h) * b  # kv_proj
    return total + 3 * hc * h * b + hc * h * _cfg(model, "ple_conv_kernel_size") * b


def _moe(model: ModelSpec, tp: int, moe_ranks: int, b: int) -> int:
    h, experts = model.hidden_size or 0, _cfg(model, "num_experts")
    shared, inter = (
        _cfg(model, "shared_expert_intermediate_size"),
        _cfg(model, "moe_intermediate_size"),
    )
    total = (h * experts + h) * b  # gate, shared_expert_gate
    total += 3 * h * shared // tp * b if shared > 0 else 0  # shared_expert
    return total + experts * 3 * inter // moe_ranks * h * b


def _layer_bytes(
    model: ModelSpec, index: int, *, tp: int, moe_ranks: int, max_tokens: int, ple_table: bool
) -> int:
    h, b = model.hidden_size or 0, model.dtype_bytes or 2
    hc, r = _cfg(model, "hc_count"), _cfg(model, "hc_lowrank")
    layer = model.layers[index]
    total = 2 * _hyper_connection(h, hc, r) + _moe(model, tp, moe_ranks, b)
    if isinstance(layer, StateLayer):
        total += _gdn(layer, h, tp, b)
    elif isinstance(layer, FullAttention):
        total += _qsa(model, layer, tp, b, max_tokens)
    ple_ids = sorted(set(model.raw_config.get("ple_layer_ids") or []))
    if index + 1 in ple_ids:
        total += _ple(model, ple_ids.index(index + 1), tp, b, max_tokens, ple_table)
    return total


def qwen4_exp_stage_bytes(
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    moe_ranks: int,
    max_num_batched_tokens: int,
    mtp: bool = False,
    ple_table: bool = False,
) -> tuple[int, ...]:
    """Each pipeline stage's bytes on one GPU (module doc); call :func:`qwen4_exp_unpriced`
    first. ``mtp``: an MTP drafter is configured (the last stage keeps ``_mtp_hidden_buffer``);
    ``ple_table``: the PLE n-gram tables on the GPU (vLLM's default keeps them on the host)."""
    h, b = model.hidden_size or 0, model.dtype_bytes or 2
    hc, r = _cfg(model, "hc_count"), _cfg(model, "hc_lowrank")
    vocab_rank = cdiv(_cfg(model, "vocab_size"), VOCAB_PADDING) * VOCAB_PADDING // tp
    stages = []
    for p in range(pp):
        start, end = get_pp_indices(len(model.layers), p, pp)
        total = sum(
            _layer_bytes(
                model,
                i,
                tp=tp,
                moe_ranks=moe_ranks,
                max_tokens=max_num_batched_tokens,
                ple_table=ple_table,
            )
            for i in range(start, end)
        )
        total += 2 * vocab_rank * h * b  # embed_tokens, lm_head
        qsa = [x for x in model.layers[start:end] if isinstance(x, FullAttention)]
        total += _rope_bytes(model, qsa[0].head_dim) if qsa else 0
        if p == pp - 1:
            total += _hyper_connection(h, hc, r, combine=False)
            total += max_num_batched_tokens * hc * h * b if mtp else 0
        stages.append(total)
    return tuple(stages)


def _buffers(model: ModelSpec, layers: range, max_tokens: int, last: bool, mtp: bool) -> int:
    """A stage's buffers the checkpoint does not hold: top-k buffers, KV scales, the n-gram
    tables' int64 layouts, the rotary cache and the MTP hidden buffer (not ``_prefetch_ids``)."""
    per_qsa = max_tokens * (_cfg(model, "indexer_budget") + _cfg(model, "indexer_compress_ratio"))
    qsa = [x for x in (model.layers[i] for i in layers) if isinstance(x, FullAttention)]
    ple_ids = set(model.raw_config.get("ple_layer_ids") or [])
    n = (_cfg(model, "ngram_size") - 1) * _cfg(model, "heads_per_ngram")
    ple = sum(1 for i in layers if i + 1 in ple_ids) * (_cfg(model, "ngram_size") + 2 * n) * 8
    rope = _rope_bytes(model, qsa[0].head_dim) if qsa else 0
    total = len(qsa) * (per_qsa * 4 + 16) + ple + rope
    hc_h = _cfg(model, "hc_count") * (model.hidden_size or 0)
    return total + (max_tokens * hc_h * (model.dtype_bytes or 2) if last and mtp else 0)


def qwen4_exp_weights(
    weights: WeightsEstimate,
    model: ModelSpec,
    *,
    tp: int,
    pp: int,
    moe_ranks: int,
    max_num_batched_tokens: int,
    mtp: bool,
) -> WeightsEstimate:
    """``weights`` (:func:`kvbudget.capacity.weights.estimate_weights`) with Qwen4-Exp's target
    as vLLM builds it by default (PLE tables on the host): a count from the architecture replaced
    by :func:`qwen4_exp_stage_bytes`; a snapshot's total split by its shares (the PLE tables
    then taken off), plus each stage's buffers; an engine log's figure (``flag``) kept. A part
    :func:`qwen4_exp_unpriced` names keeps the generic count, said in a note."""
    if weights.source == "flag":
        return weights
    part = qwen4_exp_unpriced(model)
    if part is not None:
        note = f"Qwen4-Exp's target weights are the generic count, not vLLM's modules: {part}"
        return replace(with_rope_cache(weights, model), notes=(*weights.notes, note))
    n_layers = len(model.layers)
    weights = without_count_notes(weights)  # every module is priced here
    args: dict[str, Any] = {
        "tp": tp,
        "pp": pp,
        "moe_ranks": moe_ranks,
        "max_num_batched_tokens": max_num_batched_tokens,
        "mtp": mtp,
    }
    stages = qwen4_exp_stage_bytes(model, **args)
    buffers = [
        _buffers(
            model,
            range(*get_pp_indices(n_layers, p, pp)),
            args["max_num_batched_tokens"],
            p == pp - 1,
            mtp,
        )
        for p in range(pp)
    ]
    said = f"{buffers[-1]:,} B of buffers on the last stage (int32 top-k buffers, rotary cache)"
    # the whole model's parameters, PLE tables included (one GPU, no buffers): a snapshot's shares
    whole = qwen4_exp_stage_bytes(
        model, tp=1, pp=1, moe_ranks=1, max_num_batched_tokens=0, ple_table=True
    )[0] - _buffers(model, range(n_layers), 0, True, False)
    if weights.source == "read":
        with_tables = qwen4_exp_stage_bytes(model, **args, ple_table=True)
        per_rank = tuple(
            int(weights.total_bytes * (t - f) / whole) + f - (t - s)
            for s, t, f in zip(stages, with_tables, buffers, strict=True)
        )
        method = (
            f"{weights.method}; split by Qwen4-Exp's shares as vLLM 0.32 builds it, the PLE "
            f"tables on the host; + {said}"
        )
        return replace(weights, per_rank_bytes=per_rank, method=method)
    method = (
        "Qwen4-Exp as vLLM 0.32 builds it, module by module (hyper-connections, QSA with its "
        f"indexer, PLE tables on the host; kvbudget.capacity.weights_qwen4), {said}"
    )
    return replace(
        weights, per_rank_bytes=stages, source="computed", method=method, total_bytes=whole
    )
