"""What vLLM 0.32's packed-group models (DeepSeek-V4, Dots3-Note, Qwen4-Exp, DeepSeek-V4.1) share
in kvbudget's pool: the request check before any group is built, vLLM's
``_get_packed_kv_cache_groups`` on their specs (:func:`packed_groups`), and one packed group as a
:class:`~kvbudget.capacity.pool_types.KvCacheGroup` (``uniform_type``: its page is the sum of its
members' pages, ``UniformTypeKVCacheSpecs``, ``v1/kv_cache_interface.py`` line 1253).

The family modules (``pool_dsv4``, ``pool_dots3``, ``pool_qwen4``, ``pool_dsv41``) say what
differs: the model's name in the messages, its speculative rule and why the hybrid manager cannot
be turned off; their spec classes say which vLLM spec type each spec is (:class:`PackingSpec`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from typing import Protocol, TypeVar

from kvbudget.capacity.draft import draft_method, parse_speculative_config
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_specs import (
    MambaCacheMode,
    PackedSpec,
    VllmKind,
    VllmLayerSpec,
)
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.units import cdiv

__all__ = [
    "PackedRequest",
    "PackingSpec",
    "approximate_gcd",
    "check_packed_request",
    "packed_groups",
    "packed_kv_group",
    "packed_spec_groups",
    "refuse_unmodelled_speculation",
]


class PackedRequest(Protocol):
    """What :func:`check_packed_request` reads of a ``PlanRequest`` (the pool does not import the
    plan's types, which look engines up in the registry)."""

    @property
    def speculative_config(self) -> str | None: ...

    @property
    def disable_hybrid_kv_cache_manager(self) -> bool: ...


class PackingSpec(Protocol):
    """What :func:`packed_groups` reads of a layer's cache spec (``PackedSpec``, ``Qwen4Spec``)."""

    @property
    def page_size_bytes(self) -> int: ...

    @property
    def bucket_key(self) -> Hashable:
        """Equal exactly for the specs ``UniformTypeKVCacheSpecs.is_uniform_type`` puts in one
        bucket (``v1/kv_cache_interface.py`` lines 1282-1295): one spec type, one block size,
        one window."""
        ...

    @property
    def is_state(self) -> bool:
        """A ``MambaSpec`` or ``CircularBufferSpec``: always a state bucket (line 1942)."""
        ...

    @property
    def is_sliding(self) -> bool:
        """A ``SlidingWindowSpec`` (``SlidingWindowMLASpec`` too): a state bucket when nothing
        repeats (lines 1944-1946)."""
        ...


S = TypeVar("S", bound=PackingSpec)


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """vLLM ``_approximate_gcd`` (``v1/core/kv_cache_utils.py`` lines 1825-1857): the chunk in
    ``[lower_bound, max(values)]`` with the least upward padding, ties to the larger."""
    low = max(1, lower_bound)
    if low > max(values):
        return low
    best, best_pad = low, -1
    for d in range(low, max(values) + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad < 0 or pad <= best_pad:
            best, best_pad = d, pad
    return best


def packed_groups(specs: Sequence[S]) -> list[list[S]] | None:
    """vLLM ``_get_packed_kv_cache_groups`` (``v1/core/kv_cache_utils.py`` lines 1860-1994) on
    these specs, in vLLM's registration order: the member specs of each group, in vLLM's group
    order; None where vLLM returns None, one page size (lines 1876-1879; the packed models
    declare block-outermost layouts only). The drafter annotation (lines 1987-1993) changes no
    group."""
    if len({s.page_size_bytes for s in specs}) <= 1:
        return None
    # lines 1880-1889: each spec joins the first bucket it is uniform with
    buckets: dict[Hashable, list[S]] = {}
    for spec in specs:
        buckets.setdefault(spec.bucket_key, []).append(spec)
    # lines 1891-1900: a bucket's layers per page size; balanced: as many of each
    bucketed: list[tuple[list[S], dict[int, list[S]], bool]] = []
    for bucket in buckets.values():
        page_size_layers: dict[int, list[S]] = {}
        for spec in bucket:
            page_size_layers.setdefault(spec.page_size_bytes, []).append(spec)
        balanced = len({len(v) for v in page_size_layers.values()}) == 1
        bucketed.append((bucket, page_size_layers, balanced))

    # lines 1903-1925 (``get_max_layers_per_page_size``, ``v1/kv_cache_interface.py`` lines
    # 1308-1313: the most layers sharing one page size)
    def most(page_size_layers: dict[int, list[S]]) -> int:
        return max(len(v) for v in page_size_layers.values())

    min_repeats_per_group = max(
        (most(p) for _, p, balanced in bucketed if balanced and len(p) > 1), default=0
    )
    repeats_per_group = (
        approximate_gcd([most(p) for _, p, balanced in bucketed if balanced], min_repeats_per_group)
        if min_repeats_per_group
        else None
    )

    def num_groups_for(
        page_size_layers: dict[int, list[S]], balanced: bool
    ) -> int:  # lines 1927-1930
        if balanced and repeats_per_group is not None:
            return cdiv(most(page_size_layers), repeats_per_group)
        return 1

    def widest_group_bytes(page_size_layers: dict[int, list[S]], n: int) -> int:  # lines 1932-1936
        return sum(cdiv(len(v), n) * page for page, v in page_size_layers.items())

    def is_state_bucket(bucket: list[S]) -> bool:  # lines 1938-1946
        return bucket[0].is_state or (repeats_per_group is None and bucket[0].is_sliding)

    anchor_bytes = max(  # lines 1948-1959
        (
            widest_group_bytes(p, len(b) if is_state_bucket(b) else num_groups_for(p, balanced))
            for b, p, balanced in bucketed
        ),
        default=0,
    )
    groups: list[list[S]] = []
    for bucket, page_size_layers, balanced in bucketed:  # lines 1961-1985
        num_groups = num_groups_for(page_size_layers, balanced)
        if anchor_bytes and is_state_bucket(bucket):
            states_per_block = max(anchor_bytes // bucket[0].page_size_bytes, 1)
            num_groups = max(num_groups, cdiv(len(bucket), states_per_block))
        if num_groups == 1:
            groups.append(bucket)
            continue
        repeats = min(len(v) for v in page_size_layers.values())  # zip's pattern repeats
        if not balanced or num_groups > repeats:
            # vLLM's unchecked ``zip`` (line 1975) drops the unmatched layers, or an empty group
            # fails ``UniformTypeKVCacheSpecs.from_specs`` (lines 1982-1983); no model kvbudget
            # reads here builds such a state bucket
            raise LayoutNotApplicable(
                f"layers: vLLM 0.32 cannot split a state bucket of {len(bucket)} specs, pages "
                f"{sorted(page_size_layers)} B in {repeats} pattern repeats, into {num_groups} "
                "groups (v1/core/kv_cache_utils.py lines 1961-1985: it drops layers or fails); "
                "not modelled, measure"
            )
        pattern_repeats = list(zip(*page_size_layers.values(), strict=True))
        groups.extend(
            [s for repeat in pattern_repeats[i::num_groups] for s in repeat]
            for i in range(num_groups)
        )
    return groups


class PackedMember(Protocol):
    """What :func:`packed_kv_group` reads of a member spec (``PackedSpec``, ``Qwen4Spec``)."""

    @property
    def layer_index(self) -> int: ...

    @property
    def block_size(self) -> int: ...

    @property
    def page_size_bytes(self) -> int: ...


def check_packed_request(
    request: PackedRequest,
    version: tuple[int, int, int],
    *,
    read_from: tuple[int, int, int],
    model: str,
    groups_read: str,
    refuse_speculation: Callable[[str], None],
    unified_note: str | None,
) -> None:
    """Refuse, in one line naming the field, what a packed-group rule does not model: a vLLM
    older than ``read_from`` (``groups_read``: whose groups kvbudget read from that source), any
    ``--speculative-config`` that ``refuse_speculation`` refuses, and the hybrid manager turned
    off (``unified_note``: why that pool is not modelled; None: the family rules on it)."""
    if version < read_from:
        read = ".".join(map(str, read_from))
        raise LayoutNotApplicable(
            f"engine_version: {'.'.join(map(str, version))} for {model}: kvbudget read "
            f"{groups_read} from {read}'s source only; pass --engine-version {read}"
        )
    if request.speculative_config is not None:
        refuse_speculation(request.speculative_config)
    if request.disable_hybrid_kv_cache_manager and unified_note is not None:
        raise LayoutNotApplicable(
            f"disable_hybrid_kv_cache_manager: not modelled for {model} ({unified_note}); plan "
            "without it, or measure"
        )


def refuse_unmodelled_speculation(
    speculative_config: str, *, model: str, modelled: Collection[str], note: str
) -> None:
    """Refuse, in one line, a ``--speculative-config`` whose method is not in ``modelled`` (the
    drafters kvbudget prices for ``model``, the methods that add no KV); ``note`` says why."""
    method = draft_method(parse_speculative_config(speculative_config))
    if method not in modelled:
        raise LayoutNotApplicable(
            f"speculative_config: method {method or 'unknown'!r} with {model} is not modelled in "
            f"the vllm layout ({note}); plan without it, or measure"
        )


def packed_kv_group(
    group_id: int,
    members: Sequence[PackedMember],
    *,
    kind: VllmKind,
    sliding_window: int | None = None,
    mamba_cache_mode: MambaCacheMode = "none",
    block_stride_alignment: int = 1,
    num_speculative_blocks: int = 0,
    per_stage: bool = False,
) -> KvCacheGroup:
    """One packed vLLM group of these member specs as kvbudget's group: its layers the members'
    (sorted, once each), its spec the first member's block size with the summed page.
    ``per_stage``: the group projects onto pipeline stages (``KvCacheGroup.layer_page_bytes``,
    set where every member layer adds the same page)."""
    indices = LayerIndices.of(sorted({s.layer_index for s in members}))
    spec = VllmLayerSpec(
        layer_index=indices[0],
        kind=kind,
        block_size=members[0].block_size,
        page_size_bytes=sum(s.page_size_bytes for s in members),
        sliding_window=sliding_window,
        mamba_cache_mode=mamba_cache_mode,
        block_stride_alignment=block_stride_alignment,
        num_speculative_blocks=num_speculative_blocks,
    )
    per_layer: dict[int, int] = {}
    for s in members:
        per_layer[s.layer_index] = per_layer.get(s.layer_index, 0) + s.page_size_bytes
    pages = set(per_layer.values())
    layer_page = pages.pop() if per_stage and len(pages) == 1 else 0
    return KvCacheGroup(group_id, spec, indices, uniform_type=True, layer_page_bytes=layer_page)


def packed_spec_groups(
    specs: Sequence[PackedSpec], *, block_stride_alignment: int = 1
) -> list[KvCacheGroup]:
    """The groups of a DeepSeek-V4, Dots3-Note or DeepSeek-V4.1 model's specs: vLLM's packed
    groups (:func:`packed_groups`), or one page size (vLLM does not pack it) all specs as one
    uniform group; each group keeps its first member's kind and window."""
    out: list[KvCacheGroup] = []
    for members in packed_groups(specs) or [list(specs)]:
        first = members[0]
        out.append(
            packed_kv_group(
                len(out),
                members,
                kind=first.kind,
                sliding_window=first.sliding_window,
                block_stride_alignment=block_stride_alignment,
            )
        )
    return out
