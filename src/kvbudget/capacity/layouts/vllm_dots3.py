"""Dots3-Note (``dots3_note``) in vLLM 0.32: the cache specs each decoder layer registers.

All line numbers are vLLM 0.32.0's (``site-packages/vllm/``). vLLM reads the checkpoint's flat
config (``transformers_utils/configs/dots3_note.py`` lines 7-25: a ``DeepseekV3Config``, which
derives nothing from ``layer_types`` or ``swa_*``), so the keys below are read from the file as
written. Per decoder layer (``models/dots3_note/nvidia/model.py`` lines 524-534:
``config.layer_types[layer_idx] == "sliding_attention"`` picks the sliding class, any other the
DSA class), in registration order (``static_forward_context``, which ``get_kv_cache_spec`` walks):

* a sliding layer (``Dots3NoteSlidingAttention``, lines 352-483): one ``MLAAttention`` with
  ``sliding_window = sliding_window_size`` and ``kv_lora_rank = swa_kv_lora_rank``,
  ``qk_rope_head_dim = swa_qk_rope_head_dim``; ``MLAAttention.get_kv_cache_spec``
  (``model_executor/layers/attention/mla_attention.py`` lines 1350-1373) gives a
  ``SlidingWindowMLASpec``: one head of ``swa_kv_lora_rank + swa_qk_rope_head_dim`` elements
  per token, no V (``v1/kv_cache_interface.py`` lines 949-966);
* a DSA layer (``Dots3NoteFullAttention``, lines 242-307, a ``DeepseekV2MLAAttention``): first the
  lightning indexer's key cache (``model_executor/models/deepseek_v2.py`` lines 1138-1189 build
  it when the config has ``index_topk``; lines 723-736 and 658-666: an ``MLAAttentionSpec`` of
  ``index_head_dim + index_head_dim // 128 * 4`` uint8 per token, whatever ``--kv-cache-dtype``),
  then the latent cache, whose inner ``MLAAttention`` is replaced by
  ``Dots3NotePaddedMLAAttention`` (lines 227-239, 279-307): an ``MLAAttentionSpec`` whose
  ``head_size`` is the SLIDING width ``swa_kv_lora_rank + swa_qk_rope_head_dim``, not its own
  ``kv_lora_rank + qk_rope_head_dim`` (the latent rows are padded to the sliding rows).

Backends (worker ``get_kv_cache_spec``, ``v1/worker/gpu_model_runner.py`` lines 7174-7179, and
``customize_attention_spec``, ``v1/worker/utils.py`` lines 476-486):

* DSA latent: ``Dots3NotePaddedSparseBackend`` (``models/dots3_note/nvidia/attention.py`` lines
  693-709), a ``FlashAttnMLASparseBackend`` (``v1/attention/backends/mla/flashattn_mla_sparse.py``
  lines 36-50): KV caches auto / float16 / bfloat16 only (lines 38-42, 93-96), kernel blocks of a
  multiple of 64 (line 46), ``customize_spec`` = ``align_blocks_to_rows``
  (``v1/attention/backends/mla/sparse_utils.py`` lines 44-47): ``block_stride_alignment`` = one
  row, ``swa width x 2`` bytes; layouts ``BLHNC`` only (``attention.py`` lines 696-701);
* sliding: ``Dots3NoteTritonMLABackend`` (``attention.py`` lines 434-452): kernel blocks of a
  multiple of 16 (``v1/attention/backends/mla/triton_mla.py`` lines 110-111), no alignment;
* indexer: ``DeepseekV32IndexerBackend`` (``v1/attention/backends/mla/indexer.py`` lines
  283-285): kernel block 64 only, so ``block_stride_alignment = MultipleOf(64)``: 1 at block 64,
  one 64-token indexer page (``64 x 132`` B) at a larger block
  (``KVCacheSpec.get_block_stride_alignment``, ``v1/kv_cache_interface.py`` lines 183-193).

With ``--speculative-config`` method ``mtp`` the drafter's layers follow, each one of the two
kinds above (:func:`kvbudget.capacity.mtp_dots3.dots3_mtp_layer_types`).

Block size: without ``--block-size``, the smallest size every backend takes
(``platforms/interface.py`` lines 699-747, 771-781): 64. A ``--block-size`` that is not a multiple
of 64 fails at worker setup (``select_common_block_size``, ``v1/worker/utils.py`` lines 515-561).
Every spec has ``max_tp_shards = 1``: the same on every TP rank.

The model cannot be imported on vLLM's CPU build (``attention.py`` line 32 imports
``flashattn_mla_sparse``, whose line 33 imports ``vllm.vllm_flash_attn``: "requires the CUDA
flash attention extensions"), so no CPU pool is recorded: these rules are worked from the source
(``tests/unit/plan/test_plan_dots3_vllm.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm
from typing import Any, Literal

from kvbudget.capacity.dtypes import get_kv_dtype
from kvbudget.capacity.layouts.base import LayoutNotApplicable, LayoutResult
from kvbudget.capacity.layouts.vllm_specs import PackedSpec, packed_layout
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_kinds import has_sliding_latent
from kvbudget.spec.layers import MLA
from kvbudget.spec.model import ModelSpec

__all__ = [
    "DOTS3_BLOCK_SIZE",
    "DSA_KV_REFUSAL",
    "Dots3Spec",
    "dots3_block_alignment",
    "dots3_has_dsa",
    "dots3_kv_dtype",
    "dots3_layer_specs",
    "dots3_layout",
    "is_dots3_note",
]

#: the smallest block every Dots3-Note backend takes (sparse MLA: multiples of 64; indexer: 64)
DOTS3_BLOCK_SIZE = 64
#: ``DeepseekV32IndexerBackend.get_supported_kernel_block_sizes`` on CUDA (indexer.py line 285)
INDEXER_KERNEL_BLOCK = 64
#: ``Indexer.quant_block_size`` (deepseek_v2.py line 724): one float32 scale per 128 fp8 values
INDEXER_QUANT_BLOCK = 128

Dots3Role = Literal["indexer", "dsa", "sliding"]


Dots3Spec = PackedSpec  # its roles: Dots3Role


#: kvbudget's Dots3-Note model types (the checkpoint's flat format; transformers' text config)
DOTS3_TYPES = frozenset({"dots3_note", "dots3_note_text"})


def is_dots3_note(spec: ModelSpec) -> bool:
    """Dots3-Note, or any model whose MLA layers include sliding-window ones: vLLM pads its DSA
    latents to the sliding rows even when no layer slides (``use_sliding_window: false``)."""
    return spec.model_type in DOTS3_TYPES or has_sliding_latent(spec.layer_seq)


#: what vLLM 0.32 raises when a Dots3-Note DSA layer is built with any other cache dtype: its
#: ``Dots3NotePaddedSparseImpl`` is a ``FlashAttnMLASparseImpl``
DSA_KV_REFUSAL = (
    "'FlashAttnMLASparseImpl currently supports only FP16/BF16 KV cache.' "
    "(v1/attention/backends/mla/flashattn_mla_sparse.py lines 178-181)"
)


def dots3_has_dsa(spec: ModelSpec, mtp_layer_types: Sequence[str] = ()) -> bool:
    """Whether any layer (the target's ``layer_types``, then the drafter's) is a DSA layer."""
    types = spec.raw_config.get("layer_types")
    kinds = [*(types if isinstance(types, list) else []), *mtp_layer_types]
    return any(kind != "sliding_attention" for kind in kinds)


def dots3_kv_dtype(spec: ModelSpec, kv_dtype: str) -> str:
    """The KV dtype name vLLM 0.32 serves Dots3-Note in (``auto`` is the model dtype, a float32
    model served in bfloat16). Any other dtype reaches the DSA layers' own impl, which raises
    (:data:`DSA_KV_REFUSAL`): the layer reads ``cache_config.cache_dtype`` (``mla_attention.py``
    lines 487-490), as given or as ``fp8_ds_mla`` once the sparse backend vLLM picks for the
    replaced inner attention rewrote it (lines 358-375, 522-528), and the forced
    ``Dots3NotePaddedSparseBackend`` (``models/dots3_note/nvidia/attention.py`` lines 693-709,
    ``model.py`` lines 227-231) never rewrites it back."""
    dtype = get_kv_dtype(kv_dtype, engine="vllm", model_dtype=spec.torch_dtype)
    if dtype.name in ("bfloat16", "float16"):
        return dtype.name
    if dots3_has_dsa(spec):
        raise LayoutNotApplicable(
            f"kv_dtype: {dtype.name} for Dots3-Note: vLLM 0.32 does not serve it; its DSA layers "
            f"(Dots3NotePaddedSparseImpl, models/dots3_note/nvidia/attention.py lines 712-717) "
            f"raise {DSA_KV_REFUSAL}, given the dtype as is or as fp8_ds_mla "
            "(model_executor/layers/attention/mla_attention.py lines 358-375, 522-528); pass "
            "--kv-cache-dtype auto"
        )
    raise LayoutNotApplicable(
        f"kv_dtype: {dtype.name} for a Dots3-Note without DSA layers is not modelled (its "
        "sliding layers' quantized pages were not read); pass --kv-cache-dtype auto, or measure"
    )


def _raw_int(raw: dict[str, Any], key: str, why: str) -> int:
    value = raw.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise LayoutNotApplicable(
            f"{key}: vLLM 0.32 reads it from Dots3-Note's config as written ({why}) and the config "
            f"has {value!r}; add it to config.json, or use --engine hf"
        )
    return value


def _check_format(spec: ModelSpec) -> None:
    if spec.model_type != "dots3_note":
        raise LayoutNotApplicable(
            f"model_type: {spec.model_type!r}: vLLM 0.32 reads Dots3-Note only in the checkpoint's "
            "flat format, model_type dots3_note (transformers_utils/config.py line 94 registers "
            "its Dots3NoteConfig for that name; its transformers 5.19 has no dots3_note_text); use "
            "that config.json, or --engine hf"
        )
    raw = spec.raw_config
    pattern = raw.get("index_topk_pattern")
    freq = raw.get("index_topk_freq", 1)
    if (isinstance(pattern, list) and "S" in pattern) or freq != 1:
        raise LayoutNotApplicable(
            "index_topk_pattern: DSA layers without an indexer (index_topk_freq / "
            "index_topk_pattern, model_executor/models/deepseek_v2.py lines 1144-1168) are not "
            "modelled for Dots3-Note in the vllm layout; use --engine hf, or measure"
        )


def dots3_layer_specs(
    spec: ModelSpec,
    *,
    kv_dtype: str,
    block_size: int | None,
    mtp_layer_types: Sequence[str] = (),
    extra_retained_tokens: int = 0,
) -> list[Dots3Spec]:
    """Every cache spec of every decoder layer, in vLLM's registration order (module docstring).

    ``kv_dtype`` is vLLM's name (``auto`` allowed); ``block_size=None`` is vLLM's default, 64.
    ``mtp_layer_types``: the MTP drafter's layers
    (:func:`kvbudget.capacity.mtp_dots3.dots3_mtp_layer_types`), registered after every target
    layer at ``num_hidden_layers + k``; ``extra_retained_tokens``
    (:func:`kvbudget.capacity.mtp_dots3.dots3_extra_retained_tokens`) widen every sliding spec's
    window as kept in the pool."""
    _check_format(spec)
    element = 2  # bfloat16 / float16 (dots3_kv_dtype)
    dots3_kv_dtype(spec, kv_dtype)
    block = DOTS3_BLOCK_SIZE if block_size is None else block_size
    if block < 1 or block % DOTS3_BLOCK_SIZE:
        raise ConfigError(
            f"block_size: {block} for Dots3-Note; vLLM 0.32's sparse MLA and indexer backends "
            f"take blocks of a multiple of {DOTS3_BLOCK_SIZE} tokens ('No common block size', "
            f"v1/worker/utils.py lines 515-561); choose --block-size {DOTS3_BLOCK_SIZE} or a "
            "multiple",
            field="block_size",
        )
    raw = spec.raw_config
    types = raw.get("layer_types")
    if not isinstance(types, list) or len(types) != spec.num_layers:
        raise LayoutNotApplicable(
            "layer_types: vLLM 0.32 reads Dots3-Note's layer kinds from config.layer_types "
            "(models/dots3_note/nvidia/model.py line 526; its DeepseekV3Config derives none) and "
            f"the config has {str(types)[:40]}; add layer_types to config.json, or use --engine hf"
        )
    why = "models/dots3_note/nvidia/model.py lines 306 and 366-369"
    width = _raw_int(raw, "swa_kv_lora_rank", why) + _raw_int(raw, "swa_qk_rope_head_dim", why)
    row = width * element  # one latent row, padded or sliding
    out: list[Dots3Spec] = []
    window: int | None = None
    for i, name in enumerate([*types, *mtp_layer_types]):
        if name == "sliding_attention":
            if window is None:
                window = _raw_int(raw, "sliding_window_size", "model.py line 480")
                window += extra_retained_tokens
            out.append(
                Dots3Spec(i, "sliding", "sliding", block, block * row, sliding_window=window)
            )
            continue
        _raw_int(raw, "index_topk", "model.py line 587; deepseek_v2.py line 1138")
        index_dim = _raw_int(raw, "index_head_dim", "deepseek_v2.py line 699")
        latent = _dsa_latent(spec, i) if i < len(types) else _mtp_latent(raw)
        if latent > width:
            raise LayoutNotApplicable(
                f"kv_lora_rank: layer {i}'s latent ({latent}) is wider than the sliding rows it is "
                f"padded to ({width}); vLLM 0.32 asserts physical_head_size >= head_size "
                "(models/dots3_note/nvidia/model.py line 233); fix the config"
            )
        key_bytes = index_dim + index_dim // INDEXER_QUANT_BLOCK * 4
        align = 1 if block == INDEXER_KERNEL_BLOCK else INDEXER_KERNEL_BLOCK * key_bytes
        out.append(
            Dots3Spec(i, "indexer", "mla", block, block * key_bytes, block_stride_alignment=align)
        )
        out.append(Dots3Spec(i, "dsa", "mla", block, block * row, block_stride_alignment=row))
    return out


def _mtp_latent(raw: dict[str, Any]) -> int:
    """A DSA drafter layer's own latent row: its ``Dots3NoteFullAttention`` reads the config's
    ``kv_lora_rank + qk_rope_head_dim`` (``models/dots3_note/nvidia/model.py`` lines 262-274)."""
    why = "models/dots3_note/nvidia/model.py lines 262-274"
    return _raw_int(raw, "kv_lora_rank", why) + _raw_int(raw, "qk_rope_head_dim", why)


def _dsa_latent(spec: ModelSpec, index: int) -> int:
    """Elements of DSA layer ``index``'s own latent row (``kv_lora_rank + qk_rope_head_dim``)."""
    layer = spec.layer_seq[index]
    return layer.kv_lora_rank + layer.qk_rope_head_dim if isinstance(layer, MLA) else 0


def dots3_block_alignment(specs: list[Dots3Spec]) -> int:
    """``_get_kv_cache_bytes_per_block`` (``v1/core/kv_cache_utils.py`` lines 1541-1551): the bytes
    per block are rounded up to the lcm of every layer's block-stride alignment."""
    return lcm(*(s.block_stride_alignment for s in specs)) if specs else 1


def dots3_layout(
    spec: ModelSpec,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str,
    tp: int,
    pp: int,
    dp: int,
    block_size: int | None = None,
) -> LayoutResult:
    """Dots3-Note: each of vLLM 0.32's packed groups (:mod:`kvbudget.capacity.pool_dots3`) holds
    :func:`blocks_held` blocks of its page (the sum of its layers' pages) per sequence; the specs
    have ``max_tp_shards = 1``, so every TP rank holds the same."""
    from kvbudget.capacity.pool_dots3 import dots3_groups  # the pool imports this module

    name = dots3_kv_dtype(spec, kv_dtype)
    packed = dots3_groups(spec, kv_dtype=name, block_size=block_size, pp=pp)
    return packed_layout(
        packed,
        kv_dtype_name=name,
        num_layers=spec.num_layers,
        tokens=tokens,
        seqs=seqs,
        tp=tp,
        pp=pp,
        dp=dp,
        block_size=packed[0].block_size if packed else DOTS3_BLOCK_SIZE,
        note="Dots3-Note in vLLM 0.32: vLLM's packed groups (sliding-window MLA pages; DSA latents "
        "padded to the sliding rows, with the indexer's keys), the same on every TP rank; the "
        "bytes held by each group, not the packed block's alignment padding",
    )
