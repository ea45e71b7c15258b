"""MTP (multi-token prediction) draft layers: what vLLM caches for them, from vLLM 0.32.0's source.

Checkpoints with ``num_nextn_predict_layers`` (DeepSeek-V3/V3.2, GLM-5, GLM-4.5, MiMo) ship extra decoder
layers that only a speculative-decoding run uses. Facts (vLLM 0.32.0, ``site-packages/vllm``):

* Without ``--speculative-config`` none of them is built and their weights are skipped
  (``model_executor/models/deepseek_v2.py`` line 1654: ``if spec_layer is not None: continue``;
  MiMo's ``mimo.py`` loads only the target): they hold **no KV cache**.
* With ``--speculative-config '{"method": "mtp", ...}'`` the drafter registers its attention
  layers after every target layer, in the same pool (``v1/core/kv_cache_utils.py`` lines
  1997-2012 ``_uses_trailing_mtp_layers``, 2029-2085 ``_annotate_eagle_groups`` flags the group
  holding the last layer as the draft group):

  - DeepSeek-V3 / V3.2 / GLM-5 (``deepseek_mtp.py`` lines 147-165 and 95-112): layers
    ``num_hidden_layers .. + num_nextn_predict_layers``, each a ``DeepseekV2DecoderLayer`` of the
    target's config: the same MLA latent; a DSA model's MTP layer always builds a full indexer,
    whatever ``index_topk_pattern``/``freq`` say (``deepseek_v2.py`` lines 1158-1168,
    ``is_mtp_layer``).
  - MiMo (``mimo`` / MiMo-7B, ``mimo_mtp.py`` lines 96-115): ``num_nextn_predict_layers``
    Qwen2-style layers with the target's full attention (``qwen2.py`` lines 238-290: no sliding
    window; the model class reads the target's config, ``v1/spec_decode/llm_base_proposer.py``
    lines 1304-1317).
  - GLM-4.5 / 4.6 (``glm4_moe``, ``glm4_moe_mtp.py`` lines 98-104, 131-152):
    ``num_nextn_predict_layers`` ``Glm4MoeDecoderLayer`` of the target's config at
    ``num_hidden_layers + k``: the target's full attention.
  - MiMo-V2-Flash (``mimo_v2_mtp.py`` lines 177 and 81-100): ONE layer (``num_mtp_layers = 1``,
    whatever the config says; the published config has no ``num_nextn_predict_layers``),
    sliding-window attention of ``swa_num_key_value_heads`` heads of
    ``swa_head_dim`` K / ``swa_v_head_dim`` V, window ``sliding_window_size``.

This module only states the layers; ``capacity/mtp_draft.py`` prices them in vLLM's pool (the
layers join the target's layer specs). transformers keeps no MTP cache (its models drop those weights).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvbudget.spec.layers import MLA, FullAttention, LayerSpec, SlidingWindow
from kvbudget.spec.model import ModelSpec

#: model types whose MTP drafter is vLLM's DeepSeekMTP (the target's own decoder layer)
DEEPSEEK_MTP_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa"})
#: MiMo-V2-Flash's drafter builds one layer whatever ``num_nextn_predict_layers`` says
MIMO_V2_MTP_LAYERS = 1


def vllm_mtp_layers(spec: ModelSpec, config: dict[str, Any]) -> tuple[LayerSpec, ...] | None:
    """The draft layers vLLM 0.32 caches for ``--speculative-config`` method ``mtp``, indexed after
    the target's layers; ``()`` when the checkpoint has none; None when kvbudget has not read this
    model type's drafter (do not guess)."""
    n = config.get("num_nextn_predict_layers") or 0
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        return None
    base = spec.num_layers
    distinct = spec.layer_seq.distinct()
    if spec.model_type == "mimo_v2_flash":  # the drafter ignores num_nextn_predict_layers
        return (
            SlidingWindow(
                base,
                int(config["swa_num_key_value_heads"]),
                int(config["swa_head_dim"]),
                int(config.get("swa_v_head_dim") or config["swa_head_dim"]),
                sliding_window=int(config["sliding_window_size"]),
            ),
        ) * MIMO_V2_MTP_LAYERS
    if n == 0:
        return ()
    if spec.model_type in DEEPSEEK_MTP_TYPES:
        latent = next((x for x in distinct if isinstance(x, MLA)), None)
        if latent is None:
            return None
        index = max((x.index_head_dim for x in distinct if isinstance(x, MLA)), default=0)
        return tuple(replace(latent, layer_index=base + k, index_head_dim=index) for k in range(n))
    if spec.model_type in ("mimo", "glm4_moe"):
        full = next((x for x in distinct if type(x) is FullAttention), None)
        if full is None:
            return None
        return tuple(replace(full, layer_index=base + k) for k in range(n))
    return None


__all__ = ["DEEPSEEK_MTP_TYPES", "MIMO_V2_MTP_LAYERS", "vllm_mtp_layers"]
