"""Hide AVX-512 and AMX from vLLM's CPU probes in one engine start (tests only).

vLLM's CPU build (0.32.0) asks torch which ISA it may use: ``torch.cpu._is_avx512_supported()``,
``_is_avx512_bf16_supported()``, ``_is_amx_tile_supported()`` (``vllm/platforms/cpu.py``
``import_kernels``; ``vllm/v1/attention/backends/cpu_attn.py`` ``_get_attn_isa``), and torch 2.13
answers them from ``torch.cpu.get_capabilities()`` (cpuinfo's CPUID reading, which no
environment variable changes: ``ATEN_CPU_CAPABILITY`` only picks torch's own kernels). To see on
an AVX-512 machine what vLLM does on an AVX2-only one, the engine's python loads this module
(its directory first on ``PYTHONPATH``, ``KVBUDGET_HIDE_CPU_FEATURES=1``) and every
``avx512*``/``amx*`` capability reads False: vLLM then loads its AVX2 kernels
(``vllm._C_AVX2``) and takes its no-AVX-512 paths, and everything else is the real engine. The
EngineCore child is spawned (``VLLM_WORKER_MULTIPROC_METHOD=spawn`` on CPU) with the same
environment, so it loads this module too.
"""

import os
from types import MappingProxyType

if os.environ.get("KVBUDGET_HIDE_CPU_FEATURES") == "1":
    import torch.cpu

    _real = dict(torch.cpu.get_capabilities())
    _hidden = MappingProxyType(
        {k: (False if k.startswith(("avx512", "amx")) else v) for k, v in _real.items()}
    )
    torch.cpu.get_capabilities = lambda: _hidden  # type: ignore[assignment]
