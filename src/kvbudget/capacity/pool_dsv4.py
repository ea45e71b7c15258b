"""DeepSeek-V4's vLLM 0.32 KV-cache groups: the block-outermost packing of mixed page sizes.

The layer specs come from :mod:`kvbudget.capacity.layouts.vllm_dsv4`. Their page sizes differ,
so ``get_kv_cache_groups`` (``v1/core/kv_cache_utils.py`` lines 2159-2205) takes
``_get_packed_kv_cache_groups`` (lines 1860-1994; the CPU build resolves the block-outermost
``BLHNC`` layout, logged ``Using BLHNC KV cache layout``):

1. buckets: each spec joins the first bucket it is uniform with (one block size, one spec type,
   one window: ``UniformTypeKVCacheSpecs.is_uniform_type``, ``v1/kv_cache_interface.py`` lines
   1280-1293), in registration order;
2. a bucket is *balanced* when each of its page sizes has as many layers (lines 1890-1897);
   ``repeats_per_group = _approximate_gcd`` (lines 1825-1857) of the balanced buckets' layers
   per page size, at least the largest such count among balanced buckets that mix page sizes
   (lines 1902-1921); a balanced bucket splits into ``cdiv(layers per page size, repeats)``
   groups, strided over its layer pattern (lines 1968-1985), any other bucket stays whole. A
   ratio-4 layer's indexer and compressor states make such a mixed bucket; without one (ratios 1
   and 128 only) nothing repeats, so each sliding bucket is a state bucket (lines 1938-1946) and
   splits into as many groups as the widest group's page leaves it (lines 1948-1966), as vLLM
   0.32's own ``_get_packed_kv_cache_groups`` splits them
   (:func:`kvbudget.capacity.pool_packed.packed_groups`);
3. each group is a ``UniformTypeKVCacheSpecs`` whose page is the sum of its layers' pages (line
   1253); one block of the pool holds one page of EVERY group side by side, so
   ``bytes_per_block = max over groups of that sum`` (``_get_kv_cache_bytes_per_block``, lines
   1520-1551; no spec sets a ``block_stride_alignment``) and ``num_blocks = available //
   bytes_per_block`` (line 1628);
4. a max-length request takes, per group, ``max over its layers of cdiv(max_memory_usage_bytes,
   page)`` blocks (``UniformTypeKVCacheSpecs.max_memory_usage_bytes``, lines 1260-1265):
   ``cdiv(L, 256)`` in the MLA group (``FullAttentionSpec``, lines 602-608: ``tokens_per_state``
   does not change how many tokens a block spans) and ``cdiv(min(W - 1 + T_b, L), B) + 1`` in a
   sliding group (lines 859-896); ``Maximum concurrency = num_blocks / sum over groups``
   (``get_max_concurrency_for_kv_cache_config``, lines 1195-1227) and the token line is
   ``int(concurrency * L)`` (lines 2300-2308).
"""

from __future__ import annotations

from kvbudget.capacity.draft import MTP_METHODS, NO_KV_METHODS
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_dsv4 import dsv4_layer_specs
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.pool_packed import (
    PackedRequest,
    approximate_gcd,
    check_packed_request,
    packed_spec_groups,
    refuse_unmodelled_speculation,
)
from kvbudget.spec.model import ModelSpec

__all__ = [
    "approximate_gcd",
    "check_dsv4_request",
    "dsv4_bytes_per_token",
    "dsv4_groups",
]


#: the vLLM version whose DeepSeek-V4 source these rules were read from
DSV4_READ_FROM = (0, 32, 0)


def dsv4_groups(
    spec: ModelSpec, *, pp: int = 1, mtp_layers: int = 0, extra_retained_tokens: int = 0
) -> list[KvCacheGroup]:
    """DeepSeek-V4's vLLM 0.32 groups as kvbudget's :class:`KvCacheGroup` (one per vLLM group,
    ``uniform_type``: its page is the sum of its members' pages); ``mtp_layers`` MTP drafter
    layers join them, and several MTP modules' ``extra_retained_tokens`` widen every sliding
    window as kept (:func:`kvbudget.capacity.layouts.vllm_dsv4.dsv4_layer_specs`)."""
    if pp > 1:
        raise LayoutNotApplicable(
            "pp: DeepSeek-V4's packed vLLM groups are planned on one pipeline stage only; plan "
            "with --pp 1"
        )
    specs = dsv4_layer_specs(
        spec, mtp_layers=mtp_layers, extra_retained_tokens=extra_retained_tokens
    )
    return packed_spec_groups(specs)


def check_dsv4_request(request: PackedRequest, version: tuple[int, int, int]) -> None:
    """Refuse, in one line naming the field, what the DeepSeek-V4 rule does not model."""
    check_packed_request(
        request,
        version,
        read_from=DSV4_READ_FROM,
        model="deepseek_v4",
        groups_read="DeepSeek-V4's vLLM KV groups",
        refuse_speculation=_refuse_dsv4_speculation,
        unified_note=None,  # below: vLLM's own TypeError
    )
    if request.disable_hybrid_kv_cache_manager:
        raise LayoutNotApplicable(DSV4_UNIFIED_REFUSAL)


#: ``--disable-hybrid-kv-cache-manager``: ``get_kv_cache_groups`` first calls
#: ``unify_hybrid_kv_cache_specs`` (``v1/core/kv_cache_utils.py`` lines 2173-2174, 1799-1821);
#: every DeepSeek-V4 layer has a ``SlidingWindowMLASpec`` (its SWA cache) and every compressed
#: one an ``MLAAttentionSpec``, so ``_promote_local_kv_cache_specs`` (lines 1690-1762) rebuilds
#: each sliding spec as an ``MLAAttentionSpec`` with ``replace_as`` (lines 1746-1753;
#: ``v1/kv_cache_interface.py`` lines 119-138), passing its ``bounded_replay`` (line 956), which
#: ``MLAAttentionSpec`` does not take: vLLM 0.32's own code raises it on these specs
#: (``scripts/check_dsv4_vllm_mtp.py``)
DSV4_UNIFIED_REFUSAL = (
    "disable_hybrid_kv_cache_manager: vLLM 0.32 fails on DeepSeek-V4 with the hybrid manager "
    "off: unify_hybrid_kv_cache_specs rebuilds each SlidingWindowMLASpec (its sliding-window "
    "caches and compressor states) as an MLAAttentionSpec (v1/core/kv_cache_utils.py lines "
    '1746-1753, 1813), which raises "TypeError: MLAAttentionSpec.__init__() got an unexpected '
    "keyword argument 'bounded_replay'\" (v1/kv_cache_interface.py lines 119-138, 956); plan "
    "without --disable-hybrid-kv-cache-manager"
)


def _refuse_dsv4_speculation(speculative_config: str) -> None:
    refuse_unmodelled_speculation(
        speculative_config,
        model="deepseek_v4",
        modelled=MTP_METHODS.union(NO_KV_METHODS),
        note="its MTP drafter, method mtp, is; ngram and suffix add no KV",
    )


def dsv4_bytes_per_token(groups: list[KvCacheGroup], rank_layers: range | None = None) -> int:
    """Long-run bytes per token on one rank of packed groups: the MLA groups' pages over their
    blocks (DeepSeek-V4's compressed MLA; Dots3-Note's DSA latents and indexer keys; Qwen4-Exp's
    full group: QSA K/V and compressed keys); the sliding, compressor-state, ring and mamba groups
    stop growing at their windows or states. ``rank_layers``: on that stage (Qwen4-Exp's groups
    project onto it, :meth:`KvCacheGroup.page_on`)."""
    return sum(g.page_on(rank_layers) // g.block_size for g in groups if g.kind in ("mla", "full"))
