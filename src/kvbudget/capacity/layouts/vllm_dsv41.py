"""DeepSeek-V4.1 (``deepseek_v41``) in vLLM 0.32: the cache specs each decoder layer registers.

All line numbers are vLLM 0.32.0's ``models/deepseek_v41/attention.py`` unless named. V4.1 runs
on CUDA and ROCm only (``models/deepseek_v41/`` has ``nvidia/`` and ``amd/``, no CPU model);
what is modelled is a Hopper GPU (SM90): the V4 ``fp8_ds_mla`` record of 584 bytes per token
in pages rounded up to 576 bytes (``_use_v41_mxfp8_kv_record`` is false off SM100, lines
122-129, 512-522), and kernel block 64 for the FlashMLA sparse attention and the V4.1 indexer
(``sparse_mla.py`` lines 88-90, ``v1/attention/backends/mla/indexer.py`` lines 370-372; the SWA
and compressor backends take any multiple of 32 and 1), so ``platforms/interface.py`` lines
700-774 set ``cache_config.block_size`` to 64. Per layer, in registration order
(``static_forward_context``; the attention layer registers itself first, lines 423-427):

1. a kv source (``i`` in ``kv_source_layer_ids``, ratio 1 or 2): its compressed cache (lines
   1138-1164): ``MLAAttentionSpec``, block 64, ``tokens_per_state = ratio``, 584 bytes per state;
2. a kv source that is also an index source: the indexer key cache (lines 432-446, 1206-1241):
   ``MLAAttentionSpec``, block 64, ``tokens_per_state = ratio``, ``index_head_dim +
   index_head_dim // 128 * 4`` uint8 per state (the fp8 key and its float32 scale, lines 92-100;
   ``indexer_kv_dtype`` mxfp4 is not modelled); an index source that is no kv source shares its
   kv source's cache and registers nothing (lines 447-459);
3. every layer: ``DeepseekV4SWACache`` (lines 557-568; ``v1/attention/backends/mla/
   sparse_swa.py`` lines 116-140): ``SlidingWindowMLASpec``, block 32, 584 bytes per token;
4. a ratio-2 kv source: its compressor's state (lines 575-585; ``compressor.py`` lines 136-172,
   258-266): ``CircularBufferSpec``, block ``max(8, next power of two >= num_speculative_tokens
   + 2)`` = 8 without speculation, ``2 * head_dim`` float32 per row.

A compressed layer that is no kv source registers only its SWA cache: it reads its source's
compressed cache (lines 586-603). Pages: ``block_size // tokens_per_state`` states of their
bytes, rounded up to 576 (``_apply_alignment_padding``, ``v1/kv_cache_interface.py`` lines
676-683); the ring is ``block x 2 x head_dim x 4`` bytes. Every spec is the same on each TP
rank (one shared K=V head, ``max_tp_shards = 1``).
"""

from __future__ import annotations

from kvbudget.capacity.layouts.base import LayoutNotApplicable, LayoutResult, StageBytes
from kvbudget.capacity.layouts.vllm_dsv4 import (
    FLOAT32_BYTES,
    FP8_DS_MLA_ALIGNMENT,
    FP8_DS_MLA_BYTES_PER_STATE,
    INDEXER_QUANT_BLOCK,
)
from kvbudget.capacity.layouts.vllm_specs import PackedSpec, packed_group_bytes
from kvbudget.spec.layers import CompressedAttention, CompressedSparseAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

__all__ = [
    "DSV41_BLOCK_SIZE",
    "DSV41_TYPES",
    "Dsv41Spec",
    "dsv41_kv_dtype",
    "dsv41_layer_specs",
    "dsv41_layout",
    "is_deepseek_v41",
]

DSV41_TYPES = frozenset({"deepseek_v41", "deepseek_v41_text"})
#: ``cache_config.block_size`` on SM90: the attention and indexer backends' kernel block
#: (``sparse_mla.py`` line 90; ``v1/attention/backends/mla/indexer.py`` line 372)
DSV41_BLOCK_SIZE = 64
#: ``DeepseekV4SWACache(block_size=32, ...)``, line 564
SWA_BLOCK_SIZE = 32
#: ``CompressorStateCache``: ``max(8, 1 << (num_speculative_tokens + 2 - 1).bit_length())``
#: (``compressor.py`` lines 151-153) with no speculation
RING_BLOCK_SIZE = 8


#: one cache spec a DeepSeek-V4.1 layer registers (the module docstring's four roles: ``compressed``,
#: ``indexer_keys``, ``swa``, ``compressor_state``; kinds ``mla``, ``sliding``, ``ring``)
Dsv41Spec = PackedSpec


def is_deepseek_v41(spec: ModelSpec) -> bool:
    """A DeepSeek-V4.1 model (read by :mod:`kvbudget.spec.arch_dsv41`)."""
    return spec.model_type in DSV41_TYPES


def dsv41_kv_dtype(kv_dtype: str) -> str:
    """``_resolve_dsv4_kv_cache_dtype`` on the packed layout (lines 132-165): ``auto`` and
    ``fp8`` become ``fp8_ds_mla``; ``nvfp4_ds_mla`` needs SM100 (lines 523-527); vLLM refuses
    any name not ending ``_ds_mla``."""
    name = kv_dtype.strip().lower()
    if name in ("auto", "fp8", "fp8_ds_mla"):
        return "fp8_ds_mla"
    if name == "nvfp4_ds_mla":
        raise LayoutNotApplicable(
            "kv_dtype: 'nvfp4_ds_mla' for deepseek_v41: vLLM 0.32 refuses it off SM100 "
            "('nvfp4_ds_mla needs the V4.1 KV records, which FlashMLA decodes only on SM100.', "
            "models/deepseek_v41/attention.py lines 523-527) and kvbudget models the Hopper "
            "(SM90) record; pass --kv-cache-dtype auto or fp8"
        )
    raise LayoutNotApplicable(
        f"kv_dtype: {kv_dtype!r} for deepseek_v41: vLLM 0.32 refuses it ('DeepseekV4 packed KV "
        f"layouts only support fp8 kv-cache, got {kv_dtype}.', models/deepseek_v41/attention.py "
        "lines 150-157); pass --kv-cache-dtype auto or fp8"
    )


def _page(block_size: int, tokens_per_state: int, state_bytes: int) -> int:
    raw = (block_size // tokens_per_state) * state_bytes
    return cdiv(raw, FP8_DS_MLA_ALIGNMENT) * FP8_DS_MLA_ALIGNMENT


def dsv41_layer_specs(spec: ModelSpec) -> list[Dsv41Spec]:
    """Every cache spec of every decoder layer, in vLLM's registration order (module docstring)."""
    out: list[Dsv41Spec] = []
    b = DSV41_BLOCK_SIZE
    rope = spec.raw_config.get("qk_rope_head_dim")
    if any(isinstance(x, CompressedAttention) for x in spec.layers) and rope != 64:
        raise LayoutNotApplicable(
            f"qk_rope_head_dim: {rope!r} for deepseek_v41: vLLM 0.32's compressor takes 64 only "
            "(models/deepseek_v41/compressor.py line 214: assert self.head_dim == 512 and "
            "self.rope_head_dim == 64); use the checkpoint's 64"
        )
    for layer in spec.layers:
        i = layer.layer_index
        if isinstance(layer, CompressedAttention):
            ratio, window, head_dim = layer.compress_rate, layer.sliding_window, layer.head_dim
        elif isinstance(layer, SlidingWindow):
            ratio, window, head_dim = 0, layer.sliding_window, layer.head_dim
        else:
            raise LayoutNotApplicable(
                f"layers: layer {i} of {spec.model_type} is {layer.kind}, which vLLM 0.32's "
                "DeepSeek-V4.1 attention does not build; fix the config"
            )
        if head_dim != 512:
            raise LayoutNotApplicable(
                f"head_dim: {head_dim} for deepseek_v41: vLLM 0.32's compressor takes 512 only "
                "(models/deepseek_v41/compressor.py line 214: assert self.head_dim == 512); use "
                "the checkpoint's 512"
            )
        if ratio:
            bytes_ = FP8_DS_MLA_BYTES_PER_STATE
            out.append(Dsv41Spec(i, "compressed", "mla", b, _page(b, ratio, bytes_)))
        if isinstance(layer, CompressedSparseAttention):
            dim = layer.index_head_dim
            if dim % INDEXER_QUANT_BLOCK:
                raise LayoutNotApplicable(
                    f"index_head_dim: {dim} for deepseek_v41: the fp8 indexer key keeps one "
                    "float32 scale per 128 values (models/deepseek_v41/attention.py lines 98-100); "
                    "use the checkpoint's multiple of 128"
                )
            key = dim + dim // INDEXER_QUANT_BLOCK * 4
            out.append(Dsv41Spec(i, "indexer_keys", "mla", b, _page(b, ratio, key)))
        page = _page(SWA_BLOCK_SIZE, 1, FP8_DS_MLA_BYTES_PER_STATE)
        out.append(Dsv41Spec(i, "swa", "sliding", SWA_BLOCK_SIZE, page, window))
        if ratio == 2:
            ring = RING_BLOCK_SIZE * 2 * head_dim * FLOAT32_BYTES
            out.append(Dsv41Spec(i, "compressor_state", "ring", RING_BLOCK_SIZE, ring))
    return out


def dsv41_layout(
    spec: ModelSpec, *, tokens: int, seqs: int, kv_dtype: str, tp: int, pp: int, dp: int
) -> LayoutResult:
    """DeepSeek-V4.1: each of vLLM 0.32's packed groups (:mod:`kvbudget.capacity.pool_dsv41`)
    holds its blocks per sequence; the same on every TP rank."""
    from kvbudget.capacity.pool_dsv41 import dsv41_groups  # pool imports this module

    name = dsv41_kv_dtype(kv_dtype)
    groups = dsv41_groups(spec, pp=pp)
    stage = StageBytes(0, 0, spec.num_layers, tuple(packed_group_bytes(groups, tokens, seqs)))
    return LayoutResult(
        "vllm",
        name,
        tokens,
        seqs,
        tp,
        pp,
        dp,
        (stage,),
        block_size=DSV41_BLOCK_SIZE,  # cache_config.block_size (the windows 32, rings 8)
        notes=(
            "DeepSeek-V4.1 in vLLM 0.32 on a Hopper GPU (SM90): vLLM's packed groups (compressed "
            "MLA and indexer-key pages on kv sources only, a 584-byte sliding window on every "
            "layer, compressor rings on ratio-2 kv sources; fp8_ds_mla, 576-byte aligned, block "
            "64), the same on every TP rank",
        ),
    )


#: the row docs/architectures.md renders (``vllm_source_rules.VLLM_SOURCE_RULES``): rule, source lines,
#: the test that works the numbers by hand
DSV41_SOURCE_RULE = (
    "vLLM 0.32's reading of the config (nested text_config or flat; no transformers class): per "
    "layer a sliding-window page (block 32, 584 B per token fp8_ds_mla); only on "
    "kv_source_layer_ids a compressed-MLA page (block 64, 64 / ratio states of 584 B, ratio 1 or "
    "2), with the indexer's keys (132 B per state) where also an index source, and at ratio 2 a "
    "float32 compressor ring (CircularBufferSpec, 8 rows of 2 x head_dim); the other compressed "
    "layers read their source's caches and register only their window; pages padded to 576 B; "
    "vLLM's packed groups (the sliding windows and rings split as state buckets to fit the widest "
    "group); Hopper (SM90) only (plan refuses another GPU): block 64 (plan refuses another "
    "--block-size), --kv-cache-dtype auto / fp8 -> fp8_ds_mla, others refused; no --pp, no speculative decoding. Weights and "
    "non-KV terms not priced: plan takes --weights-bytes and --kv-cache-memory. hf, sglang, "
    "llamacpp refused (capacity/dsv41_engines.py)",
    "transformers_utils/configs/deepseek_v41.py 8-50; models/deepseek_v41/attention.py 92-100, "
    "122-165, 303-351, 423-459, 504-585, 586-603, 1138-1164, 1206-1241; models/deepseek_v41/"
    "compressor.py 136-172, 196-214; models/deepseek_v41/sparse_mla.py 88-90; v1/attention/"
    "backends/mla/indexer.py 345-372; v1/attention/backends/mla/sparse_swa.py 74-140; "
    "platforms/interface.py 700-774; v1/kv_cache_interface.py 676-683, 859-896, 909-946; "
    "v1/core/kv_cache_utils.py 1195-1227, 1520-1551, 1860-1994; config/vllm.py 577-598",
    "tests/unit/plan/test_plan_dsv41_vllm.py (by hand; vLLM's own grouping run on the specs: "
    "scripts/check_dsv41_vllm_groups.py); tests/unit/spec/test_deepseek_v41.py (a small test "
    "config: no V4.1 config is published)",
)
