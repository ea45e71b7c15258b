"""One GPU's bytes of the MiMo-V2-Flash and MiniMax-M3 MTP drafters, module by module as vLLM 0.32
builds them (``site-packages/vllm``); :mod:`kvbudget.capacity.mtp_draft` adds them to the plan.

Each linear's weight is one rank's shard in the checkpoint's quantization
(:func:`kvbudget.capacity.weight_matrices._matrix_bytes`: fp8 blocks, AWQ / GPTQ, ...) unless
vLLM builds it without ``quant_config``; norms and biases are in the model dtype unless noted.
The embedding and the head are the target's (the proposer shares them with an MTP drafter,
``v1/spec_decode/llm_base_proposer.py`` lines 1466-1472, 1545-1556).

* MiMo-V2-Flash, one layer (``model_executor/models/mimo_v2_mtp.py`` lines 57-119, 177):
  ``enorm``, ``hnorm``, ``input_layernorm``, ``pre_mlp_layernorm``, ``final_layernorm`` (hidden
  each); ``eh_proj`` a ``ReplicatedLinear(2 x hidden, hidden)`` without ``quant_config`` (lines
  75-77); a sliding ``MiMoV2Attention`` (``mimo_v2.py`` lines 218-300) of
  ``swa_num_attention_heads``: the merged ``qkv_proj`` (KV heads replicated below one per rank),
  ``o_proj`` without ``quant_config`` under ``mtp.layers`` (line 277), with
  ``add_swa_attention_sink_bias`` one sink per local head (line 293); a dense ``MiMoV2MLP`` of
  ``intermediate_size`` (lines 77-101).
* MiniMax-M3, per module (``models/minimax_m3/nvidia/mtp.py`` lines 42-67): ``enorm``,
  ``hnorm``, ``final_layernorm`` (hidden each), ``eh_proj`` a ``ReplicatedLinear(2 x hidden,
  hidden)`` with the checkpoint's ``quant_config``, and a ``MiniMaxM3DecoderLayer`` forced sparse
  and MoE (``models/minimax_m3/nvidia/model.py`` lines 678-763): ``input_layernorm`` and
  ``post_attention_layernorm``; ``MiniMaxM3SparseAttention`` (lines 392-490) with one fused
  ``qkv_proj`` of ``[q | k | v | index_q | index_k]`` per rank (``model_executor/layers/linear.py``
  lines 1352-1420: index_q has one head per local KV head, index_k one head on every rank),
  ``o_proj`` row-split, and four head-size norms (``q_norm``, ``k_norm``, ``index_q_norm``,
  ``index_k_norm``); ``MiniMaxM3MoE`` (lines 195-270): the router ``GateLinear`` in fp32,
  ``e_score_correction_bias`` (fp32, one per expert) when ``use_routing_bias``,
  ``num_local_experts`` experts of ``intermediate_size`` (gate_up and down, split over the
  experts' ranks) and, with ``n_shared_experts``, a shared ``MiniMaxM3MLP`` of ``intermediate_size
  x n_shared_experts``.
"""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.weight_matrices import Matrix, _matrix_bytes
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec

__all__ = ["mimo_v2_mtp_bytes", "minimax_m3_mtp_bytes"]


def _positive(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def mimo_v2_mtp_bytes(model: ModelSpec, swa: LayerSpec, tp: int) -> int | None:
    """MiMo-V2-Flash's one MTP layer on one GPU of ``tp`` (module doc); ``swa`` is the drafter's
    sliding layer (:func:`kvbudget.spec.mtp.vllm_mtp_layers`). None when the config lacks a size."""
    raw = model.raw_config
    heads = _positive(raw.get("swa_num_attention_heads"))
    inter = _positive(model.intermediate_size)
    h = model.hidden_size or 0
    if not isinstance(swa, FullAttention) or heads is None or inter is None or not h:
        return None
    dtype_bytes, quant = model.dtype_bytes or 2, model.quantization_config
    local_heads = heads // tp
    kv_heads = max(1, swa.num_kv_heads // tp)
    qkv_out = local_heads * swa.head_dim + kv_heads * (swa.head_dim + swa.v_dim)
    mats = (
        (Matrix("qkv_proj", h, qkv_out), (h, qkv_out), quant),
        (Matrix("o_proj", heads * swa.v_dim, h), (local_heads * swa.v_dim, h), None),
        (Matrix("gate_up_proj", h, 2 * inter), (h, 2 * (inter // tp)), quant),
        (Matrix("down_proj", inter, h), (inter // tp, h), quant),
        (Matrix("eh_proj", 2 * h, h), (2 * h, h), None),
    )
    total = sum(_matrix_bytes(m, shape, q, dtype_bytes) for m, shape, q in mats)
    sinks = local_heads if raw.get("add_swa_attention_sink_bias") else 0
    return total + (5 * h + sinks) * dtype_bytes


def minimax_m3_mtp_bytes(model: ModelSpec, *, tp: int, moe_ranks: int) -> int | None:
    """One MiniMax-M3 MTP module on one GPU of ``tp`` (routed experts over ``moe_ranks``; module
    doc). None when the config lacks a size."""
    raw = model.raw_config
    sparse = raw.get("sparse_attention_config")
    sparse = sparse if isinstance(sparse, dict) else {}
    h = _positive(model.hidden_size)
    heads = _positive(raw.get("num_attention_heads"))
    kv = _positive(raw.get("num_key_value_heads"))
    head_dim = _positive(raw.get("head_dim"))
    index_dim = _positive(sparse.get("sparse_index_dim"))
    experts = _positive(raw.get("num_local_experts"))
    inter = _positive(raw.get("intermediate_size"))
    if None in (h, heads, kv, head_dim, index_dim, experts, inter):
        return None
    assert h and heads and kv and head_dim and index_dim and experts and inter
    shared = _positive(raw.get("n_shared_experts")) or 0
    dtype_bytes, quant = model.dtype_bytes or 2, model.quantization_config
    local_kv = max(1, kv // tp)
    qkv_out = (heads // tp) * head_dim + 2 * local_kv * head_dim + local_kv * index_dim + index_dim
    mats = [
        (Matrix("eh_proj", 2 * h, h), (2 * h, h)),
        (Matrix("qkv_proj", h, qkv_out), (h, qkv_out)),
        (Matrix("o_proj", heads * head_dim, h), (heads // tp * head_dim, h)),
    ]
    if shared:
        mats.append(
            (Matrix("shared.gate_up", h, 2 * inter * shared), (h, 2 * (inter * shared // tp)))
        )
        mats.append((Matrix("shared.down", inter * shared, h), (inter * shared // tp, h)))
    total = sum(_matrix_bytes(m, shape, quant, dtype_bytes) for m, shape in mats)
    gate_up = Matrix("experts.gate_up", h, 2 * inter, expert=True)
    down = Matrix("experts.down", inter, h, expert=True)
    total += experts * _matrix_bytes(gate_up, (h, 2 * (inter // moe_ranks)), quant, dtype_bytes)
    total += experts * _matrix_bytes(down, (inter // moe_ranks, h), quant, dtype_bytes)
    total += h * experts * 4  # the fp32 router
    total += experts * 4 if raw.get("use_routing_bias") else 0
    norms = 3 * h + 2 * h + 2 * head_dim + 2 * index_dim
    return total + norms * dtype_bytes
