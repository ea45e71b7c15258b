"""``--speculative-config`` method ``mtp`` in vLLM 0.32: the drafter's own layers in the KV pool, how
many, and the tokens they keep (its weights: :mod:`kvbudget.capacity.mtp_draft`).

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
"""

from __future__ import annotations

from typing import Any

from kvbudget.capacity.draft import MTP_METHODS, draft_method, parse_speculative_config
from kvbudget.capacity.layouts.vllm_dots3 import is_dots3_note
from kvbudget.capacity.layouts.vllm_dsv4 import is_deepseek_v4
from kvbudget.capacity.layouts.vllm_minimax_m3 import VLLM_MINIMAX_M3_TYPES
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.layouts.vllm_qwen4_mtp import qwen4_mtp_layers
from kvbudget.capacity.mtp_dots3 import dots3_mtp_layer_types
from kvbudget.capacity.mtp_tokens import extra_retained_tokens, vllm_num_speculative_tokens
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import LayerSpec
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.mtp import DEEPSEEK_MTP_TYPES, vllm_mtp_layers

__all__ = [
    "SPEC_MTP_TYPES",
    "mtp_config",
    "mtp_extra_retained_tokens",
    "mtp_layers_requested",
    "mtp_pool_layers",
]

#: model types whose MTP layers (kvbudget.spec.mtp) join the target's vLLM layer specs
SPEC_MTP_TYPES = DEEPSEEK_MTP_TYPES | {"glm4_moe", "mimo", "mimo_v2_flash"}
#: MiniMaxM3TextConfig's default ``num_mtp_modules`` (configs/minimax_m3.py line 50)
MINIMAX_M3_DEFAULT_MTP_MODULES = 1


def _field(field: str, value: Any, model_type: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(
            f"speculative_config: method mtp for {model_type} needs {field} >= 1 in the config "
            f"(found {value!r}): vLLM builds that many MTP layers; without them run no MTP",
            field="speculative_config",
        )
    return value


def mtp_config(request: PlanRequest) -> dict[str, Any] | None:
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
    if model.model_type not in SPEC_MTP_TYPES or mtp_config(request) is None:
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
    config = mtp_config(request)
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
    config = mtp_config(request)
    if config is None:
        return 0
    n = mtp_layers_requested(request, model)
    tokens = vllm_num_speculative_tokens(config, n, model.model_type)
    return extra_retained_tokens(tokens, _draft_nextn_predict_layers(model))
