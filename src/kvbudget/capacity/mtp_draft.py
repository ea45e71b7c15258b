"""``--speculative-config`` method ``mtp`` in vLLM 0.32: the drafter's own layers in the KV pool.

kvbudget prices the MTP drafters of DeepSeek-V4, MiniMax-M3, DeepSeek-V3 / V3.2, GLM-5
(``glm_moe_dsa``), GLM-4.5 (``glm4_moe``), MiMo, MiMo-V2-Flash and Dots3-Note (KV only:
:func:`kvbudget.capacity.mtp_dots3.dots3_mtp_layer_types`). Facts, vLLM 0.32.0
(``site-packages/vllm``):

* A method in ``MTPModelTypes`` (``deepseek_mtp``, ``mimo_mtp``, ...) is renamed ``mtp``
  (``config/speculative.py`` lines 38-66, 1141-1145). The drafter is built in the same
  ``VllmConfig``; its attention layers register after every target layer and join the same
  pool (``v1/core/kv_cache_utils.py`` lines 1997-2012 ``_uses_trailing_mtp_layers``;
  ``_annotate_eagle_groups``, lines 2029-2085, only flags the group for prefix-cache block drops).
  The drafter's model class sees the target's ``model_config`` (``v1/spec_decode/
  llm_base_proposer.py`` lines 1304-1317, ``model_loader/utils.py`` lines 74-95) and the same
  ``cache_config`` (so the same KV dtype and block size) unless the speculative config sets its
  own ``kv_cache_dtype`` (lines 1293-1300: refused here).
* DeepSeek-V3 / V3.2, GLM-5, GLM-4.5, MiMo, MiMo-V2-Flash: the layers of
  :func:`kvbudget.spec.mtp.vllm_mtp_layers` (its module doc cites the model files) join the
  target's layer specs (:func:`mtp_pool_layers`), so vLLM's grouping of the whole list prices
  them: one more page per block per layer in a single-group model, one more sliding layer in
  MiMo-V2-Flash's sliding buckets. Their number is the checkpoint's ``num_nextn_predict_layers``
  (MiMo-V2-Flash: one), whatever ``num_speculative_tokens`` says (the drafter steps through its
  layers modulo their number, ``models/deepseek_mtp.py`` lines 217, 231). None of them has a
  sliding layer that multi-module MTP would widen (``kv_cache_utils.py`` lines 2583-2590 touch
  only ``SlidingWindowSpec``; MiMo-V2-Flash's draft config says ``num_nextn_predict_layers`` 1,
  ``config/speculative.py`` lines 761-775, so ``use_multi_module_mtp`` is False, lines 1982-1988).
* DeepSeek-V4 (``models/deepseek_v4/nvidia/mtp.py`` lines 143-148, 221-247):
  ``num_nextn_predict_layers`` ``DeepseekV4DecoderLayer`` at ``num_hidden_layers + k``, ratio 1
  (``attention.py`` lines 229-235): one sliding-window page each, which joins the target's
  sliding bucket and its packed groups (:mod:`kvbudget.capacity.pool_dsv4`). The CPU build does
  not run it (``models/deepseek_v4/cpu/mtp.py`` line 18: "DeepSeek-V4 speculative decoding (MTP)
  is not implemented on CPU"). With more than one MTP module and ``num_speculative_tokens`` > 1,
  every sliding spec keeps ``num_speculative_tokens - 1`` more tokens (``kv_cache_utils.py`` lines
  2583-2590; ``config/vllm.py`` lines 644-664, ``config/speculative.py`` lines 1982-1988), its
  sliding-window pages and its compressor states alike (all ``SlidingWindowMLASpec``, no
  ``bounded_replay``): priced as windows of ``W + k - 1``
  (:func:`kvbudget.capacity.mtp_tokens.extra_retained_tokens`, :mod:`kvbudget.capacity.pool_dsv4`).
* ``num_speculative_tokens`` is vLLM's for every drafter
  (:func:`kvbudget.capacity.mtp_tokens.vllm_num_speculative_tokens`): without a ``model`` in the
  speculative config it must be given (vLLM raises otherwise, ``config/speculative.py`` lines
  1819-1824); with one it defaults to the drafter's ``n_predict``.
* MiniMax-M3 (``models/minimax_m3/nvidia/mtp.py`` lines 58-64, 100-112): ``num_mtp_modules``
  layers (default 1, ``transformers_utils/configs/minimax_m3.py`` line 50; the VL checkpoint's
  text config is promoted, ``config/speculative.py`` lines 1030-1045), each a
  ``MiniMaxM3DecoderLayer(force_sparse_attn=True)``: the target's K/V page plus the indexer's
  bf16 key page (``models/minimax_m3/nvidia/model.py`` lines 707-716). They join the one
  uniform-type group, so each block holds ``num_mtp_modules`` more sparse-layer pages
  (:mod:`kvbudget.capacity.layouts.vllm_minimax_m3`).

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

from typing import Any

from kvbudget.capacity.draft import (
    MTP_METHODS,
    DraftCost,
    draft_method,
    parse_speculative_config,
)
from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.vllm_dots3 import is_dots3_note
from kvbudget.capacity.layouts.vllm_dsv4 import is_deepseek_v4
from kvbudget.capacity.layouts.vllm_minimax_m3 import (
    VLLM_MINIMAX_M3_TYPES,
    check_minimax_m3,
    minimax_m3_index_page_bytes,
)
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.layouts.vllm_qwen4_mtp import (
    qwen4_mtp_layers,
    qwen4_mtp_speculative_tokens,
)
from kvbudget.capacity.layouts.vllm_specs import attention_page_bytes
from kvbudget.capacity.modelopt_exclude import exclude_patterns
from kvbudget.capacity.moe_ranks import vllm_moe_ranks
from kvbudget.capacity.mtp_dots3 import DOTS3_MTP_WEIGHTS_UNPRICED, dots3_mtp_layer_types
from kvbudget.capacity.mtp_qwen4 import (
    qwen4_exp_mtp_bytes,
    qwen4_exp_mtp_bytes_per_batched_token,
)
from kvbudget.capacity.mtp_tokens import extra_retained_tokens, vllm_num_speculative_tokens
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
from kvbudget.spec.layers import FullAttention, LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.mtp import DEEPSEEK_MTP_TYPES, vllm_mtp_layers

__all__ = [
    "MTP_SNAPSHOT_NOTE",
    "MTP_WEIGHTS_NOTE",
    "SPEC_MTP_TYPES",
    "mtp_draft",
    "mtp_extra_retained_tokens",
    "mtp_layers_requested",
    "mtp_pool_layers",
    "mtp_weights_bytes",
]

#: model types whose MTP layers (kvbudget.spec.mtp) join the target's vLLM layer specs
SPEC_MTP_TYPES = DEEPSEEK_MTP_TYPES | {"glm4_moe", "mimo", "mimo_v2_flash"}
#: model types whose drafter's weights :func:`mtp_weights_bytes` sizes (module doc)
MTP_WEIGHTS_TYPES = (
    DEEPSEEK_MTP_TYPES
    | {"deepseek_v4", "glm4_moe", "mimo", "mimo_v2_flash"}
    | VLLM_MINIMAX_M3_TYPES
)

#: MiniMaxM3TextConfig's default ``num_mtp_modules`` (configs/minimax_m3.py line 50)
MINIMAX_M3_DEFAULT_MTP_MODULES = 1

MTP_SNAPSHOT_NOTE = (
    "the snapshot's total_size holds the checkpoint's MTP layer(s) (spread over the ranks by "
    "the target's shares): the drafter is counted there, not added again"
)

MTP_WEIGHTS_NOTE = (
    "weights leave the MTP drafter out (kvbudget does not estimate its decoder layer, experts "
    "and embedding); pass --weights-bytes from the engine log for the whole figure"
)


def _field(field: str, value: Any, model_type: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"speculative_config: method mtp for {model_type} needs {field} >= 1 in the config "
            f"(found {value!r}): vLLM builds that many MTP layers; without them run no MTP",
            field="speculative_config",
        )
    return value


def _mtp_config(request: PlanRequest) -> dict[str, Any] | None:
    if request.speculative_config is None:
        return None
    config = parse_speculative_config(request.speculative_config)
    if draft_method(config) not in MTP_METHODS:
        return None
    draft_kv = config.get("kv_cache_dtype")
    if draft_kv is not None and str(draft_kv).strip().lower() != request.kv_dtype.strip().lower():
        raise ConfigError(
            f"speculative_config: kv_cache_dtype {draft_kv!r} for the MTP drafter: vLLM 0.32 then "
            "gives the drafter its own cache dtype (v1/spec_decode/llm_base_proposer.py lines "
            "1293-1300), pages kvbudget has not modelled; drop it (the drafter follows "
            "--kv-cache-dtype) or measure",
            field="speculative_config",
        )
    return config


def mtp_pool_layers(request: PlanRequest, model: ModelSpec) -> tuple[LayerSpec, ...]:
    """The MTP layers that join ``model``'s vLLM layer specs for this request (module doc): ``()``
    without an MTP ``--speculative-config`` and for DeepSeek-V4 / MiniMax-M3 (priced otherwise)."""
    if model.model_type not in SPEC_MTP_TYPES or _mtp_config(request) is None:
        return ()
    layers = vllm_mtp_layers(model, model.raw_config)
    if layers is None:
        raise ConfigError(
            f"speculative_config: method mtp for {model.model_type}: kvbudget cannot read the MTP "
            "layer from this config (no latent / full-attention layer to repeat); measure",
            field="speculative_config",
        )
    if not layers:
        _field(
            "num_nextn_predict_layers",
            model.raw_config.get("num_nextn_predict_layers"),
            model.model_type,
        )
    return layers


def mtp_layers_requested(request: PlanRequest, model: ModelSpec) -> int:
    """How many MTP layers vLLM 0.32 adds to ``model``'s pool for this request (0 without an MTP
    ``--speculative-config``); refuses model types whose drafter kvbudget has not read."""
    config = _mtp_config(request)
    if config is None:
        return 0
    raw = model.raw_config
    if is_qwen4_exp(model):  # its tokens: vllm_qwen4_mtp.qwen4_mtp_speculative_tokens
        return qwen4_mtp_layers(model)
    if is_deepseek_v4(model):
        n = _field("num_nextn_predict_layers", raw.get("num_nextn_predict_layers"), "deepseek_v4")
    elif model.model_type in VLLM_MINIMAX_M3_TYPES:
        value = raw.get("num_mtp_modules", MINIMAX_M3_DEFAULT_MTP_MODULES)
        n = _field("num_mtp_modules", value, model.model_type)
    elif model.model_type in SPEC_MTP_TYPES:
        n = len(mtp_pool_layers(request, model))
    elif is_dots3_note(model):
        n = len(dots3_mtp_layer_types(model, config))
    else:
        n = 0
    if n:  # n_predict is the layer count for these drafters (mtp_tokens module doc)
        vllm_num_speculative_tokens(config, n, model.model_type)
        return n
    priced = ", ".join(
        sorted({"deepseek_v4", "dots3_note", "minimax_m3", "qwen4_exp", *SPEC_MTP_TYPES})
    )
    raise ConfigError(
        f"speculative_config: method mtp is priced for {priced} only, not "
        f"{model.model_type!r} (kvbudget has not read its drafter's vLLM specs); pass "
        "--kv-cache-memory and --weights-bytes from the engine log",
        field="speculative_config",
    )


def _draft_nextn_predict_layers(model: ModelSpec) -> int:
    """The draft config's ``num_nextn_predict_layers``, the field ``use_multi_module_mtp`` reads
    (``config/speculative.py`` lines 1982-1988, default 1): MiMo-V2-Flash's override sets it to
    its one layer (lines 761-775); MiniMax-M3's sets only ``n_predict`` from ``num_mtp_modules``
    (lines 1030-1058), so the checkpoint's own field stands (1 where it has none, as published);
    DeepSeek-V4's and the others' drafts keep the checkpoint's."""
    if model.model_type == "mimo_v2_flash":
        return 1
    value = model.raw_config.get("num_nextn_predict_layers", 1)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    return _field("num_nextn_predict_layers", value, model.model_type)  # refuses it


def mtp_extra_retained_tokens(request: PlanRequest, model: ModelSpec) -> int:
    """Tokens every sliding spec keeps below its window for this request's MTP drafter (0
    without one): ``num_speculative_tokens - 1`` where the draft config's
    ``num_nextn_predict_layers`` (:func:`_draft_nextn_predict_layers`, not the drafter's layer
    count) and the tokens are both above 1
    (:func:`kvbudget.capacity.mtp_tokens.extra_retained_tokens`)."""
    config = _mtp_config(request)
    if config is None:
        return 0
    n = mtp_layers_requested(request, model)
    tokens = vllm_num_speculative_tokens(config, n, model.model_type)
    return extra_retained_tokens(tokens, _draft_nextn_predict_layers(model))


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
    config = _mtp_config(request) or {}
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
