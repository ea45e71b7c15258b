"""Qwen4-Exp's MTP drafter on one GPU as vLLM 0.32 builds it (``site-packages/vllm/models/
qwen4_exp/nvidia/mtp.py``; line numbers are 0.32.0's), unquantized only, as its target
(:mod:`kvbudget.capacity.weights_qwen4`, whose module doc gives each module's shapes):

* ``fc_embedding`` and ``fc_hidden``, ``H -> H`` ``ColumnParallelLinear`` (split over TP, lines
  205-222); ``pre_fc_norm_embedding`` (``H``) and ``pre_fc_norm_hidden`` (``hc x H``, lines
  237-242); the final ``hyper_connection_mixer`` (no combine, lines 252-259);
* ``mtp_num_hidden_layers`` (1 without the field) ``Qwen4ExpDecoderLayer`` of type
  ``qwen_sparse_attention`` (lines 223-231): two hyper-connections, the QSA attention with its
  indexer (the target's QSA shapes) and the MoE block; no PLE (the layer index is past the
  target's, ``ple_layer_ids`` name only the target's);
* each drafter layer's own int32 ``topk_indices_buffer`` ``max_num_batched_tokens x
  (indexer_budget + indexer_compress_ratio)`` (the proposer shares only a model-level one,
  ``v1/spec_decode/llm_base_proposer.py`` lines 1574-1590, which Qwen4-Exp's target has not), and
  the target's ``_mtp_hidden_buffer`` ``max_num_batched_tokens x hc x H`` in the model dtype,
  which vLLM allocates only with a drafter (``nvidia/model.py`` lines 480-495): both per batched
  token (:attr:`kvbudget.capacity.draft.DraftCost.weights_bytes_per_batched_token`).

Shared with the target, not counted: ``embed_tokens`` and ``lm_head`` (the proposer swaps in the
target's, ``llm_base_proposer.py`` lines 1466-1472, 1545-1571) and the rotary cache (``get_rope``
returns the cached instance for the same key, ``rotary_embedding/__init__.py`` lines 74-85).
Checked against vLLM's own ``Qwen4ExpMTP`` built on the meta device
(``scripts/check_vllm_qwen4_exp_weights.py``).
"""

from __future__ import annotations

from kvbudget.capacity.layouts.vllm_qwen4_mtp import qwen4_mtp_layers
from kvbudget.capacity.weights_qwen4 import (
    _cfg,
    _hyper_connection,
    _moe,
    _qsa,
    qwen4_exp_unpriced,
)
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec

__all__ = ["qwen4_exp_mtp_bytes", "qwen4_exp_mtp_bytes_per_batched_token"]


def qwen4_exp_mtp_bytes(model: ModelSpec, *, tp: int, moe_ranks: int) -> int | None:
    """One GPU's bytes of the drafter's own parameters and fixed buffers (module doc); None
    where :func:`kvbudget.capacity.weights_qwen4.qwen4_exp_unpriced` names a part or the target
    has no QSA layer to read the drafter's attention from."""
    qsa = next((x for x in model.layers if isinstance(x, FullAttention)), None)
    if qwen4_exp_unpriced(model) is not None or qsa is None:
        return None
    h, b = model.hidden_size or 0, model.dtype_bytes or 2
    hc, r = _cfg(model, "hc_count"), _cfg(model, "hc_lowrank")
    layer = (
        2 * _hyper_connection(h, hc, r) + _qsa(model, qsa, tp, b, 0) + _moe(model, tp, moe_ranks, b)
    )
    fixed = 2 * h * (h // tp) * b + (h + hc * h) * b + _hyper_connection(h, hc, r, combine=False)
    return qwen4_mtp_layers(model) * layer + fixed


def qwen4_exp_mtp_bytes_per_batched_token(model: ModelSpec) -> int:
    """The drafter layers' top-k buffers and the target's hidden buffer per batched token."""
    width = _cfg(model, "indexer_budget") + _cfg(model, "indexer_compress_ratio")
    hidden = _cfg(model, "hc_count") * (model.hidden_size or 0) * (model.dtype_bytes or 2)
    return qwen4_mtp_layers(model) * width * 4 + hidden
