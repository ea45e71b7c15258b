"""The model as vLLM's flags make it: ``--quantization`` (weights), ``--dtype`` (weights,
activations and the ``auto`` KV element) and the Mamba state dtypes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from kvbudget.capacity.dtypes import EXPLICIT_FLOAT32
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

#: vLLM ``--quantization`` names kvbudget sizes weights for, and the config each one implies
#: when the checkpoint carries no ``quantization_config`` (vLLM's online defaults: fp8 dynamic
#: per-tensor, AWQ/GPTQ 4 bit in groups of 128). ``modelopt`` / ``modelopt_fp4`` are served by
#: vLLM only from a ModelOpt checkpoint (its ``hf_quant_config.json``): without one, kvbudget
#: sizes such an export of the same architecture (FP8 per-tensor; NVFP4 in groups of 16,
#: ``lm_head`` left in the model dtype, as NVIDIA's ``*-FP4`` exports do).
QUANTIZATION_METHODS: dict[str, dict[str, object]] = {
    "fp8": {"quant_method": "fp8"},
    "awq": {"quant_method": "awq", "bits": 4, "group_size": 128},
    "gptq": {"quant_method": "gptq", "bits": 4, "group_size": 128},
    "mxfp4": {"quant_method": "mxfp4"},
    "modelopt": {"quant_method": "modelopt", "quant_algo": "FP8"},
    "modelopt_fp4": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "group_size": 16,
        "exclude_modules": ["lm_head"],
    },
    "compressed-tensors": {"quant_method": "compressed-tensors"},
}


#: the ``quant_algo`` values of an ``hf_quant_config.json`` (no ``quant_method``, ``producer.name``
#: ``modelopt``) that vLLM 0.32.0 gives a ModelOpt ``quant_method``
#: (``transformers_utils/model_arch_config_convertor.py`` lines 270-290; other values are refused
#: there, and a config without ``quant_algo`` keeps no method)
_PRODUCER_ALGOS = frozenset({"FP8", "FP8_PER_CHANNEL_PER_TOKEN", "FP8_PB_WO", "NVFP4"})


def is_modelopt(quant: Mapping[str, object]) -> bool:
    """Whether vLLM reads ``quant`` as a ModelOpt config: its ``quant_method`` starts with
    ``modelopt``, or (an ``hf_quant_config.json``) it names no method, its ``producer.name`` is
    ``modelopt`` and its ``quantization.quant_algo`` is one vLLM gives a method to."""
    method = quant.get("quant_method")
    if method:
        return str(method).lower().startswith("modelopt")
    producer, nested = quant.get("producer"), quant.get("quantization")
    if not isinstance(producer, dict) or producer.get("name") != "modelopt":
        return False
    algo = nested.get("quant_algo") if isinstance(nested, dict) else None
    return algo is not None and str(algo).upper() in _PRODUCER_ALGOS


def modelopt_algo(quant: Mapping[str, object]) -> str | None:
    """A ModelOpt config's upper-cased ``quant_algo`` (flat, or under ``quantization``), or
    ``None`` when the config is not ModelOpt's (vLLM 0.32.0 ``modelopt.py``
    ``_extract_modelopt_quant_algo``)."""
    if not is_modelopt(quant):
        return None
    nested = quant.get("quantization")
    if isinstance(nested, dict):
        return str(nested.get("quant_algo", "")).upper()
    return str(quant.get("quant_algo", "")).upper()


def vllm_quant_name(quant: Mapping[str, object] | None) -> str:
    """The ``--quantization`` name vLLM resolves a ``quantization_config`` to: a ModelOpt
    checkpoint whose algorithm names FP4 is ``modelopt_fp4``, FP8 ``modelopt``
    (``ModelOptNvFp4Config`` / ``ModelOptFp8Config.override_quantization_method``); any other
    config its own ``quant_method``; ``none`` without one."""
    if not quant:
        return "none"
    algo = modelopt_algo(quant)
    if algo is not None:
        return "modelopt_fp4" if "FP4" in algo else "modelopt"
    return str(quant.get("quant_method", "none")).lower()


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
        found = vllm_quant_name(existing)
        if found != "none" and found != name:
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
