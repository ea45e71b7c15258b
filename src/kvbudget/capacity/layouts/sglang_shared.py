"""SGLang's token pools hold K/V for every layer, the KV-shared ones too.

Gemma-3n and Gemma-4 (E2B / E4B: ``num_kv_shared_layers``) let their last layers read an earlier
layer's K/V: SGLang's attention runs them with the source layer's ``layer_id`` and
``save_kv_cache=False`` (0.5.23 ``models/gemma3n_causal.py`` lines 374-385, 416-417, 494;
``models/gemma4_causal.py`` lines 397-433, 540; 0.5.4 ``gemma3n_causal.py`` lines 376-411, 488).
The pool is sized and allocated per layer regardless: the default pool's cell counts
``num_effective_layers`` (every layer of the stage: 0.5.23 ``model_executor/pool_configurator.py``
lines 225-237 and ``model_runner_components/layer_setup.py`` lines 150-154, 214-220; 0.5.4
``model_executor/model_runner.py`` lines 1390-1399), and the hybrid SWA pool one row per id of
``full_attention_layer_ids`` / ``swa_attention_layer_ids`` (``pool_configurator.py`` lines 666-667),
which list every ``layer_types`` entry (``configs/model_config.py`` lines 2764-2770). So a shared
layer costs SGLang what its source layer costs (vLLM and transformers store nothing for it).
"""

from __future__ import annotations

from dataclasses import replace

from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import KVShared
from kvbudget.spec.model import ModelSpec


def has_shared_kv(spec: ModelSpec) -> bool:
    return any(isinstance(x, KVShared) for x in spec.layer_seq.distinct())


def sglang_pool_layers(spec: ModelSpec) -> ModelSpec:
    """``spec`` with each KV-shared layer replaced by its source layer's K/V at its own index:
    the layers SGLang allocates (``spec`` itself when no layer shares)."""
    if not has_shared_kv(spec):
        return spec
    layers = spec.layer_seq
    own = [
        replace(layers[x.source_layer_index], layer_index=i) if isinstance(x, KVShared) else x
        for i, x in enumerate(layers)
    ]
    return replace(spec, layers=LayerSeq.from_items(own))
