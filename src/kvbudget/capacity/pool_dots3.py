"""Dots3-Note's vLLM 0.32 KV-cache groups: the block-outermost packing of its mixed pages.

The layer specs come from :mod:`kvbudget.capacity.layouts.vllm_dots3`: sliding-window MLA pages,
DSA latent pages padded to the sliding rows and the DSA indexer's key pages. Their page sizes
differ and the layers are not all of one type, so ``get_kv_cache_groups``
(``v1/core/kv_cache_utils.py`` lines 2159-2211) takes ``_get_packed_kv_cache_groups`` (lines
1860-1994; every backend resolves to the block-outermost ``BLHNC`` layout, the DSA and indexer
backends declaring nothing else: ``models/dots3_note/nvidia/attention.py`` lines 696-701,
``v1/attention/backends/utils.py`` lines 209-244):

1. buckets (``UniformTypeKVCacheSpecs.is_uniform_type``): the DSA latents and indexer keys are
   ``MLAAttentionSpec`` (one full-attention bucket, balanced: one indexer per DSA layer), the
   sliding layers ``SlidingWindowMLASpec`` of one window (a second bucket of one page size);
2. ``repeats = _approximate_gcd([n_dsa, n_sliding], lower_bound=n_dsa)`` (lines 1825-1857,
   1903-1925): the DSA bucket stays one group, the sliding bucket splits into
   ``cdiv(n_sliding, repeats)`` strided groups (lines 1961-1985);
3. one block holds one page of every group side by side: ``bytes_per_block`` = the widest group's
   summed page, rounded up to the lcm of every layer's block-stride alignment (lines 1520-1551),
   ``num_blocks = available // bytes_per_block`` (line 1627);
4. per max-length request: ``cdiv(L, B)`` blocks in the DSA group, ``cdiv(min(W - 1 + T_b, L), B)
   + 1`` in each sliding group (``v1/kv_cache_interface.py`` lines 859-896, 1260-1265);
   ``Maximum concurrency = num_blocks / sum`` and the token line ``int(concurrency x L)``, as for
   every 0.32 pool (``kvbudget.capacity.pool``).

An MTP drafter's layers (``--speculative-config`` method ``mtp``) register after the target's and
join these buckets (``dots3_groups(mtp_layer_types=...)``); ``--disable-hybrid-kv-cache-manager``
is vLLM's ``TypeError`` where sliding and DSA layers mix (:func:`check_dots3_unified`).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.capacity.draft import MTP_METHODS, NO_KV_METHODS
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_dots3 import (
    DSA_KV_REFUSAL,
    dots3_block_alignment,
    dots3_layer_specs,
)
from kvbudget.capacity.pool_packed import (
    PackedRequest,
    check_packed_request,
    packed_spec_groups,
    refuse_unmodelled_speculation,
)
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.spec.model import ModelSpec

__all__ = ["check_dots3_device", "check_dots3_request", "check_dots3_unified", "dots3_groups"]

#: the vLLM version whose Dots3-Note source these rules were read from
DOTS3_READ_FROM = (0, 32, 0)


def dots3_groups(
    spec: ModelSpec,
    *,
    kv_dtype: str,
    block_size: int | None,
    pp: int = 1,
    mtp_layer_types: Sequence[str] = (),
    extra_retained_tokens: int = 0,
) -> list[KvCacheGroup]:
    """Dots3-Note's vLLM 0.32 groups as kvbudget's :class:`KvCacheGroup` (one per vLLM group,
    ``uniform_type``: its page is the sum of its members' pages); every group carries the
    model's block-stride alignment, which :func:`kvbudget.capacity.pool.bytes_per_block` applies.
    ``mtp_layer_types``: the MTP drafter's layers, whose specs join the target's buckets
    (:func:`kvbudget.capacity.mtp_dots3.dots3_mtp_layer_types`), and its
    ``extra_retained_tokens`` widen every sliding window as kept (``dots3_layer_specs``)."""
    if pp > 1:
        raise LayoutNotApplicable(
            "pp: Dots3-Note's packed vLLM groups are planned on one pipeline stage only; plan "
            "with --pp 1"
        )
    specs = dots3_layer_specs(
        spec,
        kv_dtype=kv_dtype,
        block_size=block_size,
        mtp_layer_types=mtp_layer_types,
        extra_retained_tokens=extra_retained_tokens,
    )
    return packed_spec_groups(specs, block_stride_alignment=dots3_block_alignment(specs))


def check_dots3_request(request: PackedRequest, version: tuple[int, int, int]) -> None:
    """Refuse, in one line naming the field, what the Dots3-Note rule does not model."""
    check_packed_request(
        request,
        version,
        read_from=DOTS3_READ_FROM,
        model="Dots3-Note",
        groups_read="its vLLM KV groups",
        refuse_speculation=_refuse_dots3_speculation,
        unified_note=None,  # check_dots3_unified
    )


def check_dots3_unified(spec: ModelSpec, mtp_layer_types: Sequence[str] = ()) -> None:
    """``--disable-hybrid-kv-cache-manager``: ``get_kv_cache_groups`` first calls
    ``unify_hybrid_kv_cache_specs`` (``v1/core/kv_cache_utils.py`` lines 2173-2174, 1799-1821),
    whose ``_promote_local_kv_cache_specs`` (lines 1690-1762) rebuilds every
    ``SlidingWindowMLASpec`` as an ``MLAAttentionSpec`` with ``replace_as`` (lines 1746-1753;
    ``v1/kv_cache_interface.py`` lines 119-138), passing its ``bounded_replay`` field (line 956),
    which ``MLAAttentionSpec`` does not have: vLLM 0.32 raises a ``TypeError`` at startup when
    sliding layers (the target's or an MTP drafter's) and DSA layers are both there (only then
    does it promote, lines 1705-1737), refused here with its words. Otherwise the specs are
    already one uniform type, left as they are (lines 1700-1703): the same one group as with the
    manager on (``scripts/check_dots3_vllm_groups.py`` runs both)."""
    types = spec.raw_config.get("layer_types")
    kinds = {*(types if isinstance(types, list) else []), *mtp_layer_types}
    if "sliding_attention" in kinds and kinds - {"sliding_attention"}:
        raise LayoutNotApplicable(
            "disable_hybrid_kv_cache_manager: vLLM 0.32 fails on Dots3-Note's sliding layers "
            "with the hybrid manager off: unify_hybrid_kv_cache_specs rebuilds each "
            "SlidingWindowMLASpec as an MLAAttentionSpec (v1/core/kv_cache_utils.py lines "
            '1746-1753, 1813), which raises "TypeError: MLAAttentionSpec.__init__() got an '
            "unexpected keyword argument 'bounded_replay'\" (v1/kv_cache_interface.py lines "
            "119-138, 956); plan without --disable-hybrid-kv-cache-manager"
        )


def _refuse_dots3_speculation(speculative_config: str) -> None:
    refuse_unmodelled_speculation(
        speculative_config,
        model="Dots3-Note",
        modelled=MTP_METHODS.union(NO_KV_METHODS),
        note="its MTP drafter, method mtp, is; ngram and suffix add no KV",
    )


def check_dots3_device(compute_capability_major: int | None, *, has_dsa: bool = True) -> None:
    """On compute capability 12 vLLM 0.32 picks FLASHINFER_MLA_SPARSE_SM120 for the DSA layers'
    inner attention (``platforms/cuda.py`` lines 132-136), which turns ``auto`` into
    ``fp8_ds_mla`` for the whole cache config (``mla_attention.py`` lines 358-375, 522-528)
    before Dots3-Note swaps in its own backend, whose impl then raises
    (:data:`~kvbudget.capacity.layouts.vllm_dots3.DSA_KV_REFUSAL`): refused in vLLM's words.
    ``has_dsa``: whether any layer (the target's or an MTP drafter's) is a DSA layer; without one
    no sparse backend is picked and the cache stays in the model dtype."""
    if compute_capability_major == 12 and has_dsa:
        raise LayoutNotApplicable(
            "gpu: compute capability 12 for Dots3-Note: vLLM 0.32 does not serve its DSA layers "
            "there; the sparse MLA backend it picks on that GPU (FLASHINFER_MLA_SPARSE_SM120, "
            "platforms/cuda.py lines 132-136) turns --kv-cache-dtype auto into fp8_ds_mla "
            "(model_executor/layers/attention/mla_attention.py lines 358-375, 522-528), and "
            f"Dots3-Note's own DSA impl then raises {DSA_KV_REFUSAL}; plan for the compute "
            "capability 9 GPUs its DSA backend declares (flashattn_mla_sparse.py lines 77-78), "
            "or measure"
        )
