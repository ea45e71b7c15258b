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
   ``max_memory_usage_bytes``, lines 1076-1082; ``CircularBufferSpec``, lines 923-926), plus
   ``num_speculative_tokens`` per mamba group with any proposer (``num_speculative_blocks``);
   the "Maximum concurrency" is ``num_blocks`` over their sum (lines 1195-1227).
5. ``--pp`` > 1 (no ``ple_layer_ids``): the whole model's groups, each projected onto a stage's
   layers (``get_kv_cache_configs`` lines 2566-2603, ``_project_kv_cache_groups_to_worker``
   lines 2486-2528); every worker allocates the smallest stage's block count (lines 2662-2678)
   and the scheduler counts every group's blocks per request (lines 2276-2297).
"""

from __future__ import annotations

from kvbudget.capacity.draft import MTP_METHODS, draft_method, parse_speculative_config
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_qwen4 import qwen4_layer_specs
from kvbudget.capacity.layouts.vllm_qwen4_mtp import qwen4_mtp_speculative_tokens
from kvbudget.capacity.layouts.vllm_specs import MambaCacheMode, VllmKind
from kvbudget.capacity.mtp_tokens import vllm_num_speculative_tokens
from kvbudget.capacity.pool_packed import (
    PackedRequest,
    check_packed_request,
    packed_groups,
    packed_kv_group,
)
from kvbudget.capacity.pool_types import KvCacheGroup
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

__all__ = [
    "check_qwen4_request",
    "qwen4_groups",
    "qwen4_method",
    "qwen4_speculative_tokens",
    "refuse_qwen4_speculation",
]

#: the vLLM version whose Qwen4-Exp source these rules were read from
QWEN4_READ_FROM = (0, 32, 0)

_KIND: dict[str, VllmKind] = {"gdn": "mamba", "ple": "mamba", "ring": "ring"}


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
    num_speculative_tokens: int = 0,
    mtp_layers: int = 0,
    indexer_kv_dtype: str = "auto",
) -> list[KvCacheGroup]:
    """Qwen4-Exp's vLLM 0.32 groups as kvbudget's :class:`KvCacheGroup` (one per vLLM group,
    ``uniform_type``: its page is the sum of its members' pages); ``mtp_layers`` MTP drafter
    layers join them (:mod:`kvbudget.capacity.layouts.vllm_qwen4_mtp`)."""
    if pp > 1 and spec.raw_config.get("ple_layer_ids"):
        raise LayoutNotApplicable(
            "pp: Qwen4-Exp with ple_layer_ids; vLLM 0.32 raises 'Qwen4Exp N-gram PLE embedding "
            "requires pipeline_parallel_size=1 because non-first pipeline ranks do not receive "
            "the raw input_ids it needs' (model_executor/models/config.py lines 941-946; "
            "models/qwen4_exp/nvidia/model_state.py lines 35-41); plan with --pp 1"
        )
    _block, specs = qwen4_layer_specs(
        spec,
        kv_dtype=kv_dtype,
        tp=tp,
        block_size=block_size,
        mamba_state_bytes=mamba_state_bytes,
        mamba_ssm_state_bytes=mamba_ssm_state_bytes,
        num_speculative_tokens=num_speculative_tokens,
        mtp_layers=mtp_layers,
        indexer_kv_dtype=indexer_kv_dtype,
    )
    out: list[KvCacheGroup] = []
    for members in packed_groups(specs) or [specs]:
        kind = _KIND.get(members[0].role, "full")
        group = packed_kv_group(
            len(out),
            members,
            kind=kind,
            mamba_cache_mode=mamba_cache_mode,
            num_speculative_blocks=members[0].num_speculative_blocks,
            per_stage=True,
        )
        out.append(group)
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


#: the proposers vLLM 0.32 takes for Qwen4-Exp (``model_executor/models/config.py`` lines 950-959),
#: after an ``MTPModelTypes`` name is renamed ``mtp`` (``config/speculative.py`` lines 1141-1145)
QWEN4_SPEC_METHODS = frozenset({"mtp", "ngram", "ngram_gpu"})
#: the n-gram proposers: no drafter layers, only their ``num_speculative_tokens`` widen the
#: target's own specs (``vllm_qwen4.qwen4_layer_specs``); ``ngram_gpu`` registers no KV layer
#: either (its ``NgramGPUKernel`` runs in a ``VllmConfig`` of its own,
#: ``v1/spec_decode/ngram_proposer_gpu.py`` lines 240-258), so its pool is ``ngram``'s
NGRAM_METHODS = ("ngram", "ngram_gpu")


def qwen4_method(speculative_config: str) -> str:
    """The proposer as vLLM 0.32 names it once renamed (an MTP model type is ``mtp``)."""
    method = draft_method(parse_speculative_config(speculative_config)) or "unknown"
    return "mtp" if method in MTP_METHODS else method


def refuse_qwen4_speculation(speculative_config: str) -> None:
    """``--speculative-config`` with Qwen4-Exp, in one line: vLLM 0.32 refuses every proposer but
    its MTP and n-gram ones (all three priced: the n-gram ones widen the target's specs, the MTP
    drafter adds its QSA layers, :mod:`kvbudget.capacity.layouts.vllm_qwen4_mtp`)."""
    method = qwen4_method(speculative_config)
    if method not in QWEN4_SPEC_METHODS:
        raise LayoutNotApplicable(
            f"speculative_config: method {method!r} with Qwen4-Exp; vLLM 0.32 raises 'Qwen4Exp "
            "speculative decoding supports only its native MTP checkpoint and linear n-gram "
            "proposers' (model_executor/models/config.py lines 950-959); use mtp or ngram, or "
            "plan without it"
        )
    if method in NGRAM_METHODS:
        qwen4_speculative_tokens(speculative_config)


def qwen4_speculative_tokens(speculative_config: str | None, spec: ModelSpec | None = None) -> int:
    """``num_speculative_tokens`` of a ``--speculative-config`` (0 without one): vLLM 0.32 sizes
    Qwen4-Exp's ring and states by ``vllm_config.num_speculative_tokens`` (``config/vllm.py``
    lines 601-606). An n-gram proposer must set it; the MTP drafter's may default to its n_predict
    (:func:`kvbudget.capacity.layouts.vllm_qwen4_mtp.qwen4_mtp_speculative_tokens`, which needs
    ``spec``)."""
    if speculative_config is None:
        return 0
    config = parse_speculative_config(speculative_config)
    if qwen4_method(speculative_config) == "mtp" and spec is not None:
        return qwen4_mtp_speculative_tokens(spec, config)
    try:  # an n-gram proposer has no draft config: vLLM requires the count (mtp_tokens)
        return vllm_num_speculative_tokens(config, None, "Qwen4-Exp")
    except ConfigError as error:
        raise LayoutNotApplicable(str(error)) from error
