"""DeepSeek-V4.1's vLLM 0.32 KV-cache groups: the block-outermost packing of its mixed pages.

The specs come from :mod:`kvbudget.capacity.layouts.vllm_dsv41`. Their pages differ, so
``get_kv_cache_groups`` (``v1/core/kv_cache_utils.py`` lines 2159-2205) takes
``_get_packed_kv_cache_groups`` (lines 1860-1994; the DeepSeek-V4 indexer backend declares the
block-outermost layouts only, ``v1/attention/backends/mla/indexer.py`` lines 345-348):

1. buckets (``UniformTypeKVCacheSpecs.is_uniform_type``): the compressed and indexer-key caches
   (``MLAAttentionSpec``, block 64), the sliding windows (block 32, one window), the compressor
   rings (``CircularBufferSpec``, block 8), in registration order;
2. a bucket is balanced when each of its pages has as many layers; ``repeats =
   _approximate_gcd`` of the balanced buckets' counts, at least the largest count among balanced
   buckets that mix pages (lines 1890-1925); none such: no repeats;
3. a state bucket (the rings; the sliding windows when there are no repeats, lines 1934-1941)
   splits into ``max(cdiv(n, repeats) or 1, cdiv(n, max(anchor // page, 1)))`` strided groups,
   ``anchor`` the widest group any bucket would give (lines 1943-1966); a balanced bucket into
   ``cdiv(most, repeats)``, any other stays whole (lines 1968-1985);
4. one block of the pool holds one page of every group: ``bytes_per_block`` is the widest group's
   summed page (lines 1520-1551), ``num_blocks = available // bytes_per_block``; a max-length
   request takes ``cdiv(L, 64)`` MLA blocks, ``cdiv(min(W - 1 + T_b, L), 32) + 1`` per sliding
   group and one per ring group (lines 859-896, 923-930); the "Maximum concurrency" is
   ``num_blocks`` over their sum (lines 1195-1227).
"""

from __future__ import annotations

from typing import Protocol

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_dsv41 import DSV41_BLOCK_SIZE, dsv41_layer_specs
from kvbudget.capacity.pool_packed import (
    PackedRequest,
    check_packed_request,
    packed_spec_groups,
    refuse_unmodelled_speculation,
)
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.spec.model import ModelSpec

__all__ = [
    "check_dsv41_device",
    "check_dsv41_request",
    "dsv41_groups",
]


def dsv41_groups(spec: ModelSpec, *, pp: int = 1) -> list[KvCacheGroup]:
    """DeepSeek-V4.1's vLLM 0.32 groups as kvbudget's :class:`KvCacheGroup` (one per vLLM group,
    ``uniform_type``: its page the sum of its members' pages)."""
    if pp > 1:
        raise LayoutNotApplicable(
            "pp: DeepSeek-V4.1's packed vLLM groups are planned on one pipeline stage only (vLLM "
            "0.32 refuses a stage boundary inside a kv-sharing group: 'PP splits inside a v4.1 "
            "kv-sharing group are not supported.', models/deepseek_v41/attention.py lines "
            "596-601); plan with --pp 1"
        )
    specs = dsv41_layer_specs(spec)
    # one page size (no compressed layer: every layer's window alone) is not packed (lines
    # 1876-1879): the plain grouping takes the uniform specs as one group
    return packed_spec_groups(specs)


class Dsv41Request(PackedRequest, Protocol):
    """What :func:`check_dsv41_request` reads of a ``PlanRequest``."""

    @property
    def block_size(self) -> int | None: ...

    @property
    def kv_cache_memory_bytes(self) -> int | None: ...


class Dsv41Device(Protocol):
    """What :func:`check_dsv41_device` reads of a ``GpuSpec``."""

    @property
    def id(self) -> str: ...

    @property
    def vendor(self) -> str: ...

    @property
    def compute_capability_major(self) -> int | None: ...


#: the vLLM version whose DeepSeek-V4.1 source these rules were read from
DSV41_READ_FROM = (0, 32, 0)


def check_dsv41_request(request: Dsv41Request, version: tuple[int, int, int]) -> None:
    """Refuse, in one line naming the field, what the DeepSeek-V4.1 rule does not model."""
    check_packed_request(
        request,
        version,
        read_from=DSV41_READ_FROM,
        model="deepseek_v41",
        groups_read="DeepSeek-V4.1's vLLM KV groups",
        refuse_speculation=_refuse_dsv41_speculation,
        unified_note="vLLM 0.32 would unify its sliding, compressed and ring specs",
    )
    if request.block_size not in (None, DSV41_BLOCK_SIZE):
        raise LayoutNotApplicable(
            f"block_size: {request.block_size} for deepseek_v41: only vLLM's own choice on a Hopper "
            f"GPU, {DSV41_BLOCK_SIZE} (the FlashMLA sparse and V4.1 indexer kernel block, "
            "models/deepseek_v41/sparse_mla.py line 90, v1/attention/backends/mla/indexer.py "
            "line 372), is modelled; plan without --block-size"
        )
    if request.kv_cache_memory_bytes is None:
        raise LayoutNotApplicable(
            "kv_cache_memory: DeepSeek-V4.1's non-KV memory in vLLM 0.32 (its weights with the "
            "Engram tables, rotary caches, top-k and candidate-block buffers; models/deepseek_v41/"
            "nvidia/model.py) is not priced by kvbudget; pass --kv-cache-memory from vLLM's log "
            "('Available KV cache memory') to plan its KV pool"
        )


def check_dsv41_device(gpu: Dsv41Device, device_given: bool) -> None:
    """Refuse a device other than a Hopper (SM90) GPU: vLLM 0.32 writes another record there (the
    V4.1 MXFP8 record of 528 bytes in 512-byte pages and kernel block 128 on SM100,
    ``attention.py`` lines 122-129, 512-522, ``sparse_mla.py`` line 90; FlashInfer's plain rows
    on SM120; AITER on ROCm), which kvbudget does not model. Without a device (``--kv-cache-memory``
    alone) the Hopper layout is planned, as the vLLM note says."""
    if not device_given:
        return
    major = gpu.compute_capability_major
    if gpu.vendor != "nvidia" or major != 9:
        raise LayoutNotApplicable(
            f"gpu: {gpu.id} for deepseek_v41: only a Hopper GPU (compute capability 9.x) is "
            "modelled; vLLM 0.32 lays DeepSeek-V4.1 out otherwise on SM100 (528-byte MXFP8 rows, "
            "block 128: models/deepseek_v41/attention.py lines 122-129, 512-522; sparse_mla.py "
            "line 90) and other devices; plan with --gpu H100 / H200, or measure"
        )


def _refuse_dsv41_speculation(speculative_config: str) -> None:
    refuse_unmodelled_speculation(
        speculative_config,
        model="deepseek_v41",
        modelled=frozenset(),
        note="its compressor rings grow with num_speculative_tokens, models/deepseek_v41/"
        "compressor.py lines 151-153, and its MTP and DSpark drafters are not read",
    )
