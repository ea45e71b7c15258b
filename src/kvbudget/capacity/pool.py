"""vLLM (V1) KV-cache pool: from available bytes to groups, blocks, log lines and the fit check.

Follows the engine's own arithmetic as paraphrased in ``engines-kv-accounting.md``:

* grouping (``get_kv_cache_groups``, §2.1): one group when all layer specs are equal; otherwise
  pages are unified (smaller pages get a larger block size), layers are bucketed by spec,
  ``group_size = min(#layers per type)`` (newest: ``max`` when ``max < 1.5*min``), and each type
  is split into ``cdiv(n, group_size)`` groups (strided newest, contiguous ~v0.9); missing slots
  are padding layers;
* ``num_blocks = avail // page // group_size`` per worker, min over workers (§2.2); block 0 is
  the null block, so ``num_blocks - 1`` blocks are allocatable;
* "Maximum concurrency" (§2.3) and "GPU KV cache size: N tokens" as each version prints them (§2.4);
* the "one max-length request must fit" check and its error text (§2.5). Under pipeline parallel
  the check counts every layer of the model against one worker's memory, as the engine log in
  issue vllm#34076 shows (48 layers, "24.0 GiB ... needed", estimated length 34736).

Layers come in as the layout's specs (:class:`~kvbudget.capacity.layouts.vllm_specs.VllmLayerSpec`,
which own their page arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from math import lcm

from kvbudget.capacity import pool_runs
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode, VllmLayerSpec
from kvbudget.capacity.pool_text import DOCS_LINK, fit_error_text, format_gib_new, log_lines
from kvbudget.capacity.pool_types import KvCacheGroup as KvCacheGroup
from kvbudget.capacity.versions import VllmBehaviour
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_parts import PartRuns
from kvbudget.spec.layer_runs import IndexedRuns
from kvbudget.units import cdiv


def distinct_layers(layers: Sequence[VllmLayerSpec]) -> list[VllmLayerSpec]:
    """The distinct layers, index set to 0, as first seen (per run for runs)."""
    items = layers.distinct() if isinstance(layers, IndexedRuns | PartRuns) else layers
    return list(dict.fromkeys(replace(layer, layer_index=0) for layer in items))


def _buckets(
    layers: Sequence[VllmLayerSpec], key: dict[VllmLayerSpec, tuple[object, ...]]
) -> dict[tuple[object, ...], list[pool_runs.Segment]]:
    """Layers by spec key, each as segments in index order ("none" layers left out); a
    parallel hybrid run's attention and mamba parts (:class:`PartRuns`) fall in different
    buckets, both with the run's indices."""
    buckets: dict[tuple[object, ...], list[pool_runs.Segment]] = {}
    if isinstance(layers, IndexedRuns):
        layers = PartRuns.single(layers)
    if not isinstance(layers, PartRuns):  # listed: one segment per layer, by layer index
        for layer in sorted(layers, key=lambda item: item.layer_index):
            if layer.holds_cache:
                segment = pool_runs.Segment(layer.layer_index, 1, (0,), 1)
                buckets.setdefault(key[replace(layer, layer_index=0)], []).append(segment)
        return buckets
    runs = layers
    for block in runs.blocks:
        period = len(block.pattern)
        lo = runs.base + block.start
        by_key: dict[tuple[object, ...], list[int]] = {}
        for offset, parts in enumerate(block.pattern):
            for layer in parts:
                if layer.holds_cache:
                    by_key.setdefault(key[replace(layer, layer_index=0)], []).append(offset)
        for spec_key, offsets in by_key.items():
            segment = pool_runs.Segment(lo, period, tuple(offsets), block.repeats)
            buckets.setdefault(spec_key, []).append(segment)
    return buckets


def group_layers(layers: Sequence[VllmLayerSpec], *, strided: bool = True) -> list[KvCacheGroup]:
    """vLLM ``get_kv_cache_groups`` for the layers of the whole model (§2.1), run by run."""
    distinct = [x for x in distinct_layers(layers) if x.holds_cache]
    if not distinct:
        return []
    keys = {layer.spec_key() for layer in distinct}
    if len(keys) == 1:
        only = {layer: layer.spec_key() for layer in distinct}
        ranges = [r for bucket in _buckets(layers, only).values() for r in _all(bucket)]
        indices = LayerIndices(ranges)
        return [_make_group(0, replace(distinct[0], layer_index=indices[0]), indices, 0)]
    kinds = {layer.kind for layer in distinct}
    if (
        len(kinds) == 1
        and len({layer.block_size for layer in distinct}) == 1
        and kinds <= {"full", "mla"}
    ):
        return [_uniform_type_group(layers, distinct)]
    max_page = max(layer.page_size_bytes for layer in distinct)
    unified: dict[VllmLayerSpec, VllmLayerSpec] = {}
    for layer in distinct:
        unified[layer] = layer.unified_to(max_page)
    buckets = _buckets(layers, {layer: out.spec_key() for layer, out in unified.items()})
    proto = {out.spec_key(): out for out in unified.values()}
    sizes = [pool_runs.bucket_size(bucket) for bucket in buckets.values()]
    group_size = min(sizes)
    if strided and max(sizes) < 1.5 * min(sizes):
        group_size = max(sizes)
    groups: list[KvCacheGroup] = []
    for spec_key, bucket in buckets.items():
        size = pool_runs.bucket_size(bucket)
        num_groups = cdiv(size, group_size)
        for i in range(num_groups):
            if strided:
                members = LayerIndices(pool_runs.select(bucket, i, num_groups))
            else:
                members = LayerIndices(
                    pool_runs.window(bucket, i * group_size, (i + 1) * group_size)
                )
            pad = group_size - len(members)
            first = replace(proto[spec_key], layer_index=members[0])
            groups.append(_make_group(len(groups), first, members, pad))
    return groups


def _uniform_type_group(
    layers: Sequence[VllmLayerSpec], distinct: list[VllmLayerSpec]
) -> KvCacheGroup:
    """vLLM 0.32 ``UniformTypeKVCacheSpecs`` (``v1/kv_cache_interface.py`` lines 1225-1265;
    ``get_kv_cache_groups``, ``v1/core/kv_cache_utils.py`` lines 2189-2193): full-attention (or
    MLA) layers of one block size but different pages form ONE group whose page is the sum of
    every layer's page (``page_size_bytes``: ``sum(spec.page_size_bytes ...)``), so
    ``num_blocks = available // that sum`` (``_get_kv_cache_bytes_per_block``) and a request
    needs ``cdiv(L, B)`` of those blocks. Here that group counts as one layer of the summed page
    (:attr:`KvCacheGroup.uniform_type`), its ``layer_indices`` listing every member."""
    keys = {layer: layer.spec_key() for layer in distinct}
    buckets = _buckets(layers, keys)
    by_key = {key: layer for layer, key in keys.items()}
    total_page = sum(
        by_key[key].page_size_bytes * pool_runs.bucket_size(bucket)
        for key, bucket in buckets.items()
    )
    ranges = sorted((r for bucket in buckets.values() for r in _all(bucket)), key=lambda r: r.start)
    indices = LayerIndices(ranges)
    proto = replace(distinct[0], layer_index=indices[0], page_size_bytes=total_page)
    return replace(_make_group(0, proto, indices, 0), uniform_type=True)


def _all(bucket: list[pool_runs.Segment]) -> list[range]:
    return pool_runs.window(bucket, 0, pool_runs.bucket_size(bucket))


def _make_group(
    group_id: int, proto: VllmLayerSpec, indices: LayerIndices, pad: int
) -> KvCacheGroup:
    return KvCacheGroup(group_id, proto, indices, pad)


def group_size_on(
    groups: Sequence[KvCacheGroup], rank_layers: range | set[int] | None = None
) -> int:
    """``max(len(g.layer_names))`` of the groups projected onto one worker's layers
    (``rank_layers`` a ``range`` of layer indices: counted per range, never per layer)."""
    if not groups:
        return 0
    if any(g.uniform_type for g in groups):
        first = min(g.layer_indices[0] for g in groups)
        last = max(g.layer_indices[len(g.layer_indices) - 1] for g in groups)
        projectable = all(g.layer_page_bytes for g in groups)
        if rank_layers is not None and not projectable and not {first, last} <= set(rank_layers):
            raise ConfigError(
                "pp: a model whose layers form one vLLM UniformType group with different pages "
                "(an MLA latent plus sparse-indexer keys) is planned on one pipeline stage only; "
                "plan with --pp 1",
                field="pp",
            )
        return 1
    if rank_layers is None:
        return max(g.num_layers for g in groups)
    if isinstance(rank_layers, range) and rank_layers.step == 1:
        lo, hi = rank_layers.start, rank_layers.stop
        return max(len(LayerIndices.of(g.layer_indices).split(lo, hi)) for g in groups)
    return max(sum(1 for i in g.layer_indices if i in rank_layers) for g in groups)


def bytes_per_block(
    groups: Sequence[KvCacheGroup], rank_layers: range | set[int] | None = None
) -> int:
    """Bytes one block takes on one worker: ``page * group_size``; with UniformType groups (each
    page the sum of its layers' pages) the widest group's page, as vLLM 0.32
    ``_get_kv_cache_bytes_per_block`` packs every group's page into each block
    (``v1/core/kv_cache_utils.py`` lines 1520-1551; DeepSeek-V4's several packed groups), rounded
    up to the lcm of the groups' block-stride alignments (lines 1541-1551; Dots3-Note); on a
    pipeline stage each group projected onto its layers there (:meth:`KvCacheGroup.page_on`)."""
    size = group_size_on(groups, rank_layers)
    if not groups or size == 0:
        return 0
    if any(g.uniform_type for g in groups):
        align = lcm(*(g.block_stride_alignment for g in groups))
        return cdiv(max(g.page_on(rank_layers) for g in groups), align) * align
    return groups[0].page_size_bytes * size


def num_blocks_for(
    available_bytes: int,
    groups: Sequence[KvCacheGroup],
    rank_layers: range | set[int] | None = None,
) -> int:
    """``max(0, available // page // group_size)`` on one worker (§2.2); 1 when attention-free."""
    if not groups:
        return 1
    size = group_size_on(groups, rank_layers)
    if size == 0:
        return 1
    if any(g.uniform_type for g in groups):
        return max(0, int(available_bytes // bytes_per_block(groups, rank_layers)))
    page = groups[0].page_size_bytes
    return max(0, int(available_bytes // page // size))


def needed_bytes(
    groups: Sequence[KvCacheGroup],
    max_model_len: int,
    max_num_batched_tokens: int,
    mamba_cache_mode: MambaCacheMode = "none",
    *,
    per_layer: bool = False,
    rank_layers: range | None = None,
) -> int:
    """Bytes one max-length request needs (§2.5): ``group_size * page * Σ_g cdiv(max_mem_g, page)``.

    ``per_layer=True`` is the ~v0.9 sum over real layers (``Σ_layers max_mem``), which leaves
    padding layers out; the two agree when no group is padded. ``rank_layers``: on one stage,
    its block the groups projected onto its layers (:func:`bytes_per_block`).
    """
    if not groups:
        return 0
    if per_layer:
        return sum(
            g.num_layers
            * g.spec.max_memory_usage_bytes(max_model_len, max_num_batched_tokens, mamba_cache_mode)
            for g in groups
        )
    blocks = sum(
        g.max_blocks_per_request(max_model_len, max_num_batched_tokens, mamba_cache_mode)
        for g in groups
    )
    return bytes_per_block(groups, rank_layers) * blocks


def estimate_max_model_len(
    available_bytes: int,
    groups: Sequence[KvCacheGroup],
    max_model_len: int,
    max_num_batched_tokens: int,
    mamba_cache_mode: MambaCacheMode = "none",
    *,
    per_layer: bool = False,
    rank_layers: range | None = None,
) -> int:
    """Largest length in ``[1, max_model_len]`` whose need fits (binary search, as the engine); 0 if none."""
    lo, hi, best = 1, max_model_len, 0
    while lo <= hi:
        mid = (lo + hi) // 2
        need = needed_bytes(
            groups,
            mid,
            max_num_batched_tokens,
            mamba_cache_mode,
            per_layer=per_layer,
            rank_layers=rank_layers,
        )
        if need <= available_bytes:
            best, lo = mid, mid + 1
        else:
            hi = mid - 1
    return best


def max_concurrency(
    behaviour: VllmBehaviour,
    num_blocks: int,
    groups: Sequence[KvCacheGroup],
    max_model_len: int,
    max_num_batched_tokens: int,
    mamba_cache_mode: MambaCacheMode = "none",
) -> float:
    """ "Maximum concurrency for L tokens per request" as this version computes it (§2.3)."""
    if not groups:
        return 0.0
    block = min(g.block_size for g in groups)
    if behaviour.concurrency == "tokens_over_len":
        return num_blocks * block / max_model_len
    per_group = [
        g.max_blocks_per_request(max_model_len, max_num_batched_tokens, mamba_cache_mode)
        for g in groups
    ]
    if behaviour.concurrency == "sum_cdiv":
        return num_blocks / sum(per_group)
    page = groups[0].page_size_bytes
    total_mem = sum(
        g.spec.max_memory_usage_bytes(max_model_len, max_num_batched_tokens, mamba_cache_mode)
        for g in groups
    )
    return num_blocks / cdiv(total_mem, page)


def kv_cache_tokens(
    behaviour: VllmBehaviour,
    num_blocks: int,
    groups: Sequence[KvCacheGroup],
    concurrency: float,
    max_model_len: int,
) -> int:
    """The N of "GPU KV cache size: N tokens" as this version logs it (§2.4).

    For versions that print no token line (V0, v0.7.0-0.7.2) this is ``num_blocks * block_size``.
    """
    if not groups:
        return 0
    block = min(g.block_size for g in groups)
    if behaviour.token_line == "blocks_per_group":
        return num_blocks // len(groups) * block
    if behaviour.token_line == "concurrency_x_len":
        return int(concurrency * max_model_len)
    return num_blocks * block


__all__ = [
    "DOCS_LINK",
    "KvCacheGroup",
    "MambaCacheMode",
    "bytes_per_block",
    "distinct_layers",
    "estimate_max_model_len",
    "fit_error_text",
    "format_gib_new",
    "group_layers",
    "group_size_on",
    "kv_cache_tokens",
    "log_lines",
    "max_concurrency",
    "needed_bytes",
    "num_blocks_for",
]
