"""DeepSeek-V4.1 (``deepseek_v41``) for the engines other than vLLM: one line each saying why.

kvbudget reads V4.1's layers (:mod:`kvbudget.spec.arch_dsv41`) and models vLLM 0.32's pool
(:mod:`kvbudget.capacity.layouts.vllm_dsv41`, :mod:`kvbudget.capacity.pool_dsv41`). The other
layouts would otherwise take its compressed layers for DeepSeek-V4's (ratios 4 / 128, a cache on
every layer), which V4.1 is not:

* ``hf``: transformers 5.24 has no DeepSeek-V4.1 model (``transformers/models/`` holds
  ``deepseek_v4`` only), so there is no transformers cache to lay out;
* ``sglang``: SGLang 0.5.23 serves it (``srt/configs/deepseek_v41.py`` lines 23-71) through its
  DeepSeek-V4 pool with V4.1's own rows and page padding (``srt/mem_cache/
  deepseek_v4_memory_pool.py`` lines 94-115, ``srt/model_executor/pool_configurator.py`` lines
  1390-1440), which kvbudget does not read yet;
* ``llamacpp``: llama.cpp 0c1e570 (llama-cpp-python 0.3.36) has no DeepSeek-V4.1 architecture
  (``src/llama-arch.cpp`` line 83 names ``deepseek4`` only; ``conversion/deepseek.py`` converts
  ``DeepseekV4ForCausalLM``, no V4.1 class).
"""

from __future__ import annotations

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.layouts.vllm_dsv41 import is_deepseek_v41
from kvbudget.spec.model import ModelSpec

__all__ = ["DSV41_ENGINE_REFUSALS", "refuse_dsv41_engine"]

_SGLANG = (
    "SGLang 0.5.23 serves it through its DeepSeek-V4 pool with V4.1's own rows and page padding "
    "(srt/mem_cache/deepseek_v4_memory_pool.py lines 94-115, srt/model_executor/"
    "pool_configurator.py lines 1390-1440), which kvbudget does not model yet; use --engine vllm, "
    "or measure SGLang's pool"
)

#: engine -> why its layout of DeepSeek-V4.1 is refused
DSV41_ENGINE_REFUSALS: dict[str, str] = {
    "hf": (
        "transformers 5.24 has no DeepSeek-V4.1 model (transformers/models/ holds deepseek_v4 "
        "only), so there is no transformers cache to lay out; use --engine vllm"
    ),
    "sglang": _SGLANG,
    "llamacpp": (
        "llama.cpp 0c1e570 (llama-cpp-python 0.3.36) has no DeepSeek-V4.1 architecture "
        "(src/llama-arch.cpp line 83 names deepseek4 only; conversion/deepseek.py converts "
        "DeepseekV4ForCausalLM, no V4.1 class); use --engine vllm"
    ),
}


def refuse_dsv41_engine(spec: ModelSpec, engine: str) -> None:
    """Refuse DeepSeek-V4.1 for ``engine`` in one line, unless ``engine`` models it (vLLM)."""
    reason = DSV41_ENGINE_REFUSALS.get(engine)
    if reason is not None and is_deepseek_v41(spec):
        raise LayoutNotApplicable(
            f"engine: {engine} for model_type {spec.model_type!r} (DeepSeek-V4.1): {reason}"
        )
