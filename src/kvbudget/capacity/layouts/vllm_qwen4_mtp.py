"""vLLM 0.32's Qwen4-Exp MTP drafter (``--speculative-config`` method ``mtp``): its layers' cache
specs, which join the target's.

Facts, vLLM 0.32.0 (``site-packages/vllm/``):

* ``config/speculative.py`` lines 845-865: a ``qwen4_exp`` / ``qwen4_exp_text`` checkpoint's
  drafter is ``Qwen4ExpMTP`` with ``n_predict = mtp_num_hidden_layers`` (else
  ``num_nextn_predict_layers``); ``num_speculative_tokens`` defaults to ``n_predict`` where the
  speculative config names a ``model`` (else it must be set, lines 1819-1824) and, when larger,
  must be a multiple of it (lines 1489-1501: "num_speculative_tokens:S must be divisible by
  n_predict=N").
* ``models/qwen4_exp/nvidia/mtp.py`` lines 189-230: ``getattr(config, "mtp_num_hidden_layers",
  1)`` ``Qwen4ExpDecoderLayer`` s, ``layer_type="qwen_sparse_attention"``, at layer index
  ``num_hidden_layers + k``, built with the target's text config and ``cache_config``
  (``_make_draft_vllm_config`` lines 126-169 swaps the model config only): each is a QSA layer
  (``nvidia/model.py`` lines 242-260: ``indexer_n_heads`` is set) that registers the target QSA
  layer's three specs, the K/V ``FullAttentionSpec``, the indexer's raw-key ring and its
  compressed keys, at the target's block size; the ring is sized by the same
  ``vllm_config.num_speculative_tokens`` (``common/qsa_cache.py`` lines 844-862). A drafter
  layer would have a PLE state only where ``ple_layer_ids`` named ``num_hidden_layers + k + 1``
  (``model.py`` lines 217-231), which kvbudget's config reader already refuses (ids past the
  target's layers).
* The ring keeps M-RoPE positions where the draft model config ``uses_mrope``
  (``indexer_qsa.py`` line 168): ``Qwen4ExpMTPConfig`` (``model_executor/models/config.py``
  lines 970-978, run when the draft ``VllmConfig`` is built, ``config/vllm.py`` lines 1443,
  2629-2659) strips it unless the checkpoint has a ``vision_config``. Where that differs from the
  target's ring (:func:`kvbudget.capacity.layouts.vllm_qwen4.ring_width`) the rings would have two
  widths: refused, not modelled.
* The drafter's layers register after every target layer; ``_get_packed_kv_cache_groups``
  groups them with the target's (``v1/core/kv_cache_utils.py`` lines 1860-1994), and
  ``_annotate_eagle_groups`` (lines 1987-1992, 2029-2085) only flags the group holding the last
  layer for prefix-cache block drops: no bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.mtp_tokens import vllm_num_speculative_tokens
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

if TYPE_CHECKING:  # the layout imports this module
    from kvbudget.capacity.layouts.vllm_qwen4 import Qwen4Spec

__all__ = ["qwen4_mtp_layers", "qwen4_mtp_specs", "qwen4_mtp_speculative_tokens"]

#: ``Qwen4ExpMultiTokenPredictor``'s default layer count (``nvidia/mtp.py`` line 190)
DEFAULT_MTP_LAYERS = 1


def _positive(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutNotApplicable(
            f"speculative_config: {field} {value!r} in the Qwen4-Exp config; vLLM 0.32 builds "
            "that many MTP layers (models/qwen4_exp/nvidia/mtp.py line 190); set a positive "
            "integer, or plan without method mtp"
        )
    return value


def qwen4_mtp_layers(spec: ModelSpec) -> int:
    """How many drafter layers vLLM 0.32 builds: ``mtp_num_hidden_layers``, 1 without it."""
    raw = spec.raw_config
    return _positive("mtp_num_hidden_layers", raw.get("mtp_num_hidden_layers", DEFAULT_MTP_LAYERS))


def qwen4_mtp_speculative_tokens(spec: ModelSpec, speculative: dict[str, Any]) -> int:
    """``num_speculative_tokens`` as vLLM 0.32 resolves it for the Qwen4-Exp drafter, whose draft
    config's ``n_predict`` is ``mtp_num_hidden_layers`` / ``num_nextn_predict_layers``
    (``config/speculative.py`` lines 845-865): vLLM's one rule,
    :func:`kvbudget.capacity.mtp_tokens.vllm_num_speculative_tokens`, its refusals raised as
    this layout's."""
    raw = spec.raw_config
    n_predict = raw.get("mtp_num_hidden_layers", raw.get("num_nextn_predict_layers"))
    if n_predict is not None and (isinstance(n_predict, bool) or not isinstance(n_predict, int)):
        _positive("mtp_num_hidden_layers", n_predict)  # refuses it
    try:
        return vllm_num_speculative_tokens(speculative, n_predict, "Qwen4-Exp")
    except ConfigError as error:
        raise LayoutNotApplicable(str(error)) from error


def _draft_keeps_mrope(spec: ModelSpec) -> bool:
    rope = spec.raw_config.get("rope_parameters") or spec.raw_config.get("rope_scaling")
    return bool(spec.wrapper_config) and isinstance(rope, dict) and "mrope_section" in rope


def qwen4_mtp_specs(
    spec: ModelSpec, target: Sequence[Qwen4Spec], mtp_layers: int, ring_row_bytes: int
) -> list[Qwen4Spec]:
    """The drafter's specs, after the target's: per drafter layer a copy of the target QSA layer's
    ring, compressed keys and K/V (module doc). ``ring_row_bytes``: a drafter ring row's bytes,
    refused where it differs from the target's."""
    if not mtp_layers:
        return []
    first = next(s.layer_index for s in target if s.role == "attention")
    qsa = [s for s in target if s.layer_index == first and s.role not in ("gdn", "ple")]
    ring = next(s for s in qsa if s.role == "ring")
    if ring.page_size_bytes != ring.block_size * ring_row_bytes:
        raise LayoutNotApplicable(
            "speculative_config: method mtp with Qwen4-Exp whose drafter and target rings differ "
            "in M-RoPE positions (the drafter keeps them only with a vision_config, "
            "model_executor/models/config.py lines 970-978; the target by its architecture, "
            "lines 894-967): not modelled; plan without method mtp, or measure"
        )
    return [replace(s, layer_index=spec.num_layers + k) for k in range(mtp_layers) for s in qsa]


def ring_row_bytes(spec: ModelSpec, index_head_dim: int, ring_bytes: int) -> int:
    """A drafter ring row's bytes: the key, plus three int64 M-RoPE positions where the draft
    model keeps M-RoPE (module doc; ``qsa_cache.py`` lines 814-829)."""
    width = cdiv(index_head_dim, 4) * 4 + 12 if _draft_keeps_mrope(spec) else index_head_dim
    return width * ring_bytes
