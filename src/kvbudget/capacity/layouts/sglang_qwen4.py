"""SGLang 0.5.23's pools for Qwen4-Exp: QSA layers' K/V and compressed index keys per token, GDN
states per request slot, and the per-request buffers SGLang allocates beside its budget.

Read from the sglang 0.5.23 wheel (paths under ``sglang/srt/``):

* Served as ``Qwen4ExpForConditionalGeneration`` only (``models/qwen4_exp.py`` line 2694,
  ``EntryClass``); any other architecture falls to the Transformers backend
  (``models/registry.py`` lines 77-90), whose pools these rules are not.
* The QSA profile (``layers/attention/qsa/config.py`` lines 40-75): ``indexer_kv_heads`` must be 1
  (line 51), ``indexer_compress_ratio`` at least 2 (line 55), ``indexer_budget`` a multiple of it
  (line 59) whose quotient is 512 or 2048 (lines 19, 64: ``fast_topk_v2``).
* Pages of 64 tokens whatever ``--page-size`` says (``arg_groups/model_overrides/qwen4_exp.py``
  lines 89-96); ``QSATokenToKVPool`` needs the page a multiple of the ratio
  (``mem_cache/qsa_kv_pool.py`` lines 99-106).
* Per token (``DefaultPoolConfigurator``, ``model_executor/pool_configurator.py`` lines 225-236,
  491-537): on each QSA (``full_attention_layer_ids``) layer of the stage, K and V of
  ``get_num_kv_heads(tp)`` heads, ``max(1, kv // tp)`` (line 492), plus the compressed index key
  ``index_k_bytes // ratio`` with ``index_k_bytes = 1 x indexer_head_dim x 2`` (bf16; ``auto``
  ``--qsa-indexer-dtype``; ``qsa_kv_pool.py`` lines 27-42, 59-73), not split by TP;
  ``max_total_num_tokens = rest // cell`` floored to the page (lines 637-647).
* Per request slot, budgeted (``mem_cache/kv_cache_configurator.py`` lines 3229-3409): the GDN
  states of ``Qwen3NextConfig.mamba2_cache_params`` (``configs/qwen3_next.py`` lines 288-313;
  ``configs/mamba_utils.py`` lines 194-243): conv ``[conv_dim / tp, kernel - 1]`` in bfloat16,
  temporal ``[v_heads / tp, v_dim, k_dim]`` in float32 (``mamba2_state_dtype``, lines 46-105);
  ``max_mamba_cache_size = int((rest x r / (1 + r) - per_req) // per_req)``, ``r`` 0.9, and
  ``size + 1`` slots come off ``rest`` before the token pool.
* Beside the budget (allocated after it, out of the ``1 - mem_fraction_static`` share): per mamba
  slot (``size + 1``) the PLE short-conv states ``[hidden x hc_count, (ple_conv_kernel_size - 1)
  x ngram_size]`` bf16 on each local ``ple_layer_ids`` layer and ``ngram_size - 1`` int64 of
  n-gram context (``mem_cache/ple_state_pool.py`` lines 73-77, 177-182; ``configs/qwen4_exp.py``
  lines 96-116; ``kv_cache_configurator.py`` lines 1612-1633); per request row
  (``max_running_requests + 1``, ``memory_pool.py`` lines 395-405) the QSA pending ring: ``ratio``
  bf16 index keys per QSA layer and ``ratio x 3`` int64 M-RoPE positions (``qsa_kv_pool.py``
  lines 171-205).
* Default radix strategy: 64-token pages and the overlap schedule make it ``extra_buffer``
  (``arg_groups/overrides.py`` lines 403-413, 453-486), so a running request takes 3 + 2 state
  slots (``kv_cache_configurator.py`` lines 227, 3062-3088; ``allocation_sizing.py`` lines 11-19).
* Multimodal (``configs/model_config.py`` lines 820-828, 2441 unless ``language_model_only``):
  ``SGLANG_VLM_CACHE_SIZE_MB`` 100 MiB comes off the budget first (``kv_cache_configurator.py``
  lines 202-219, 3036-3040; ``environ.py`` line 1598).
"""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import (
    GroupBytes,
    LayoutNotApplicable,
    LayoutResult,
    StageBytes,
    check_load,
    get_pp_indices,
    heads_per_rank,
)
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import MiB

__all__ = [
    "QWEN4_PAGE_SIZE",
    "QWEN4_SGLANG_ARCH",
    "QWEN4_STATE_SLOTS_PER_REQUEST",
    "SglangQwen4",
    "check_qwen4_pp",
    "is_sglang_qwen4",
    "qwen4_ssm_bytes",
    "sglang_qwen4",
    "sglang_qwen4_layout",
]

#: the one architecture SGLang 0.5.23 serves Qwen4-Exp as (``models/qwen4_exp.py`` line 2694)
QWEN4_SGLANG_ARCH = "Qwen4ExpForConditionalGeneration"
#: ``overrides["page_size"] = 64`` for compressed QSA (``model_overrides/qwen4_exp.py`` line 92)
QWEN4_PAGE_SIZE = 64
#: ``_COMPRESSED_BLOCK_TOPK`` (``layers/attention/qsa/config.py`` line 19)
QSA_BLOCK_TOPK = frozenset({512, 2048})
#: bf16: the compressed keys with ``--qsa-indexer-dtype auto`` and the pending ring always
#: (``qsa_kv_pool.py`` lines 37-42, 56)
QSA_INDEX_BYTES = 2
#: the ring's M-RoPE positions: ``(ring_slots, 3)`` int64 (``qsa_kv_pool.py`` lines 202-204)
QSA_ROPE_POSITION_BYTES = 3 * 8
#: n-gram context: ``torch.long`` (``ple_state_pool.py`` lines 177-182)
NGRAM_CONTEXT_BYTES = 8
#: SGLang's conv-state dtype (bfloat16, ``configs/mamba_utils.py`` line 65), also the PLE
#: short-conv states' (``cache_params.dtype.conv``, ``memory_pool.py`` line 1474)
CONV_STATE_BYTES = 2
#: 3 (``MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO``, ``kv_cache_configurator.py`` line 227) +
#: 2 tracking slots of the ``extra_buffer`` strategy with the overlap schedule
QWEN4_STATE_SLOTS_PER_REQUEST = 5
#: ``SGLANG_VLM_CACHE_SIZE_MB`` (``environ.py`` line 1598)
QWEN4_VLM_CACHE_BYTES = 100 * MiB
#: Qwen4ExpTextConfig's defaults (``configs/qwen4_exp.py`` lines 24-32)
DEFAULT_HC_COUNT = 4
DEFAULT_PLE_CONV_KERNEL = 4
DEFAULT_NGRAM_SIZE = 3


def is_sglang_qwen4(spec: ModelSpec) -> bool:
    """Qwen4-Exp with its QSA indexer (the rule of ``capacity.layouts.vllm_qwen4``)."""
    return is_qwen4_exp(spec)


def _refuse(text: str) -> LayoutNotApplicable:
    return LayoutNotApplicable(text)


def _int(raw: dict[str, object], key: str, default: int | None = None) -> int:
    value = raw.get(key, default)
    if value is None:
        value = default
    if isinstance(value, bool) or not isinstance(value, int):
        raise _refuse(
            f"{key}: {value!r} for Qwen4-Exp; SGLang 0.5.23 raises 'QSA config is missing required "
            "fields' / reads int(config.{key}) (layers/attention/qsa/config.py lines 40-44)"
        )
    return value


@dataclass(frozen=True, slots=True)
class SglangQwen4:
    """What SGLang sizes Qwen4-Exp's pools from, on one TP rank."""

    kv_dtype: KvDtype
    full_layers: LayerIndices
    gdn_layers: LayerIndices
    ple_layers: LayerIndices
    #: K and V of one token of one QSA layer on one rank
    kv_bytes: int
    #: the compressed index key per token of one QSA layer: ``index_k_bytes // ratio``
    index_bytes: int
    ratio: int
    index_head_dim: int
    #: one GDN layer's conv and temporal elements on one rank
    gdn_conv_elements: int
    gdn_ssm_elements: int
    #: one PLE layer's short-conv elements (never split by TP)
    ple_elements: int
    ngram_context: int
    multimodal: bool

    def counts(self, start: int, end: int) -> tuple[int, int, int]:
        """QSA, GDN and PLE layers in ``[start, end)``."""
        return (
            len(self.full_layers.split(start, end)),
            len(self.gdn_layers.split(start, end)),
            len(self.ple_layers.split(start, end)),
        )

    def cell(self, start: int, end: int) -> int:
        """Bytes per token of layers ``[start, end)`` on one rank (K/V + compressed keys)."""
        return self.counts(start, end)[0] * (self.kv_bytes + self.index_bytes)

    def kv_cell(self, start: int, end: int) -> int:
        """K and V alone (the full pool's ``KV Cache is allocated`` line)."""
        return self.counts(start, end)[0] * self.kv_bytes

    def gdn_layer_bytes(self, ssm_bytes: int) -> int:
        """One GDN layer's state on one rank: conv bf16, temporal ``ssm_bytes``."""
        return self.gdn_conv_elements * CONV_STATE_BYTES + self.gdn_ssm_elements * ssm_bytes

    def state_per_request(self, ssm_bytes: int, stage_layers: int | None = None) -> int:
        """``mamba_cache_per_req`` (every GDN layer), or ``stage_layers`` layers' share."""
        n = len(self.gdn_layers) if stage_layers is None else stage_layers
        return self.gdn_layer_bytes(ssm_bytes) * n

    def ple_slot_bytes(self, start: int, end: int) -> int:
        """One mamba slot's PLE short-conv states and n-gram context on layers ``[start, end)``
        (none without a local PLE layer: ``kv_cache_configurator.py`` lines 1617-1631)."""
        n_ple = self.counts(start, end)[2]
        if not n_ple:
            return 0
        return n_ple * self.ple_elements * CONV_STATE_BYTES + self.ngram_context * (
            NGRAM_CONTEXT_BYTES
        )

    def ring_row_bytes(self, start: int, end: int) -> int:
        """One request row's QSA pending ring on layers ``[start, end)``: ``ratio`` bf16 keys per
        QSA layer plus ``ratio`` M-RoPE position triples (allocated on every stage)."""
        n_full = self.counts(start, end)[0]
        per_layer = self.ratio * self.index_head_dim * QSA_INDEX_BYTES
        return n_full * per_layer + self.ratio * QSA_ROPE_POSITION_BYTES


def qwen4_ssm_bytes(spec: ModelSpec, requested: str = "auto") -> tuple[str, int]:
    """The temporal-state dtype: ``--mamba-ssm-dtype`` (SGLang's env override, highest), else the
    config's ``mamba_ssm_dtype``, else float32 (``configs/mamba_utils.py`` lines 46-105)."""
    sizes = {"float32": 4, "bfloat16": 2, "float16": 2}
    key = requested.strip().lower()
    if key == "auto":
        key = str(spec.raw_config.get("mamba_ssm_dtype") or "float32")
    key = {"float": "float32", "half": "float16"}.get(key, key)
    if key not in sizes:
        raise ConfigError(
            f"mamba_ssm_cache_dtype: {requested!r} is not one of SGLang's --mamba-ssm-dtype "
            "values (float32, bfloat16, float16) or auto",
            field="mamba_ssm_cache_dtype",
        )
    return key, sizes[key]


def sglang_qwen4_dtype(kv_dtype: str, model_dtype: str | None) -> KvDtype:
    """The K/V dtype: 16-bit or fp8; SGLang's FP4 / MXFP8 recipes are not modelled here."""
    dtype = get_kv_dtype(kv_dtype, engine="sglang", model_dtype=model_dtype)
    if dtype.nvfp4 or dtype.row_scale_bytes or dtype.block_elems != 1:
        raise ConfigError(
            f"kv_dtype: {dtype.name} for Qwen4-Exp in SGLang is not modelled (its FP4 / MXFP8 "
            "pools size by a quant method, model_executor/pool_configurator.py lines 501-530); "
            "pass --kv-cache-dtype auto, bfloat16 or fp8_e4m3",
            field="kv_dtype",
        )
    return dtype


def sglang_qwen4(spec: ModelSpec, kv_dtype: str, *, tp: int = 1) -> SglangQwen4:
    """Qwen4-Exp's SGLang geometry; what SGLang 0.5.23 refuses is refused in one line, its words."""
    if spec.architecture != QWEN4_SGLANG_ARCH:
        raise _refuse(
            f"architecture: {spec.architecture!r}: SGLang 0.5.23 serves Qwen4-Exp as "
            f"{QWEN4_SGLANG_ARCH} only (models/qwen4_exp.py line 2694, EntryClass); another "
            "architecture falls to its Transformers backend (models/registry.py lines 77-90), "
            "not modelled; use the Qwen4ExpForConditionalGeneration config, or --engine hf"
        )
    raw = spec.raw_config
    kv_heads = _int(raw, "indexer_kv_heads")
    ratio = _int(raw, "indexer_compress_ratio")
    budget = _int(raw, "indexer_budget")
    if kv_heads != 1:
        raise _refuse(
            "indexer_kv_heads: SGLang 0.5.23 raises 'the QSA MQA operators require "
            "indexer_kv_heads=1' (layers/attention/qsa/config.py line 51-52)"
        )
    if ratio < 2:
        raise _refuse(
            f"indexer_compress_ratio: SGLang 0.5.23 raises 'QSA requires indexer_compress_ratio "
            f">= 2, got {ratio}' (layers/attention/qsa/config.py lines 55-58)"
        )
    if budget % ratio or budget // ratio not in QSA_BLOCK_TOPK:
        raise _refuse(
            f"indexer_budget: {budget} / indexer_compress_ratio {ratio}; SGLang 0.5.23 raises "
            "'fast_topk_v2 requires indexer_budget / indexer_compress_ratio to be one of [512, "
            f"2048], got {budget // ratio}' (layers/attention/qsa/config.py lines 59-68)"
        )
    if QWEN4_PAGE_SIZE % ratio:
        raise _refuse(
            f"indexer_compress_ratio: {ratio}; SGLang 0.5.23 raises 'compressed QSA requires a "
            "paged full-KV cache with the page a multiple of the compress ratio' "
            f"(page_size={QWEN4_PAGE_SIZE}; mem_cache/qsa_kv_pool.py lines 99-106)"
        )
    dtype = sglang_qwen4_dtype(kv_dtype, spec.torch_dtype)
    heads = spec.num_attention_heads or 0
    if heads % tp:
        raise ConfigError(
            f"tp: {tp} does not divide Qwen4-Exp's {heads} attention heads; SGLang 0.5.23 asserts "
            "total_num_heads % attn_tp_size == 0 (models/qwen3_5.py line 1293)",
            field="tp",
        )
    runs = list(spec.layer_runs())
    attns = [(x, r) for x, r in runs if isinstance(x, FullAttention)]
    states = [(x, r) for x, r in runs if isinstance(x, StateLayer)]
    first = attns[0][0] if attns else None
    kv_bytes = 0
    index_dim = 0
    if isinstance(first, FullAttention):
        kv = first.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise ConfigError(
                f"tp: {tp} and Qwen4-Exp's {kv} KV heads; SGLang 0.5.23 asserts "
                "total_num_kv_heads % tp == 0 or tp % total_num_kv_heads == 0 "
                "(models/qwen3_5.py lines 1296-1299); choose a --tp that divides or is a "
                "multiple of it",
                field="tp",
            )
        per_rank = heads_per_rank(kv, tp)
        kv_bytes = per_rank * (dtype.row_bytes(first.head_dim) + dtype.row_bytes(first.v_dim))
        index_dim = first.index_head_dim
    gdn = states[0][0] if states else None
    conv = ssm = 0
    if isinstance(gdn, StateLayer):
        # n_groups not divisible by TP is extended by tp - n_groups (configs/mamba_utils.py
        # lines 29-38, 218-220) before conv_dim = intermediate + 2 x n_groups x state (line 222)
        groups = gdn.num_k_heads
        if groups % tp:
            groups += tp - groups
        conv_dim = gdn.num_heads * gdn.head_dim + 2 * groups * gdn.head_k_dim
        if conv_dim % tp or gdn.num_heads % tp:
            bad = conv_dim if conv_dim % tp else gdn.num_heads
            raise ConfigError(
                f"tp: {tp} for Qwen4-Exp's GDN states; SGLang 0.5.23 asserts '{bad} is not "
                f"divisible by {tp}' (configs/mamba_utils.py lines 225-230, divide()); choose a "
                "--tp that divides the GDN value heads and conv width",
                field="tp",
            )
        conv = conv_dim // tp * (gdn.conv_kernel - 1)
        ssm = gdn.num_heads // tp * gdn.head_dim * gdn.head_k_dim
    ple = [(x, r) for x, r in states if x.aux_conv_elements()]
    ple_elements = ple[0][0].aux_conv_elements() if ple else 0
    ngram = max(_int(raw, "ngram_size", DEFAULT_NGRAM_SIZE) - 1, 0) if ple else 0
    return SglangQwen4(
        kv_dtype=dtype,
        full_layers=LayerIndices(r for _, r in attns),
        gdn_layers=LayerIndices(r for _, r in states),
        ple_layers=LayerIndices(r for _, r in ple),
        kv_bytes=kv_bytes,
        index_bytes=kv_heads * index_dim * QSA_INDEX_BYTES // ratio,
        ratio=ratio,
        index_head_dim=index_dim,
        gdn_conv_elements=conv,
        gdn_ssm_elements=ssm,
        ple_elements=ple_elements,
        ngram_context=ngram,
        multimodal=not raw.get("language_model_only", False),
    )


def check_qwen4_pp(q4: SglangQwen4, num_layers: int, pp: int) -> None:
    """Pipeline stages as far as they are modelled: an even split (SGLang gives a remainder to
    the last stages, ``distributed/utils.py`` lines 110-150, kvbudget's SGLang stages to those
    before them) with a QSA layer on every stage (a stage without one sizes its pool from the
    other stages, ``pool_configurator.py`` lines 239-250, not modelled)."""
    if pp == 1:
        return
    if num_layers % pp:
        raise LayoutNotApplicable(
            f"pp: {pp} does not divide Qwen4-Exp's {num_layers} layers; SGLang then gives the "
            "remainder to the last stages (distributed/utils.py lines 110-150), not modelled "
            "for Qwen4-Exp; choose a --pp that divides the layers"
        )
    for rank in range(pp):
        start, end = get_pp_indices(num_layers, rank, pp)
        if not q4.counts(start, end)[0]:
            raise LayoutNotApplicable(
                f"pp: {pp}: stage {rank} (layers {start}-{end - 1}) holds no QSA layer; SGLang "
                "then sizes its token pool from the other stages (model_executor/"
                "pool_configurator.py lines 239-250), not modelled; choose a smaller --pp"
            )


def sglang_qwen4_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str,
    tp: int,
    pp: int,
    dp: int,
) -> LayoutResult:
    """Bytes of ``seqs`` sequences of ``tokens`` tokens in Qwen4-Exp's SGLang pools, per rank:
    the QSA layers hold every token in 64-token pages (K/V + compressed keys); per sequence one
    state slot (GDN; PLE short conv and n-gram context) and one QSA ring row."""
    check_load(tokens, seqs, tp, pp, dp)
    q4 = sglang_qwen4(spec, kv_dtype, tp=tp)
    check_qwen4_pp(q4, spec.num_layers, pp)
    ssm_bytes = qwen4_ssm_bytes(spec)[1]
    page = QWEN4_PAGE_SIZE
    kept = -(-tokens // page) * page
    stages: list[StageBytes] = []
    for rank in range(pp):
        start, end = get_pp_indices(spec.num_layers, rank, pp)
        n_full, n_gdn, _n_ple = q4.counts(start, end)
        groups: list[GroupBytes] = []
        full = q4.full_layers.split(start, end)
        if n_full:
            cell = q4.cell(start, end)
            ring = q4.ring_row_bytes(start, end)
            groups.append(
                GroupBytes(
                    "full",
                    full,
                    kept,
                    cell,
                    cell * kept + ring,
                    (cell * kept + ring) * seqs,
                    f"QSA K/V + compressed index keys, {page}-token pages; + {ring} B QSA ring",
                )
            )
        if n_gdn:
            per_seq = q4.state_per_request(ssm_bytes, n_gdn) + q4.ple_slot_bytes(start, end)
            groups.append(
                GroupBytes(
                    "mamba",
                    q4.gdn_layers.split(start, end),
                    0,
                    0,
                    per_seq,
                    per_seq * seqs,
                    "GDN state slot (+ PLE short conv / n-gram context), one per request",
                )
            )
        stages.append(StageBytes(rank, start, end, tuple(groups)))
    return LayoutResult(
        "sglang",
        q4.kv_dtype.name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        tuple(stages),
        block_size=page,
        notes=(
            "Qwen4-Exp in SGLang 0.5.23: QSATokenToKVPool (QSA K/V + compressed index keys per "
            "token, 64-token pages; a pending index-key ring per request) beside the GDN state "
            "pool (conv bfloat16, temporal float32) and the PLE short-conv / n-gram states",
        ),
    )
