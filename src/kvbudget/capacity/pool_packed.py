"""What vLLM 0.32's packed-group models (DeepSeek-V4, Dots3-Note, Qwen4-Exp) share in kvbudget's
pool: the request check before any group is built, and one packed group as a
:class:`~kvbudget.capacity.pool_types.KvCacheGroup` (``uniform_type``: its page is the sum of its
members' pages, ``UniformTypeKVCacheSpecs``, ``v1/kv_cache_interface.py`` line 1253).

The family modules (``pool_dsv4``, ``pool_dots3``, ``pool_qwen4``) say what differs: the model's
name in the messages, its speculative rule and why the hybrid manager cannot be turned off.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Protocol

from kvbudget.capacity.draft import draft_method, parse_speculative_config
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode, VllmKind, VllmLayerSpec
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.spec.layer_indices import LayerIndices

__all__ = [
    "PackedRequest",
    "check_packed_request",
    "packed_kv_group",
    "refuse_unmodelled_speculation",
]


class PackedRequest(Protocol):
    """What :func:`check_packed_request` reads of a ``PlanRequest`` (the pool does not import the
    plan's types, which look engines up in the registry)."""

    @property
    def speculative_config(self) -> str | None: ...

    @property
    def disable_hybrid_kv_cache_manager(self) -> bool: ...


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
