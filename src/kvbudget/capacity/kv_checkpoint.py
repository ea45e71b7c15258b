"""``--kv-cache-dtype auto`` on a ModelOpt checkpoint that quantizes its KV cache.

vLLM (from 0.14.0) and SGLang store the KV dtype the checkpoint's quantization config names, not
the model dtype, when the KV dtype is left ``auto``; an explicit ``--kv-cache-dtype`` still wins.

* vLLM 0.32.0 ``utils/torch_utils.py`` lines 457-530: for a ``quant_method`` starting with
  ``modelopt`` (an ``hf_quant_config.json`` gets one from its ``producer.name``, see
  :func:`kvbudget.capacity.model_dtype.is_modelopt`), the first set of
  ``quantization.kv_cache_scheme``, ``kv_cache_scheme``, ``quantization.kv_cache_quant_algo``,
  ``kv_cache_quant_algo``; a scheme dict ``{dynamic: false, num_bits: 8, type: float}`` is ``fp8``,
  ``{num_bits: 4, type: float}`` ``nvfp4``; ``MODELOPT_TO_VLLM_KV_CACHE_DTYPE_MAP`` maps ``fp8``
  to ``fp8_e4m3`` and ``nvfp4`` to ``nvfp4``; anything else is logged ("Unknown
  kv_cache_quant_algo") and ``auto`` kept. The version cut-offs are in
  :mod:`kvbudget.capacity.versions`.
* SGLang 0.5.4 ``model_executor/model_runner.py`` lines 1610-1622 (0.5.23
  ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype``): ``auto`` becomes
  ``float8_e4m3fn`` when the ModelOpt config's ``kv_cache_quant_algo`` is ``FP8`` (any case),
  else the model dtype. The ModelOpt config reads it from ``quantization.kv_cache_quant_algo``
  (``hf_quant_config.json``), or flat from a ``kv_cache_scheme`` of 8-bit floats
  (``layers/quantization/modelopt_quant.py``, 0.5.4 lines 175-207). SGLang 0.5.23's
  compressed-tensors and ``Fp8Config`` checkpoints answer ``kv_cache_quant_algo`` too
  (:func:`sglang_quant_config_kv`; 0.5.4's do not).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from kvbudget.capacity.model_dtype import is_modelopt
from kvbudget.capacity.versions import (
    SGLANG_FLAT_KV_ALGO_SINCE,
    SGLANG_KV_FROM_CHECKPOINT_READ,
    SGLANG_QUANT_CONFIG_KV_SINCE,
    VLLM_KV_FROM_CHECKPOINT_SINCE,
    VLLM_NVFP4_KV_FROM_CHECKPOINT_SINCE,
    Version,
    format_version,
)
from kvbudget.spec.model import ModelSpec


@dataclass(frozen=True, slots=True)
class CheckpointKv:
    """What ``--kv-cache-dtype auto`` becomes on this checkpoint, and why (one line).

    ``name`` is the KV dtype the engine stores (``None``: ``auto`` stays the model dtype, and
    ``reason`` says why the checkpoint's field was not taken)."""

    name: str | None
    reason: str


def _kv_field(quant: Mapping[str, object]) -> tuple[str, object] | None:
    """``(field, value)``: the first KV entry vLLM reads (nested under ``quantization`` first)."""
    nested = quant.get("quantization")
    inner = nested if isinstance(nested, dict) else quant
    prefix = "quantization." if inner is not quant else ""
    for key, where, prefix_of in (
        ("kv_cache_scheme", inner, prefix),
        ("kv_cache_scheme", quant, ""),
        ("kv_cache_quant_algo", inner, prefix),
        ("kv_cache_quant_algo", quant, ""),
    ):
        value = where.get(key)
        if value:
            return f"{prefix_of}{key}", value
    return None


def _scheme_name(value: object, four_bit: bool) -> str | None:
    """vLLM's name for a ``kv_cache_scheme`` dict (``fp8``, ``nvfp4``), or None."""
    if not isinstance(value, dict) or value.get("type") != "float":
        return None
    if value.get("dynamic") is False and value.get("num_bits") == 8:
        return "fp8"
    if four_bit and value.get("num_bits") == 4:
        return "nvfp4"
    return None


def _where(model: ModelSpec, field: str, value: object) -> str:
    if isinstance(value, dict):  # a scheme: its keys as written, without quotes
        shown = "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"
    else:
        shown = str(value)
    if len(shown) > 90:
        shown = shown[:87] + "..."
    return f"the checkpoint's {model.quantization_file} {field} = {shown}"


def vllm_checkpoint_kv(model: ModelSpec, kv_dtype: str, version: Version) -> CheckpointKv | None:
    """vLLM ``version``'s ``resolve_kv_cache_dtype_string`` on ``model``'s quantization config;
    ``None`` when there is nothing to say (an explicit ``--kv-cache-dtype``, no ModelOpt config,
    no KV entry)."""
    quant = model.quantization_config
    if kv_dtype.strip().lower() != "auto" or not quant or not is_modelopt(quant):
        return None
    found = _kv_field(quant)
    if found is None:
        return None
    field, value = found
    where = _where(model, field, value)
    v = format_version(version)
    if version < VLLM_KV_FROM_CHECKPOINT_SINCE:
        return CheckpointKv(
            None,
            f"--kv-cache-dtype auto is the model dtype: vLLM {v} does not read {where} (vLLM "
            f"resolves auto from it from {format_version(VLLM_KV_FROM_CHECKPOINT_SINCE)})",
        )
    four_bit = version >= VLLM_NVFP4_KV_FROM_CHECKPOINT_SINCE
    known = {"fp8": "fp8_e4m3", **({"nvfp4": "nvfp4"} if four_bit else {})}
    algo = _scheme_name(value, four_bit) if isinstance(value, dict) else str(value).lower()
    name = known.get(algo or "")
    if name is None:
        return CheckpointKv(
            None,
            f"--kv-cache-dtype auto is the model dtype: vLLM {v} does not map {where} (it maps "
            f"{', '.join(known)}; it logs 'Unknown kv_cache_quant_algo' and keeps auto)",
        )
    return CheckpointKv(
        name,
        f"{name}: --kv-cache-dtype auto follows {where} (vLLM {v} resolve_kv_cache_dtype_string, "
        "utils/torch_utils.py; pass --kv-cache-dtype to choose another)",
    )


def sglang_checkpoint_kv(model: ModelSpec, kv_dtype: str, version: Version) -> CheckpointKv | None:
    """SGLang ``version``'s ``auto`` KV dtype on ``model``'s ModelOpt, compressed-tensors or
    ``Fp8Config`` quant config; ``None`` when there is nothing to say."""
    quant = model.quantization_config
    if kv_dtype.strip().lower() != "auto" or not quant:
        return None
    if not is_modelopt(quant):
        return sglang_quant_config_kv(model, quant, version)
    nested = quant.get("quantization")
    if isinstance(nested, dict):
        field, value = "quantization.kv_cache_quant_algo", nested.get("kv_cache_quant_algo")
    elif isinstance(quant.get("kv_cache_scheme"), dict):
        field, value = "kv_cache_scheme", quant.get("kv_cache_scheme")
    elif version >= SGLANG_FLAT_KV_ALGO_SINCE:
        field, value = "kv_cache_quant_algo", quant.get("kv_cache_quant_algo")
    else:
        return None
    if not value:
        return None
    algo = ("FP8" if _flat_fp8(value) else None) if isinstance(value, dict) else str(value)
    where = _where(model, field, value)
    v = format_version(version)
    unread = (
        ""
        if version in SGLANG_KV_FROM_CHECKPOINT_READ
        else f"; rule read in SGLang {', '.join(map(format_version, SGLANG_KV_FROM_CHECKPOINT_READ))}"
    )
    if algo is None or algo.upper() != "FP8":
        return CheckpointKv(
            None,
            f"--kv-cache-dtype auto is the model dtype: SGLang {v} takes only FP8 from {where}"
            f"{unread}",
        )
    return CheckpointKv(
        "fp8_e4m3",
        f"fp8_e4m3: --kv-cache-dtype auto follows {where} (SGLang {v} model_runner's KV dtype "
        f"rule; pass --kv-cache-dtype to choose another{unread})",
    )


def _flat_fp8(value: Mapping[str, object]) -> bool:
    """SGLang's flat ``kv_cache_scheme`` test: 8-bit floats, whatever ``dynamic`` says."""
    return value.get("type") == "float" and value.get("num_bits") == 8


#: SGLang 0.5.23's ``QUANTIZATION_METHODS`` entries whose class is ``Fp8Config``
#: (``layers/quantization/__init__.py`` lines 64-65)
SGLANG_FP8_CONFIG_METHODS = frozenset({"fp8", "mxfp8"})


def _ct_fp8(scheme: object) -> bool:
    """SGLang 0.5.23 ``CompressedTensorsKVCacheMethod.is_supported_scheme``
    (``compressed_tensors.py`` lines 1275-1285): static symmetric per-tensor 8-bit floats."""
    return (
        isinstance(scheme, dict)
        and scheme.get("type") == "float"
        and scheme.get("num_bits") == 8
        and scheme.get("strategy") == "tensor"
        and bool(scheme.get("symmetric", True))
        and not scheme.get("dynamic", False)
    )


def sglang_quant_config_kv(
    model: ModelSpec, quant: Mapping[str, object], version: Version
) -> CheckpointKv | None:
    """``auto`` on a compressed-tensors or ``Fp8Config`` (``quant_method`` ``fp8`` / ``mxfp8``)
    checkpoint: ``configure_kv_cache_dtype`` (0.5.23 ``mem_cache/kv_cache_dtype.py`` lines 49-59)
    takes ``float8_e4m3fn`` when the quant config's ``kv_cache_quant_algo`` is ``FP8``.
    ``CompressedTensorsConfig.kv_cache_quant_algo`` (``compressed_tensors.py`` lines 142-151) is
    ``FP8`` for a supported ``kv_cache_scheme`` (read flat, line 314), else ``None`` (the
    attention layers log "Ignoring compressed-tensors kv_cache_scheme ...: only static symmetric
    per-tensor FP8 scales are supported.", lines 212-224); ``Fp8Config.from_config`` takes the
    config's flat ``kv_cache_quant_algo`` (``fp8.py`` lines 366-368). ``None`` when the config
    names no KV quantization."""
    method = str(quant.get("quant_method", "")).lower()
    if method == "compressed-tensors":
        field, value, cls = (
            "kv_cache_scheme",
            quant.get("kv_cache_scheme"),
            "CompressedTensorsConfig",
        )
        fp8 = _ct_fp8(value)
    elif method in SGLANG_FP8_CONFIG_METHODS:
        field, value, cls = "kv_cache_quant_algo", quant.get("kv_cache_quant_algo"), "Fp8Config"
        fp8 = isinstance(value, str) and value.upper() == "FP8"
    else:
        return None
    if value is None:
        return None
    where, v = _where(model, field, value), format_version(version)
    if version < SGLANG_QUANT_CONFIG_KV_SINCE:
        # 0.5.4 was read; a release between 0.5.4 and 0.5.23 is assumed to be 0.5.4's
        cutoff = "" if v == "0.5.4" else "; the cut-off between 0.5.4 and 0.5.23 is assumed"
        return CheckpointKv(
            None,
            f"--kv-cache-dtype auto is the model dtype: SGLang {v}'s {cls} has no "
            f"kv_cache_quant_algo, so {where} is not read (SGLang 0.5.23 takes its FP8{cutoff}); "
            "pass --kv-cache-dtype fp8_e4m3 for it",
        )
    unread = "" if version == SGLANG_QUANT_CONFIG_KV_SINCE else "; rule read in SGLang 0.5.23"
    if not fp8:
        said = (
            " (SGLang logs 'Ignoring compressed-tensors kv_cache_scheme ...: only static "
            "symmetric per-tensor FP8 scales are supported.')"
            if cls == "CompressedTensorsConfig"
            else ""
        )
        return CheckpointKv(
            None,
            f"--kv-cache-dtype auto is the model dtype: SGLang {v} takes only FP8 from {where}"
            f"{said}{unread}",
        )
    return CheckpointKv(
        "fp8_e4m3",
        f"fp8_e4m3: --kv-cache-dtype auto follows {where} (SGLang {v} {cls}.kv_cache_quant_algo "
        f"FP8, configure_kv_cache_dtype; pass --kv-cache-dtype to choose another{unread})",
    )
