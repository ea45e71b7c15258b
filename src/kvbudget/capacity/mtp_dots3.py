"""Dots3-Note's MTP drafter in vLLM 0.32 (``--speculative-config`` method ``mtp``): its layers,
the window every sliding spec then keeps, and why its weights are not sized.

Line numbers are vLLM 0.32.0's (``site-packages/vllm/``). The layers' specs and groups are
:mod:`kvbudget.capacity.layouts.vllm_dots3` / :mod:`kvbudget.capacity.pool_dots3`'s
(``tests/unit/plan/test_plan_dots3_mtp_vllm.py`` works them by hand).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from kvbudget.capacity.draft import MTP_METHODS, draft_method, parse_speculative_config
from kvbudget.capacity.mtp_tokens import extra_retained_tokens, vllm_num_speculative_tokens
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

__all__ = [
    "DOTS3_MTP_WEIGHTS_UNPRICED",
    "Dots3Mtp",
    "dots3_extra_retained_tokens",
    "dots3_mtp",
    "dots3_mtp_layer_types",
]


#: why kvbudget does not size Dots3-Note's MTP drafter's weights
DOTS3_MTP_WEIGHTS_UNPRICED = (
    "its drafter keeps an embed_tokens of its own (Dots3NoteMTP.has_own_embed_tokens, "
    "models/dots3_note/nvidia/mtp.py lines 121-125, 158), which vLLM swaps for the target's only "
    "when the two tensors are equal (v1/spec_decode/llm_base_proposer.py lines 1436-1463), what "
    "the checkpoint's weights tell, not its config"
)


#: ``Dots3NoteConfig``'s default ``num_nextn_predict_layers`` (``configs/dots3_note.py`` line 24)
DOTS3_DEFAULT_MTP_LAYERS = 1


def dots3_mtp_layer_types(spec: ModelSpec, speculative: dict[str, Any]) -> tuple[str, ...]:
    """The MTP drafter's layer kinds for ``--speculative-config`` method ``mtp`` (``speculative``,
    parsed): vLLM 0.32 appends ``mtp_layer_types`` (default ``num_nextn_predict_layers`` x
    ``sliding_attention``) to the drafter's ``layer_types`` (``config/speculative.py`` lines
    664-678), and ``Dots3NoteMultiTokenPredictor`` builds a ``Dots3NoteDecoderLayer`` at each
    ``num_hidden_layers + k`` (``models/dots3_note/nvidia/mtp.py`` lines 103-120, 53-57), whose
    kind that list picks (``model.py`` lines 524-528): a sliding layer registers the target's
    sliding spec, a DSA layer an indexer (always, for a layer past ``num_hidden_layers``:
    ``deepseek_v2.py`` lines 1158-1168) and a padded latent."""
    raw = spec.raw_config
    n = raw.get("num_nextn_predict_layers", DOTS3_DEFAULT_MTP_LAYERS)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(
            f"speculative_config: method mtp for Dots3-Note needs num_nextn_predict_layers >= 1 "
            f"in the config (found {n!r}): vLLM builds that many MTP layers "
            "(models/dots3_note/nvidia/mtp.py lines 108-120); without them run no MTP",
            field="speculative_config",
        )
    types = raw.get("mtp_layer_types")
    if types is None:
        types = ["sliding_attention"] * n
    if not isinstance(types, list) or len(types) != n:
        got = len(types) if isinstance(types, list) else types
        raise ConfigError(
            "speculative_config: vLLM 0.32 refuses this Dots3-Note drafter: 'mtp_layer_types "
            f"must have one entry per MTP layer: got {got} for {n} layers' "
            "(config/speculative.py lines 669-673); fix mtp_layer_types in config.json",
            field="speculative_config",
        )
    return tuple(str(t) for t in types)


class Dots3Mtp(NamedTuple):
    """An MTP drafter as Dots3-Note's vLLM groups see it."""

    #: the drafter's layer kinds (:func:`dots3_mtp_layer_types`)
    layer_types: tuple[str, ...] = ()
    #: tokens every sliding spec keeps below its window (:func:`dots3_extra_retained_tokens`)
    extra_retained_tokens: int = 0


def dots3_extra_retained_tokens(spec: ModelSpec, speculative: dict[str, Any]) -> int:
    """``extra_retained_tokens`` vLLM 0.32 tags every ``SlidingWindowSpec`` with
    (``v1/core/kv_cache_utils.py`` lines 2583-2590): ``num_prefill_lookahead_tokens - 1``, where
    that is ``num_speculative_tokens`` (vLLM's default ``num_nextn_predict_layers`` only where the
    config names a ``model``: :func:`kvbudget.capacity.mtp_tokens.vllm_num_speculative_tokens`) when
    ``min(num_nextn_predict_layers, num_speculative_tokens) > 1`` (``use_multi_module_mtp``,
    ``config/speculative.py`` lines 1982-1988) and 1 otherwise
    (``config/vllm.py`` lines 644-662). Such a spec admits and keeps blocks exactly as one of
    window ``W + extra`` (``v1/kv_cache_interface.py`` lines 859-884;
    ``v1/core/single_type_kv_cache_manager.py`` line 1169), which is how kvbudget prices it."""
    n = len(dots3_mtp_layer_types(spec, speculative))
    return extra_retained_tokens(vllm_num_speculative_tokens(speculative, n, "Dots3-Note"), n)


def dots3_mtp(speculative_config: str | None, spec: ModelSpec) -> Dots3Mtp:
    """Dots3-Note's MTP drafter for this ``--speculative-config`` (no layers without one, or for
    another method)."""
    if speculative_config is None:
        return Dots3Mtp()
    config = parse_speculative_config(speculative_config)
    if draft_method(config) not in MTP_METHODS:
        return Dots3Mtp()
    return Dots3Mtp(dots3_mtp_layer_types(spec, config), dots3_extra_retained_tokens(spec, config))
