"""SGLang's KV dtype rule for its DSA models (``is_deepseek_dsa``: DeepSeek-V3.2, GLM-5, Hunyuan
v4; Dots3-Note's full layers), shared by :mod:`kvbudget.capacity.layouts.sglang` and
:mod:`kvbudget.capacity.layouts.sglang_dots3` (which ``sglang`` imports)."""

from __future__ import annotations

from kvbudget.capacity.dtypes import KvDtype, get_kv_dtype
from kvbudget.errors import ConfigError

__all__ = ["DSA_SINK_MODEL_TYPES", "sglang_dsa_dtype"]

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
