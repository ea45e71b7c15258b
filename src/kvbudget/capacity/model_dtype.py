"""The model as vLLM's flags make it: ``--quantization`` (weights), ``--dtype`` (weights,
activations and the ``auto`` KV element) and the Mamba state dtypes."""

from __future__ import annotations

from dataclasses import replace

from kvbudget.capacity.dtypes import EXPLICIT_FLOAT32
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

#: vLLM ``--quantization`` names kvbudget sizes weights for, and the config each one implies
#: when the checkpoint carries no ``quantization_config`` (vLLM's online defaults: fp8 dynamic
#: per-tensor, AWQ/GPTQ 4 bit in groups of 128).
QUANTIZATION_METHODS: dict[str, dict[str, object]] = {
    "fp8": {"quant_method": "fp8"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    "mxfp4": {"quant_method": "mxfp4"},
    "compressed-tensors": {"quant_method": "compressed-tensors"},
}


def with_quantization(model: ModelSpec, method: str | None) -> ModelSpec:
    """``--quantization``: the weights' method (vLLM's names). The KV dtype is not touched.

    As vLLM (``ModelConfig._verify_quantization``), a method that contradicts the config's
    ``quantization_config.quant_method`` is refused.
    """
    if method is None:
        return model
    name = method.strip().lower()
    if name in ("none", ""):
        return replace(model, quantization_config=None)
    existing = model.quantization_config
    if existing is not None:
        found = str(existing.get("quant_method", "")).lower()
        if found and found != name:
            raise ConfigError(
                f"quantization: --quantization {name} contradicts the config's quantization_config "
                f"({found}); vLLM refuses this; drop --quantization or pass --quantization {found}",
                field="quantization",
            )
        return model
    if name not in QUANTIZATION_METHODS or name == "compressed-tensors":
        known = ", ".join(m for m in QUANTIZATION_METHODS if m != "compressed-tensors")
        raise ConfigError(
            f"quantization: {method!r} is not a method kvbudget sizes without a quantization_config "
            f"(known: {known}); pass --weights-bytes from the engine log",
            field="quantization",
        )
    return replace(model, quantization_config=dict(QUANTIZATION_METHODS[name]))


#: vLLM's ``--dtype`` names (0.19.0 ``vllm/config/model.py`` ``_STR_DTYPE_TO_TORCH_DTYPE``)
VLLM_DTYPES = {
    "half": "float16",
    "float16": "float16",
    "bfloat16": "bfloat16",
    "float": "float32",
    "float32": "float32",
}


def with_dtype(model: ModelSpec, dtype: str) -> ModelSpec:
    """``--dtype``: the weights' and activations' dtype, and the KV element under
    ``--kv-cache-dtype auto``. ``auto`` keeps the config's dtype except that a float32 checkpoint
    runs in bfloat16 on CUDA (0.19.0 ``_resolve_auto_dtype``: float32 models are downcast to the
    platform's first supported dtype, bfloat16 on compute capability >= 8.0)."""
    name = dtype.strip().lower()
    if name == "auto":
        if (model.torch_dtype or "").removeprefix("torch.") == "float32":
            return replace(model, torch_dtype="bfloat16")
        return model
    if name not in VLLM_DTYPES:
        raise ConfigError(
            f"dtype: {dtype!r} is not one of vLLM's --dtype choices; use auto, half, float16, "
            "bfloat16, float or float32",
            field="dtype",
        )
    resolved = VLLM_DTYPES[name]
    return replace(model, torch_dtype=EXPLICIT_FLOAT32 if resolved == "float32" else resolved)


MAMBA_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def mamba_dtype_bytes(name: str, field: str) -> int | None:
    """Element bytes of vLLM's ``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype`` (None: auto)."""
    key = name.strip().lower()
    if key == "auto":
        return None
    if key not in MAMBA_DTYPE_BYTES:
        raise ConfigError(
            f"{field}: {name!r} is not one of vLLM's choices; use auto, float32, bfloat16 or float16",
            field=field,
        )
    return MAMBA_DTYPE_BYTES[key]
