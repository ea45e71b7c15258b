"""``--speculative-config`` with a draft model: its weights and its KV layers, priced in the pool.

vLLM 0.19.0 loads the draft model with the target's tensor-parallel size
(``v1/spec_decode/draft_model.py`` ``_raise_if_draft_tp_mismatch``) into the same
``VllmConfig``, so its attention layers are found by ``get_kv_cache_spec``
(``get_layers_from_vllm_config(..., AttentionLayerBase)``) and share the one KV pool with the
target's. With full attention on both sides and one block size, the specs are one
``UniformTypeKVCacheSpecs`` group whose page is the sum of every layer's page
(``v1/kv_cache_interface.py``): each block then costs ``target_page x target_layers +
sum(draft pages)``. vLLM 0.33.0 (the PyPI wheel, read for issue 29) tags a draft model's specs
``is_draft=True`` (``v1/worker/gpu_model_runner.py`` ``get_kv_cache_spec``, from
``is_draft_layer`` set in ``v1/spec_decode/llm_base_proposer.py``); the field is
``compare=False`` (``v1/kv_cache_interface.py``: "excluded from equality so it never affects
grouping") and ``v1/core/kv_cache_planning.py`` reads it only to mark EAGLE block-drop groups,
so the draft's layers stay in the one pool and the arithmetic is the same; the draft still runs
at the target's TP (``draft_model.py`` ``_raise_if_draft_tp_mismatch``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from kvbudget.capacity.layouts.vllm import vllm_layer_specs
from kvbudget.capacity.weights import estimate_weights, with_rope_cache
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

#: methods that load a separate draft checkpoint with its own attention layers
DRAFT_METHODS = ("draft_model",)
#: methods without KV layers of their own (n-gram lookup, suffix decoding)
NO_KV_METHODS = ("ngram", "suffix")
#: the ``--speculative-config`` methods vLLM 0.32 runs as ``mtp`` (``MTPModelTypes``,
#: ``config/speculative.py`` lines 38-66, renamed at lines 1141-1145) for the model types
#: ``capacity.mtp_draft`` prices; any other model type is refused there
MTP_METHODS = frozenset(
    {
        "mtp",
        "deepseek_mtp",
        "minimax_m3_mtp",
        "mimo_mtp",
        "mimo_v2_mtp",
        "glm4_moe_mtp",
        "qwen4_exp_mtp",
    }
)


@dataclass(frozen=True, slots=True)
class DraftCost:
    """What a draft model adds on the last pipeline stage, per GPU."""

    model_id: str
    num_layers: int
    block_bytes: int  # KV bytes the draft adds to each block of the pool
    weights_bytes: int
    num_speculative_tokens: int
    #: an MTP drafter (capacity.mtp_draft): a ``--weights-bytes`` figure already includes it
    is_mtp: bool = False
    #: weights-time bytes per ``max_num_batched_tokens`` the drafter brings on each GPU of the
    #: last stage (DeepSeek-V4's target keeps a hidden-state buffer for it), added to
    #: ``weights_bytes`` once the batch size is known
    weights_bytes_per_batched_token: int = 0


def parse_speculative_config(text: str) -> dict[str, Any]:
    """vLLM's ``--speculative-config`` JSON, refused in one line when it is not an object."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"speculative_config: {text!r} is not JSON ({exc.msg}); write it as vLLM takes it, "
            'e.g. \'{"model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}\'',
            field="speculative_config",
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError(
            "speculative_config: must be a JSON object with 'model' or 'method'",
            field="speculative_config",
        )
    return data


def draft_method(config: dict[str, Any]) -> str:
    """The method vLLM uses: given, or ``draft_model`` when only a model is named."""
    method = config.get("method")
    if method is None and config.get("model"):
        return "draft_model"
    return str(method or "")


def draft_cost(
    config: dict[str, Any], *, target: ModelSpec, draft: ModelSpec, kv_dtype: str, tp: int
) -> DraftCost:
    """The draft's per-block KV bytes and per-GPU weights (full attention only; else refused)."""
    target_specs = vllm_layer_specs(target, kv_dtype=kv_dtype, tp=tp, pp=1)
    draft_specs = vllm_layer_specs(draft, kv_dtype=kv_dtype, tp=tp, pp=1)
    kinds = {s.kind for s, _ in target_specs.runs()} | {s.kind for s, _ in draft_specs.runs()}
    blocks = {s.block_size for s, _ in target_specs.runs()} | {
        s.block_size for s, _ in draft_specs.runs()
    }
    if kinds != {"full"} or len(blocks) != 1:
        raise ConfigError(
            "speculative_config: a draft model is priced when target and draft are full "
            f"attention with one block size (found {sorted(kinds)}, block sizes {sorted(blocks)}); "
            "pass --kv-cache-memory from the engine log",
            field="speculative_config",
        )
    block_bytes = sum(s.page_size_bytes * len(r) for s, r in draft_specs.runs())
    weights = with_rope_cache(estimate_weights(draft, tp=tp, pp=1), draft)
    return DraftCost(
        model_id=draft.model_id,
        num_layers=draft.num_layers,
        block_bytes=block_bytes,
        weights_bytes=weights.per_rank_bytes[0],
        num_speculative_tokens=int(config.get("num_speculative_tokens") or 1),
    )
