"""Qwen4-Exp's vLLM 0.32 KV-cache groups: the block-outermost packing of its mixed pages.

The specs come from :mod:`kvbudget.capacity.layouts.vllm_qwen4`. The QSA state backend declares
the block-outermost layouts only (``models/qwen4_exp/common/qsa_cache.py`` lines 753-756; the
other backends declare none, ``v1/attention/backends/utils.py`` lines 208-244), so
``get_kv_cache_groups`` (``v1/core/kv_cache_utils.py`` lines 2159-2211) takes
``_get_packed_kv_cache_groups`` (lines 1860-1994):

1. buckets (``UniformTypeKVCacheSpecs.is_uniform_type``, ``v1/kv_cache_interface.py`` lines
   1281-1295): the GDN states; the PLE states (``tp_replicated``, lines 1096-1107); the QSA rings
   (``CircularBufferSpec``, lines 932-937); the QSA layers' K/V with their compressed keys
   (``FullAttentionSpec`` and ``MLAAttentionSpec`` of one block size: one full-attention bucket,
   balanced, one of each per layer);
2. ``repeats = _approximate_gcd`` of the balanced buckets' layer counts, at least the attention
   bucket's (lines 1825-1857, 1903-1925): the attention bucket stays one group;
3. a state bucket splits into ``max(cdiv(n, repeats), cdiv(n, anchor // state_page))`` strided
   groups, ``anchor`` being the attention group's page (lines 1927-1985);
4. one block holds one page of every group side by side: ``bytes_per_block`` = the widest
   group's summed page (lines 1520-1551), ``num_blocks = available // bytes_per_block`` (line
   1627); a max-length request needs ``cdiv(L, B)`` attention blocks and one block per state
   group (two per mamba group with ``--mamba-cache-mode align``: ``MambaSpec``
   ``max_memory_usage_bytes``, lines 1076-1082; ``CircularBufferSpec``, lines 923-926); the
   "Maximum concurrency" is ``num_blocks`` over their sum (lines 1195-1227).
"""

from __future__ import annotations

from kvbudget.capacity.draft import draft_method, parse_speculative_config
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_qwen4 import Qwen4Spec, qwen4_layer_specs
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode, VllmKind
from kvbudget.capacity.pool_dsv4 import approximate_gcd
from kvbudget.capacity.pool_packed import (
    PackedRequest,
    check_packed_request,
    packed_kv_group,
    refuse_unmodelled_speculation,
)
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "check_qwen4_request",
    "packed_qwen4_groups",
    "qwen4_groups",
    "refuse_qwen4_speculation",
]

#: the vLLM version whose Qwen4-Exp source these rules were read from
QWEN4_READ_FROM = (0, 32, 0)

_KIND: dict[str, VllmKind] = {"gdn": "mamba", "ple": "mamba", "ring": "ring"}


def packed_qwen4_groups(specs: list[Qwen4Spec]) -> list[list[Qwen4Spec]]:
    """``_get_packed_kv_cache_groups`` on Qwen4-Exp's specs: the member specs of each group."""
    buckets: dict[str, list[Qwen4Spec]] = {}
    for spec in specs:
        buckets.setdefault(spec.bucket, []).append(spec)
    info = []
    for members in buckets.values():
        per_page: dict[int, list[Qwen4Spec]] = {}
        for spec in members:
            per_page.setdefault(spec.page_size_bytes, []).append(spec)
        balanced = len({len(v) for v in per_page.values()}) == 1
        most = max(len(v) for v in per_page.values())
        info.append((members, per_page, balanced, most))
    floor = max((most for _, pages, bal, most in info if bal and len(pages) > 1), default=0)
    repeats = approximate_gcd([most for *_, bal, most in info if bal], floor) if floor else None

    def num_groups_for(balanced: bool, most: int) -> int:
        return cdiv(most, repeats) if balanced and repeats is not None else 1

    def widest(per_page: dict[int, list[Qwen4Spec]], n: int) -> int:
        return sum(cdiv(len(names), n) * page for page, names in per_page.items())

    anchor = max(
        widest(per_page, len(members) if members[0].is_state else num_groups_for(bal, most))
        for members, per_page, bal, most in info
    )
    groups: list[list[Qwen4Spec]] = []
    for members, per_page, balanced, most in info:
        n = num_groups_for(balanced, most)
        if members[0].is_state:
            per_block = max(anchor // members[0].page_size_bytes, 1)
            n = max(n, cdiv(len(members), per_block))
        if n == 1:
            groups.append(members)
            continue
        pattern = list(zip(*per_page.values(), strict=True))
        groups.extend([s for repeat in pattern[i::n] for s in repeat] for i in range(n))
    return groups


def qwen4_groups(
    spec: ModelSpec,
    *,
    kv_dtype: str,
    tp: int = 1,
    block_size: int | None = None,
    pp: int = 1,
    mamba_cache_mode: MambaCacheMode = "none",
    mamba_state_bytes: int | None = None,
    mamba_ssm_state_bytes: int | None = None,
) -> list[KvCacheGroup]:
    """Qwen4-Exp's vLLM 0.32 groups as kvbudget's :class:`KvCacheGroup` (one per vLLM group,
    ``uniform_type``: its page is the sum of its members' pages)."""
    if pp > 1:
        raise LayoutNotApplicable(
            "pp: Qwen4-Exp's packed vLLM groups are planned by kvbudget on one pipeline stage "
            "only (vLLM 0.32 itself refuses pipeline_parallel_size > 1 when ple_layer_ids is set, "
            "model_executor/models/config.py lines 941-947); plan with --pp 1"
        )
    _block, specs = qwen4_layer_specs(
        spec,
        kv_dtype=kv_dtype,
        tp=tp,
        block_size=block_size,
        mamba_state_bytes=mamba_state_bytes,
        mamba_ssm_state_bytes=mamba_ssm_state_bytes,
    )
    out: list[KvCacheGroup] = []
    for members in packed_qwen4_groups(specs):
        kind = _KIND.get(members[0].role, "full")
        out.append(packed_kv_group(len(out), members, kind=kind, mamba_cache_mode=mamba_cache_mode))
    return out


def check_qwen4_request(request: PackedRequest, version: tuple[int, int, int]) -> None:
    """Refuse, in one line naming the field, what the Qwen4-Exp rule does not model."""
    check_packed_request(
        request,
        version,
        read_from=QWEN4_READ_FROM,
        model="Qwen4-Exp",
        groups_read="its vLLM KV groups",
        refuse_speculation=refuse_qwen4_speculation,
        unified_note="its QSA rings and states are not full attention",
    )


#: the proposers vLLM 0.32 takes for Qwen4-Exp (``model_executor/models/config.py`` lines 950-959)
QWEN4_SPEC_METHODS = frozenset({"mtp", "ngram", "ngram_gpu"})


def refuse_qwen4_speculation(speculative_config: str) -> None:
    """``--speculative-config`` with Qwen4-Exp, in one line: vLLM 0.32 refuses every proposer but
    its MTP and n-gram ones; those widen the QSA ring and the GDN / PLE states, not modelled."""
    method = draft_method(parse_speculative_config(speculative_config)) or "unknown"
    if method not in QWEN4_SPEC_METHODS:
        raise LayoutNotApplicable(
            f"speculative_config: method {method!r} with Qwen4-Exp; vLLM 0.32 raises 'Qwen4Exp "
            "speculative decoding supports only its native MTP checkpoint and linear n-gram "
            "proposers' (model_executor/models/config.py lines 950-959); use mtp or ngram, or "
            "plan without it"
        )
    refuse_unmodelled_speculation(
        speculative_config,
        model="Qwen4-Exp",
        modelled=(),
        note="num_speculative_tokens widens its QSA ring, models/qwen4_exp/common/qsa_cache.py "
        "lines 850-851, and its GDN/PLE conv states and mamba blocks",
    )
