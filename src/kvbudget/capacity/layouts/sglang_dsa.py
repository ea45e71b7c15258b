"""SGLang's KV dtype rule and latent row for its DSA models (``is_deepseek_dsa``: DeepSeek-V3.2,
GLM-5, Hunyuan v4; Dots3-Note's full layers), shared by :mod:`kvbudget.capacity.layouts.sglang` and
:mod:`kvbudget.capacity.layouts.sglang_dots3` (which ``sglang`` imports)."""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.errors import ConfigError

__all__ = [
    "DSA_INDEX_KEY_BYTES",
    "DSA_QUANT_BLOCK",
    "DSA_SCALE_BYTES",
    "DSA_SINK_MODEL_TYPES",
    "dsa_latent_bytes",
    "sglang_dsa_dtype",
]

#: ``DSATokenToKVPool.quant_block_size`` (sglang 0.5.23 ``srt/mem_cache/memory_pool.py`` line 5280)
DSA_QUANT_BLOCK = 128
#: the indexer's fp8 key plus one float32 scale per quant block (``index_k_with_scale_buffer_dtype
#: = torch.uint8``, line 5281): 1 byte per element
DSA_SCALE_BYTES = 4
#: ``rope_storage_dtype = torch.bfloat16`` (line 5282): the fp8 latent keeps its rope part in bf16
DSA_ROPE_BYTES = 2
#: indexer key bytes per token per layer: 128 fp8 + one float32 scale (``pool_configurator.py``
#: lines 567-574, 690-699; ``DSATokenToKVPool`` asserts ``index_head_dim == 128``, line 5346)
DSA_INDEX_KEY_BYTES = DSA_QUANT_BLOCK + DSA_QUANT_BLOCK // DSA_QUANT_BLOCK * DSA_SCALE_BYTES

#: model types whose config defaults ``learnable_sink=True`` (sglang ``configs/hy_v4.py`` line 44):
#: SGLang's DSA dtype default stays bfloat16 for them on every GPU
DSA_SINK_MODEL_TYPES = frozenset({"hy_v4"})


def sglang_dsa_dtype(kv_dtype: str, model_type: str, *, sm100: bool = False) -> KvDtype:
    """SGLang's DSA KV dtype (``arg_groups/overrides.py`` ``_dsa_kv_cache_dtype_default``, lines
    490-546): ``auto`` is ``fp8_e4m3`` on compute capability 10+ without learnable sinks, else
    ``bfloat16`` (whatever the model dtype); only ``bfloat16`` and ``fp8_e4m3`` are accepted."""
    key = kv_dtype.strip().lower()
    if model_type in DSA_SINK_MODEL_TYPES and key not in ("auto", "bf16", "bfloat16"):
        raise ConfigError(
            f"kv_dtype: {kv_dtype!r} is refused by SGLang for {model_type} ('Learnable DSA "
            "attention sinks require a bfloat16 KV cache', arg_groups/overrides.py lines "
            "526-531); pass --kv-cache-dtype bfloat16",
            field="kv_dtype",
        )
    if key == "auto":
        key = "fp8_e4m3" if sm100 and model_type not in DSA_SINK_MODEL_TYPES else "bfloat16"
    dtype = get_kv_dtype(key, engine="sglang")
    if dtype.name not in ("bfloat16", "fp8_e4m3", "fp8"):
        raise ConfigError(
            f"kv_dtype: {kv_dtype!r} is not accepted by SGLang for DSA model {model_type} "
            '("DeepSeek DSA only supports bf16/bfloat16 or fp8_e4m3 kv_cache_dtype", '
            "arg_groups/overrides.py line 544); pass --kv-cache-dtype bfloat16 or fp8_e4m3",
            field="kv_dtype",
        )
    return dtype


def dsa_latent_bytes(
    kv_lora_rank: int, qk_rope_head_dim: int, dtype: KvDtype, *, scaled_fp8: bool
) -> int:
    """One token's DSA latent row (``kv_cache_configurator.py`` ``calculate_mla_kv_cache_dim``,
    lines 3412-3475): with ``scaled_fp8`` (an fp8 dtype and Hopper's default ``flashmla_kv``)
    ``kv_lora_rank + kv_lora_rank // 128 * 4 + qk_rope_head_dim * 2`` bytes (fp8 nope, float32
    scales, bf16 rope: 656 for 512/64); otherwise ``kv_lora_rank + qk_rope_head_dim`` values of
    ``dtype`` (576 raw fp8, 1,152 bfloat16)."""
    if not scaled_fp8:
        return dtype.row_bytes(kv_lora_rank + qk_rope_head_dim)
    if kv_lora_rank % DSA_QUANT_BLOCK:
        raise LayoutNotApplicable(
            f"kv_lora_rank: {kv_lora_rank} is not a multiple of {DSA_QUANT_BLOCK}; SGLang asserts "
            "it for the fp8 DSA latent (mem_cache/kv_cache_configurator.py lines 3465-3467); use "
            "--kv-cache-dtype bfloat16"
        )
    return (
        kv_lora_rank
        + kv_lora_rank // DSA_QUANT_BLOCK * DSA_SCALE_BYTES
        + qk_rope_head_dim * DSA_ROPE_BYTES
    )
