"""vLLM 0.32's KV-cache specs for Qwen4-Exp: GDN and PLE states, QSA attention K/V, the QSA
indexer's key ring and its compressed keys.

Qwen4-Exp does not start on vLLM's CPU build (``models/qwen4_exp/__init__.py`` lines 30-31: "CUDA
and ROCm only"), so nothing is recorded; every rule below is read from vLLM 0.32.0's source
(``site-packages/vllm/``), and ``scripts/check_qwen4_exp_vllm_groups.py`` runs vLLM's own grouping
functions on specs built by these rules.

Per layer (``models/qwen4_exp/nvidia/model.py`` lines 217-263; ``_QSA_LAYER_TYPES`` line 93):

* ``linear_attention``: a GDN ``MambaSpec`` (``model_executor/layers/mamba/abstract.py`` lines
  65-84): conv ``[conv_dim / tp, kernel - 1]`` and temporal ``[v_heads / tp, v_dim, k_dim]``
  (``model.py`` lines 829-848; ``mamba_utils.py`` ``gated_delta_net_state_shape``), both in the
  model dtype: the config has no ``mamba_ssm_dtype``, so ``--mamba-ssm-cache-dtype auto`` follows
  the conv dtype (``mamba_utils.py`` ``_mamba_state_dtype``; ``models/config.py`` lines 853-878).
* a ``ple_layer_ids`` layer (1-indexed) also a PLE short-conv ``MambaSpec`` of ``[hc_count x
  hidden, (ple_conv_kernel_size - 1) x ngram_size]`` in the model dtype, never split by TP
  (``model.py`` lines 787-816; ``nvidia/ple_layer.py`` lines 165-187, ``tp_replicated``).
* ``indexed_attention`` with the QSA fields: three specs (``nvidia/qsa.py``,
  ``nvidia/indexer_qsa.py``, ``common/qsa_cache.py``):

  - the attention's ``FullAttentionSpec(num_kv_heads / tp, head_dim, head_dim)`` in the KV dtype
    (bf16, or uint8 for fp8) (``qsa.py`` lines 543-551, 460-468);
  - the indexer's raw-key ring, a ``CircularBufferSpec`` of ``block_size = ratio x cdiv(ratio +
    num_speculative_tokens, ratio)`` rows of ``indexer_head_dim`` bf16, one head, no V
    (``qsa_cache.py`` lines 844-862; ``indexer_qsa.py`` lines 165-173); a multimodal model that
    keeps M-RoPE (``Qwen4ExpForConditionalGeneration`` with ``mrope_section``: only
    ``Qwen4ExpForCausalLM`` strips it, ``models/config.py`` lines 894-967) packs three int64
    positions after the key, rounded up to 4 bf16: ``cdiv(indexer_head_dim, 4) x 4 + 12``
    (``qsa_cache.py`` lines 814-829; ``indexer_qsa.py`` line 168);
  - the compressed keys, an ``MLAAttentionSpec(block_size, 1 head, indexer_head_dim,
    tokens_per_state = ratio)`` in ``--attention-config``'s ``indexer_kv_dtype`` (bf16 by
    default, fp8 e4m3 one byte) (``qsa_cache.py`` lines 868-876; ``indexer_qsa.py`` lines
    150-181): ``block / ratio`` rows per block (``v1/kv_cache_interface.py`` lines 227-234,
    549-553).

An n-gram ``--speculative-config`` (``num_speculative_tokens`` S) widens both conv states by S
columns (``mamba_utils.py`` lines 257-300, ``model.py`` lines 797-848), the ring as above, and
gives each GDN / PLE ``MambaSpec`` S speculative blocks (``mamba/abstract.py`` lines 79-83).

Block size (``platforms/interface.py`` ``_align_hybrid_block_size`` lines 939-1122): the largest
of the GDN and PLE pages (lines 1044-1050, ``get_mamba_specs_from_config``) sets
``B = a x cdiv(mamba_page, a x attention_page_per_token)`` with ``a = max(16, --block-size)``,
rounded up to a multiple of 16 (lines 1060-1091; the QSA backend's kernel block is
``MultipleOf(16)``, ``qsa.py`` lines 188-191), so a ``--block-size`` of 24 is served as 32;
both state pages are padded to ``B x attention_page_per_token`` (lines 1105-1116).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.base import (
    LayoutNotApplicable,
    LayoutResult,
    get_pp_indices,
)
from kvbudget.capacity.layouts.vllm_qwen4_mtp import qwen4_mtp_specs, ring_row_bytes
from kvbudget.capacity.layouts.vllm_specs import (
    DEFAULT_BLOCK_SIZE,
    MambaCacheMode,
    attention_page_bytes,
    mamba_page_bytes,
    packed_layout,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import cdiv

__all__ = [
    "QWEN4_TYPES",
    "Qwen4Spec",
    "is_qwen4_exp",
    "qwen4_layer_specs",
    "qwen4_layout",
]

#: kvbudget model types vLLM 0.32 serves as Qwen4-Exp (``Qwen4ExpForCausalLM`` /
#: ``Qwen4ExpForConditionalGeneration``, ``model_executor/models/registry.py``)
QWEN4_TYPES = frozenset({"qwen4_exp", "qwen4_exp_text"})

#: the QSA backend's smallest kernel block (``nvidia/qsa.py`` lines 188-191: ``MultipleOf(16)``)
QSA_KERNEL_BLOCK = 16
#: bytes of a raw index key element: the ring is always bfloat16 (``indexer_qsa.py`` line 167)
RING_BYTES = 2
#: bytes of a compressed index key element per ``indexer_kv_dtype`` (``auto`` is bf16):
#: bfloat16 or float8_e4m3fn (``indexer_qsa.py`` lines 152-163)
COMPRESSED_BYTES = {"auto": 2, "bf16": 2, "fp8": 1}

Role = Literal["gdn", "ple", "ring", "compressed", "attention"]


@dataclass(frozen=True, slots=True)
class Qwen4Spec:
    """One cache spec a Qwen4-Exp layer registers in vLLM 0.32, on one rank."""

    layer_index: int
    role: Role
    block_size: int
    page_size_bytes: int
    #: what vLLM buckets on (``UniformTypeKVCacheSpecs.is_uniform_type``): the spec type, its
    #: block size and, for states, ``tp_replicated`` (``v1/kv_cache_interface.py`` lines
    #: 1096-1107, 1281-1295)
    bucket_key: str
    #: ``MambaSpec.num_speculative_blocks`` (``model_executor/layers/mamba/abstract.py`` lines
    #: 79-83: ``num_speculative_tokens``): the extra state blocks a GDN / PLE group holds per request
    num_speculative_blocks: int = 0

    @property
    def is_state(self) -> bool:
        """A mamba or circular-buffer spec: one page per request whatever its length."""
        return self.role in ("gdn", "ple", "ring")

    @property
    def is_sliding(self) -> bool:
        """No Qwen4-Exp spec is a ``SlidingWindowSpec``."""
        return False


def is_qwen4_exp(spec: ModelSpec) -> bool:
    """Qwen4-Exp with its QSA indexer (an ``indexed_attention`` layer with an index key)."""
    return spec.model_type in QWEN4_TYPES and any(
        isinstance(x, FullAttention) and x.index_head_dim for x in spec.layer_seq.distinct()
    )


def _refuse(field: str, text: str) -> LayoutNotApplicable:
    return LayoutNotApplicable(f"{field}: {text}")


def compress_ratio(spec: ModelSpec) -> int:
    """``indexer_compress_ratio`` (``indexer_qsa.py`` line 119)."""
    ratio = spec.raw_config.get("indexer_compress_ratio")
    if isinstance(ratio, bool) or not isinstance(ratio, int) or ratio <= 0:
        raise _refuse(
            "indexer_compress_ratio",
            f"{ratio!r} for Qwen4-Exp; vLLM 0.32 reads int(config.indexer_compress_ratio) "
            "(models/qwen4_exp/nvidia/indexer_qsa.py line 119); set a positive integer",
        )
    return ratio


def check_qwen4(spec: ModelSpec, *, kv_dtype: str, tp: int, block_size: int | None) -> None:
    """Refuse, in one line naming the field, what vLLM 0.32 refuses for Qwen4-Exp."""
    # --dtype auto serves a float32 config in bfloat16 (config/model.py lines 2422-2424); an
    # explicit --dtype float32 is EXPLICIT_FLOAT32 (capacity.model_dtype.with_dtype)
    served = (spec.torch_dtype or "bfloat16").removeprefix("torch.")
    if served not in ("bfloat16", "float32"):
        shown = "float32" if served == "float" else served
        raise _refuse(
            "dtype",
            f"{shown} for Qwen4-Exp; vLLM 0.32 raises 'Qwen4Exp QSA currently requires BF16' "
            "(models/qwen4_exp/nvidia/qsa.py lines 354-355); serve it with --dtype bfloat16",
        )
    if kv_dtype not in ("auto", "bfloat16", "fp8", "fp8_e4m3"):
        raise _refuse(
            "kv_dtype",
            f"{kv_dtype} for Qwen4-Exp; vLLM 0.32 raises 'Qwen4Exp QSA requires a BF16 or "
            "FP8-e4m3 main KV cache' (models/qwen4_exp/nvidia/qsa.py lines 356-364); choose "
            "auto, bfloat16 or fp8",
        )
    for layer in spec.layer_seq.distinct():
        if isinstance(layer, StateLayer) and (layer.num_heads % tp or layer.num_k_heads % tp):
            raise ConfigError(
                f"tp: {tp} does not divide Qwen4-Exp's GDN heads ({layer.num_k_heads} key, "
                f"{layer.num_heads} value); vLLM 0.32 shards them with divide() "
                "(model_executor/layers/mamba/mamba_utils.py lines 280-301, "
                "gdn/qwen_gdn_linear_attn.py line 557); choose a --tp that divides both",
                field="tp",
            )
        if not isinstance(layer, FullAttention):
            continue
        heads = spec.num_attention_heads or 0
        if heads % tp:
            raise ConfigError(
                f"tp: {tp} does not divide Qwen4-Exp's {heads} attention heads; vLLM 0.32 raises "
                "'QSA attention heads must be divisible by TP size' (models/qwen4_exp/nvidia/"
                "qsa.py lines 382-383); choose a --tp that divides it",
                field="tp",
            )
        kv = layer.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise ConfigError(
                f"tp: {tp} and Qwen4-Exp's {kv} KV heads; vLLM 0.32 raises 'QSA KV heads must be "
                "divisible by TP size' / 'TP size must be divisible by replicated QSA KV heads' "
                "(models/qwen4_exp/nvidia/qsa.py lines 391-395); choose a --tp that divides or "
                "is a multiple of it",
                field="tp",
            )
    ratio = compress_ratio(spec)
    start = block_size or DEFAULT_BLOCK_SIZE
    if start % ratio:
        raise ConfigError(
            f"block_size: {start} for Qwen4-Exp with indexer_compress_ratio {ratio}; vLLM 0.32 "
            "raises 'QSA cache block size must be divisible by the compression ratio' "
            "(models/qwen4_exp/common/qsa_cache.py lines 777-780); choose a --block-size that "
            f"is a multiple of {math.lcm(ratio, QSA_KERNEL_BLOCK)}",
            field="block_size",
        )


def compressed_key_bytes(indexer_kv_dtype: str) -> int:
    """Bytes of a compressed index key element: ``--attention-config``'s ``indexer_kv_dtype``,
    ``auto`` read as bf16, fp8 stored as plain e4m3 without scales (``indexer_qsa.py`` lines
    150-163); vLLM refuses the rest there."""
    if indexer_kv_dtype not in COMPRESSED_BYTES:
        raise _refuse(
            "attention_config",
            f"indexer_kv_dtype {indexer_kv_dtype!r} for Qwen4-Exp; vLLM 0.32 raises "
            f'"indexer_kv_dtype={indexer_kv_dtype!r} is not supported by the Qwen4Exp QSA indexer '
            "(only 'bf16' or 'fp8').\" (models/qwen4_exp/nvidia/indexer_qsa.py lines 155-163); "
            "choose bf16 or fp8",
        )
    return COMPRESSED_BYTES[indexer_kv_dtype]


def ring_width(spec: ModelSpec, index_head_dim: int) -> int:
    """bf16 elements per raw-key ring row: the key, plus three int64 M-RoPE positions where the
    multimodal model keeps M-RoPE (``qsa_cache.py`` lines 814-829; ``indexer_qsa.py`` line 168
    ``cache_rope_positions=uses_mrope``)."""
    rope = spec.raw_config.get("rope_parameters") or spec.raw_config.get("rope_scaling")
    mrope = isinstance(rope, dict) and "mrope_section" in rope
    if spec.architecture != "Qwen4ExpForConditionalGeneration" or not mrope:
        return index_head_dim
    return cdiv(index_head_dim, 4) * 4 + 3 * 4


def qwen4_layer_specs(
    spec: ModelSpec,
    *,
    kv_dtype: str = "auto",
    tp: int = 1,
    block_size: int | None = None,
    mamba_state_bytes: int | None = None,
    mamba_ssm_state_bytes: int | None = None,
    num_speculative_tokens: int = 0,
    mtp_layers: int = 0,
    indexer_kv_dtype: str = "auto",
) -> tuple[int, list[Qwen4Spec]]:
    """``(block size, every spec in registration order)`` of Qwen4-Exp on one TP rank.

    ``num_speculative_tokens`` (an n-gram proposer's, ``pool_qwen4.qwen4_speculative_tokens``)
    widens the GDN conv state by that many columns (``nvidia/model.py`` lines 829-848,
    ``mamba_utils.py`` ``gated_delta_net_state_shape`` lines 280-300), the PLE conv state too
    (``model.py`` lines 797-816, ``short_conv_state_shape`` lines 257-266), the QSA ring to
    ``ratio x cdiv(ratio + spec, ratio)`` rows (``qsa_cache.py`` lines 844-862), and gives each
    GDN / PLE spec that many speculative blocks (``mamba/abstract.py`` lines 79-83), whatever the
    proposer (``vllm_config.num_speculative_tokens``, ``config/vllm.py`` lines 601-606).
    ``mtp_layers``: the MTP drafter's QSA layers, after the target's
    (:mod:`kvbudget.capacity.layouts.vllm_qwen4_mtp`). ``indexer_kv_dtype``: ``--attention-config``'s
    (:func:`compressed_key_bytes`)."""
    check_qwen4(spec, kv_dtype=kv_dtype, tp=tp, block_size=block_size)
    compressed_bytes = compressed_key_bytes(indexer_kv_dtype)
    dtype = get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype)
    ratio = compress_ratio(spec)
    conv = mamba_state_bytes or 2  # the model dtype: bfloat16 (check_qwen4)
    ssm = mamba_ssm_state_bytes or conv
    layers = list(spec.layer_seq)
    attns = [x for x in layers if isinstance(x, FullAttention)]
    states = [x for x in layers if isinstance(x, StateLayer)]
    per_token = attention_page_bytes(attns[0], dtype, tp, 1) if attns else 0
    spec_tokens = num_speculative_tokens

    def gdn_bytes(layer: StateLayer) -> int:
        if not spec_tokens:
            return mamba_page_bytes(layer, conv, tp, ssm)
        widened = math.prod(layer.conv_shape(tp, num_speculative_tokens=spec_tokens))
        return widened * conv + layer.ssm_elements(tp) * ssm

    def ple_bytes(layer: StateLayer) -> int:
        if not layer.aux_conv_elements():
            return 0
        return layer.aux_conv_channels * (layer.aux_conv_window + spec_tokens) * conv

    gdn_page = max((gdn_bytes(x) for x in states), default=0)
    ple_page = max((ple_bytes(x) for x in states), default=0)
    mamba_page = max(gdn_page, ple_page)
    block = block_size or DEFAULT_BLOCK_SIZE
    if mamba_page and per_token:
        align = max(QSA_KERNEL_BLOCK, block)
        raised = align * cdiv(mamba_page, align * per_token)
        raised = QSA_KERNEL_BLOCK * cdiv(raised, QSA_KERNEL_BLOCK)
        block = max(block, raised)
    # the states are padded to the attention page unless it equals the larger state page
    # (platforms/interface.py lines 1105-1116: it returns at lines 1109-1110 then)
    if block % QSA_KERNEL_BLOCK:  # not raised (no state layer): vLLM's worker fails on it
        raise ConfigError(
            f"block_size: {block} for Qwen4-Exp; vLLM 0.32's QSA backend takes multiples of "
            f"{QSA_KERNEL_BLOCK} only (models/qwen4_exp/nvidia/qsa.py lines 188-191; 'No common "
            f"block size', v1/worker/utils.py); choose --block-size {QSA_KERNEL_BLOCK} or a "
            "multiple",
            field="block_size",
        )
    padded = block * per_token if per_token and block * per_token != mamba_page else 0
    ring_rows = ratio * cdiv(ratio + spec_tokens, ratio)
    if block % ring_rows:
        raise ConfigError(
            f"block_size: {block} for Qwen4-Exp; vLLM 0.32 asserts the QSA ring capacity "
            f"{ring_rows} divides the attention block size (models/qwen4_exp/common/qsa_cache.py "
            f"lines 852-855); choose a --block-size that is a multiple of {ring_rows}",
            field="block_size",
        )
    out: list[Qwen4Spec] = []
    for layer in layers:
        i = layer.layer_index
        if isinstance(layer, StateLayer):
            if layer.aux_conv_elements():
                ple = padded or ple_bytes(layer)
                out.append(Qwen4Spec(i, "ple", block, ple, "mamba replicated", spec_tokens))
            page = padded or gdn_bytes(layer)
            out.append(Qwen4Spec(i, "gdn", block, page, "mamba", spec_tokens))
        elif isinstance(layer, FullAttention):
            index_dim = layer.index_head_dim
            ring = ring_rows * ring_width(spec, index_dim) * RING_BYTES
            out.append(Qwen4Spec(i, "ring", ring_rows, ring, "ring"))
            compressed = block // ratio * index_dim * compressed_bytes
            out.append(Qwen4Spec(i, "compressed", block, compressed, f"full {block}"))
            page = attention_page_bytes(layer, dtype, tp, block)
            out.append(Qwen4Spec(i, "attention", block, page, f"full {block}"))
    if mtp_layers:
        index_dim = next(x.index_head_dim for x in attns if x.index_head_dim)
        row = ring_row_bytes(spec, index_dim, RING_BYTES)
        out.extend(qwen4_mtp_specs(spec, out, mtp_layers, row))
    return block, out


def qwen4_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str,
    tp: int,
    pp: int,
    dp: int,
    block_size: int | None = None,
    mamba_cache_mode: MambaCacheMode = "none",
) -> LayoutResult:
    """Qwen4-Exp: each of vLLM 0.32's packed groups (:mod:`kvbudget.capacity.pool_qwen4`) holds
    :func:`blocks_held` blocks of its page (the sum of its members' pages) per sequence: the
    attention group ``cdiv(T, B)``, each state group (GDN, PLE, QSA ring) one page."""
    from kvbudget.capacity.pool_qwen4 import qwen4_groups  # the pool imports this module

    packed = qwen4_groups(
        spec, kv_dtype=kv_dtype, tp=tp, block_size=block_size, pp=pp,
        mamba_cache_mode=mamba_cache_mode,
    )  # fmt: skip
    stage_groups = []
    for rank in range(pp if pp > 1 else 0):  # each stage: the groups projected onto its layers
        start, end = get_pp_indices(spec.num_layers, rank, pp)
        on_stage = range(start, end)
        projected = [
            replace(
                g,
                spec=replace(g.spec, page_size_bytes=g.page_on(on_stage)),
                layer_indices=LayerIndices.of([i for i in g.layer_indices if i in on_stage]),
            )
            for g in packed
            if any(i in on_stage for i in g.layer_indices)
        ]
        stage_groups.append((start, end, projected))
    return packed_layout(
        packed,
        kv_dtype_name=get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype).name,
        num_layers=spec.num_layers,
        tokens=tokens,
        seqs=seqs,
        tp=tp,
        pp=pp,
        dp=dp,
        block_size=next((g.block_size for g in packed if g.spec.holds_tokens), DEFAULT_BLOCK_SIZE),
        note="Qwen4-Exp in vLLM 0.32: each QSA layer's K/V with its indexer's compressed keys "
        "(one row per indexer_compress_ratio tokens, bf16) in one group; the indexer's raw-key "
        "ring (one page per sequence), the GDN states and the PLE conv states (padded to the "
        "attention page) in groups of their own, packed side by side in each block "
        "(kv_cache_utils.py _get_packed_kv_cache_groups); with pp > 1 each stage holds its "
        "layers' share of every group (_project_kv_cache_groups_to_worker)",
        stage_groups=stage_groups,
    )
