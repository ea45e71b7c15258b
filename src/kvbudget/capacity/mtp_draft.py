"""``--speculative-config`` method ``mtp`` in vLLM 0.32: the drafter's weights, per GPU, and its
:class:`~kvbudget.capacity.draft.DraftCost` (the drafter's layers in the KV pool, how many, and
its tokens: :mod:`kvbudget.capacity.mtp_layers`, whose module doc states vLLM's facts).

The drafter's weights (:func:`mtp_weights_bytes`), per GPU, join the last stage's (a
``--weights-bytes`` figure from the engine log and a snapshot's ``total_size``, which holds the
checkpoint's MTP tensors, already count them: nothing is added, :data:`MTP_SNAPSHOT_NOTE`;
without the drafter :mod:`kvbudget.capacity.checkpoint_mtp` takes those tensors off the total).
vLLM loads the drafter inside the profiler that logs "Model loading took"
(``v1/worker/gpu_model_runner.py`` lines 5050-5073, 5137-5151), then the proposer swaps the
drafter's ``embed_tokens`` and every ``shared_head.head`` / ``lm_head`` for the target's
("Detected MTP model. Sharing target model ...": ``v1/spec_decode/llm_base_proposer.py`` lines
1422, 1466-1472, 1498-1501 with ``--pp`` 1, 1545-1556, 1563-1571), so neither counts twice.
What one MTP layer keeps of its own:

* DeepSeek-V3 / V3.2, GLM-5 (``models/deepseek_mtp.py`` lines 76-111; V3.2 and GLM-5 take
  ``models/deepseek_v32/nvidia/mtp.py`` lines 64-100, the same modules around a
  ``DeepseekV32DecoderLayer``, MoE by the same rule, ``nvidia/model.py`` lines 74, 91-95):
  ``enorm``, ``hnorm`` and ``shared_head.norm`` (hidden each, lines 85-86, 61), ``eh_proj``
  an ``nn.Linear(2 x hidden, hidden)`` (line 87: unsharded, unquantized, model dtype) and
  ``mtp_block``, a
  ``DeepseekV2DecoderLayer`` with the target's ``quant_config`` at index ``num_hidden_layers + k``
  (MoE there when ``layer_idx >= first_k_dense_replace`` and ``layer_idx % moe_layer_freq == 0``,
  ``deepseek_v2.py`` lines 1293-1297): sized as kvbudget sizes a target layer
  (:func:`kvbudget.capacity.weights.layer_rank_bytes`, the same TP / expert split and
  quantization, the same omissions: biases, q/k norms, a DSA indexer's projections).
* GLM-4.5 (``models/glm4_moe_mtp.py`` lines 60-104): the same modules around a
  ``Glm4MoeDecoderLayer`` (MoE when ``layer_idx >= first_k_dense_replace``, ``glm4_moe.py``
  lines 353-356).
* MiMo (``models/mimo_mtp.py`` lines 43-65): ``token_layernorm``, ``hidden_layernorm``,
  ``final_layernorm``, ``input_proj`` ``nn.Linear(2 x hidden, hidden)`` and a dense
  ``Qwen2DecoderLayer`` with the target's ``quant_config``.

* MiMo-V2-Flash (one layer: five norms, an unquantized ``eh_proj``, a sliding attention with an
  unquantized ``o_proj`` and sinks, a dense MLP) and MiniMax-M3 (``num_mtp_modules`` modules:
  three norms, a quantized ``eh_proj``, a sparse MoE decoder layer with its indexer projections,
  fp32 router and shared expert) are sized module by module as vLLM builds them
  (:mod:`kvbudget.capacity.mtp_weights`, which cites the lines); vLLM CPU built exactly MiMo-V2's
  modules for a tiny config (``scripts/vllm_drafter_modules.py``).

* DeepSeek-V4 (``models/deepseek_v4/nvidia/mtp.py`` lines 83-148): per layer ``enorm``,
  ``hnorm``, ``shared_head.norm``, fp8 ``e_proj`` / ``h_proj`` (``ReplicatedLinear`` with the
  checkpoint's quant_config, ue8m0 block scales, float32 ones with ``expert_dtype`` fp8), the
  fp32 ``hc_head`` parameters and a ``DeepseekV4DecoderLayer`` at compress ratio 1 (fp32 mHC
  parameters, padded fp32 sinks, the fp8 ``fused_wqa_wkv`` / ``wq_b`` / ``wo_a`` / ``wo_b``, a
  bf16 gate, an fp32 routing bias, the shared expert and MXFP4 routed experts, fp8 ones with
  ``expert_dtype`` fp8), sized tensor by tensor in
  :mod:`kvbudget.capacity.mtp_weights`; plus its own fp32 rotary cache when no target layer has
  compress ratio 1 (Pro), and the target's ``_mtp_hidden_buffer`` (``max_num_batched_tokens x
  hc_mult x hidden``, model dtype), which vLLM allocates only with a drafter
  (:attr:`DraftCost.weights_bytes_per_batched_token`). Its ``topk_indices_buffer``, embedding
  and head are swapped for the target's (``llm_base_proposer.py`` lines 1576-1590 too). A part
  vLLM builds in a way kvbudget cannot pin down (e.g. the NVFP4 checkpoint's drafter experts:
  :func:`kvbudget.capacity.mtp_weights.deepseek_v4_mtp_unpriced`) is refused in one line naming
  it: such plans take ``--weights-bytes`` (the engine log's figure includes the drafter) or
  ``--kv-cache-memory`` (then the weights shown leave the drafter out, and say so:
  :data:`MTP_WEIGHTS_NOTE`).
* Qwen4-Exp (``models/qwen4_exp/nvidia/mtp.py`` lines 172-259), unquantized:
  ``fc_embedding`` / ``fc_hidden``, two norms, the hyper-connection mixer and
  ``mtp_num_hidden_layers`` QSA decoder layers, plus per batched token their top-k buffers and
  the target's ``_mtp_hidden_buffer`` (:mod:`kvbudget.capacity.mtp_qwen4`); a quantized
  checkpoint's drafter is not sized.
"""

from __future__ import annotations

from kvbudget.capacity.draft import (
    DraftCost,
)
from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.vllm_dots3 import is_dots3_note
from kvbudget.capacity.layouts.vllm_minimax_m3 import (
    VLLM_MINIMAX_M3_TYPES,
    check_minimax_m3,
    minimax_m3_index_page_bytes,
)
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.layouts.vllm_qwen4_mtp import (
    qwen4_mtp_speculative_tokens,
)
from kvbudget.capacity.layouts.vllm_specs import attention_page_bytes
from kvbudget.capacity.modelopt_exclude import exclude_patterns
from kvbudget.capacity.moe_ranks import vllm_moe_ranks
from kvbudget.capacity.mtp_dots3 import DOTS3_MTP_WEIGHTS_UNPRICED
from kvbudget.capacity.mtp_layers import mtp_config, mtp_layers_requested, mtp_pool_layers
from kvbudget.capacity.mtp_qwen4 import (
    qwen4_exp_mtp_bytes,
    qwen4_exp_mtp_bytes_per_batched_token,
)
from kvbudget.capacity.mtp_tokens import vllm_num_speculative_tokens
from kvbudget.capacity.mtp_weights import (
    deepseek_v4_hidden_buffer_bytes_per_token,
    deepseek_v4_mtp_bytes,
    deepseek_v4_mtp_rope_bytes,
    deepseek_v4_mtp_unpriced,
    mimo_v2_mtp_bytes,
    minimax_m3_mtp_bytes,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.weight_matrices import layer_matrices
from kvbudget.capacity.weights import layer_rank_bytes
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.mtp import DEEPSEEK_MTP_TYPES

__all__ = [
    "MTP_SNAPSHOT_NOTE",
    "MTP_WEIGHTS_NOTE",
    "mtp_draft",
    "mtp_weights_bytes",
]

#: model types whose drafter's weights :func:`mtp_weights_bytes` sizes (module doc)
MTP_WEIGHTS_TYPES = (
    DEEPSEEK_MTP_TYPES
    | {"deepseek_v4", "glm4_moe", "mimo", "mimo_v2_flash"}
    | VLLM_MINIMAX_M3_TYPES
)

MTP_SNAPSHOT_NOTE = (
    "the snapshot's total_size holds the checkpoint's MTP layer(s) (spread over the ranks by "
    "the target's shares): the drafter is counted there, not added again"
)

MTP_WEIGHTS_NOTE = (
    "weights leave the MTP drafter out (kvbudget does not estimate its decoder layer, experts "
    "and embedding); pass --weights-bytes from the engine log for the whole figure"
)


def _moe_ranks(request: PlanRequest, model: ModelSpec) -> int:
    return vllm_moe_ranks(request, model) or request.tp


def mtp_weights_bytes(
    request: PlanRequest, model: ModelSpec, compute_capability_major: int | None = None
) -> int | None:
    """One GPU's bytes of the MTP drafter's own weights (module doc): per MTP layer three norms,
    the ``2 x hidden -> hidden`` projection (whole on every rank, model dtype) and one decoder
    layer of the target's kind; the embedding and the head are the target's. None for a model
    type not sized yet, for a ModelOpt ``exclude_modules`` list (not matched against the
    drafter's module names) and for a DeepSeek-V4 part :func:`deepseek_v4_mtp_unpriced` names.
    ``compute_capability_major``: the GPU's (DeepSeek-V4's attention backend pads its sinks by
    it); None is read as a FlashMLA device (Hopper, datacenter Blackwell)."""
    moe_ranks = _moe_ranks(request, model)
    if is_qwen4_exp(model):
        return qwen4_exp_mtp_bytes(model, tp=request.tp, moe_ranks=moe_ranks)
    if model.model_type not in MTP_WEIGHTS_TYPES:
        return None
    if model.model_type == "deepseek_v4":
        if deepseek_v4_mtp_unpriced(model, tp=request.tp, moe_ranks=moe_ranks) is not None:
            return None
        n = mtp_layers_requested(request, model)
        per_layer = deepseek_v4_mtp_bytes(
            model,
            tp=request.tp,
            moe_ranks=moe_ranks,
            compute_capability_major=compute_capability_major,
        )
        return n * per_layer + deepseek_v4_mtp_rope_bytes(model)
    if any(p != "lm_head" for p in exclude_patterns(model.quantization_config)):
        return None
    if model.model_type == "mimo_v2_flash":
        layers = mtp_pool_layers(request, model)
        return mimo_v2_mtp_bytes(model, layers[0], request.tp) if len(layers) == 1 else None
    if model.model_type in VLLM_MINIMAX_M3_TYPES:
        n = mtp_layers_requested(request, model)
        one = minimax_m3_mtp_bytes(model, tp=request.tp, moe_ranks=moe_ranks)
        return None if one is None else n * one
    h = model.hidden_size or 0
    dtype_bytes = model.dtype_bytes or 2
    raw = model.raw_config
    freq = raw.get("moe_layer_freq", 1)
    first_dense = raw.get("first_k_dense_replace", 0)
    if not isinstance(freq, int) or freq < 1 or not isinstance(first_dense, int):
        return None
    total = 0
    for layer in mtp_pool_layers(request, model):
        index = layer.layer_index
        # deepseek_v2.py lines 1293-1297 (mlp_layer_types, e.g. GLM-5's, is not read there);
        # glm4_moe.py lines 353-356 (no moe_layer_freq); MiMo's Qwen2 layer is dense
        moe = (
            model.model_type != "mimo"
            and raw.get("n_routed_experts") is not None
            and index >= first_dense
            and (model.model_type == "glm4_moe" or index % freq == 0)
        )
        mats, _ = layer_matrices(model, index, moe, layer)
        total += layer_rank_bytes(model, mats, tp=request.tp, moe_ranks=moe_ranks)
        total += 3 * h * dtype_bytes + 2 * h * h * dtype_bytes
    return total


def mtp_draft(
    request: PlanRequest, model: ModelSpec, compute_capability_major: int | None = None
) -> DraftCost | None:
    """The MTP drafter's cost when ``--speculative-config`` asks for one (else None).

    ``block_bytes`` is what it adds to each block of a single uniform-type group (MiniMax-M3);
    DeepSeek-V4's MTP pages join its packed groups instead (``block_bytes`` 0, the groups carry
    them). ``weights_bytes``: :func:`mtp_weights_bytes`, 0 where it is not sized (then a plan
    needs ``--weights-bytes`` or ``--kv-cache-memory``, module doc); DeepSeek-V4's target then
    also holds a hidden-state buffer per batched token (``weights_bytes_per_batched_token``).
    """
    n = mtp_layers_requested(request, model)
    if n == 0:
        return None
    weights_bytes = mtp_weights_bytes(request, model, compute_capability_major)
    if (
        weights_bytes is None
        and request.weights_bytes is None
        and request.kv_cache_memory_bytes is None
    ):
        part = (
            deepseek_v4_mtp_unpriced(model, tp=request.tp, moe_ranks=_moe_ranks(request, model))
            if model.model_type == "deepseek_v4"
            else DOTS3_MTP_WEIGHTS_UNPRICED
            if is_dots3_note(model)
            else None
        )
        what = (
            f"of {model.model_type} are not estimated by kvbudget: {part}"
            if part
            else f"({n} decoder layer(s) of {model.model_type}) are not estimated by kvbudget"
        )
        raise ConfigError(
            f"speculative_config: the MTP drafter's weights {what}; pass "
            "--weights-bytes from the engine log (it includes them) or --kv-cache-memory",
            field="speculative_config",
        )
    if request.pp > 1:
        raise ConfigError(
            "speculative_config: an MTP drafter with --pp > 1 is not priced; plan with --pp 1",
            field="speculative_config",
        )
    block_bytes = 0
    if model.model_type in VLLM_MINIMAX_M3_TYPES:
        dtype = get_kv_dtype(request.kv_dtype, engine="vllm", model_dtype=model.torch_dtype)
        block = check_minimax_m3(request.block_size, dtype)
        sparse = next(
            (
                x
                for x in model.layer_seq.distinct()
                if isinstance(x, FullAttention) and x.index_head_dim
            ),
            None,
        )
        if sparse is None:
            raise ConfigError(
                f"speculative_config: {model.model_type} has no sparse-attention layer to read "
                "the MTP layer's indexer from (sparse_attention_freq all 0); measure",
                field="speculative_config",
            )
        page = attention_page_bytes(sparse, dtype, request.tp, block)
        page += minimax_m3_index_page_bytes(sparse.index_head_dim, block)
        block_bytes = n * page
    per_token = 0
    if model.model_type == "deepseek_v4" and weights_bytes is not None:
        per_token = deepseek_v4_hidden_buffer_bytes_per_token(model)
    if is_qwen4_exp(model) and weights_bytes is not None:
        per_token = qwen4_exp_mtp_bytes_per_batched_token(model)
    config = mtp_config(request) or {}
    tokens = (
        qwen4_mtp_speculative_tokens(model, config)
        if is_qwen4_exp(model)
        else vllm_num_speculative_tokens(config, n, model.model_type)
    )
    return DraftCost(
        model_id=f"{model.model_id} (MTP, {n} layer(s))",
        num_layers=n,
        block_bytes=block_bytes,
        weights_bytes=weights_bytes or 0,
        num_speculative_tokens=tokens,
        is_mtp=True,
        weights_bytes_per_batched_token=per_token,
    )
