"""Model types kvbudget knows it does not model, each with the one line that says why.

Without an entry such a config reaches the generic reading, whose refusal ("supply --set
layer_types=...") points the user at a fix that cannot be right.

* DeepSeek-V4.1 (``deepseek_v41``, its text model ``deepseek_v41_text``): both engines serve it
  (vLLM 0.32.0 registers ``DeepseekV41ForCausalLM`` in ``model_executor/models/registry.py``
  lines 373-375 and flattens its ``text_config`` in ``transformers_utils/configs/deepseek_v41.py``
  lines 8-50; SGLang 0.5.23 registers ``DeepseekV41Config`` in ``srt/utils/hf_transformers/
  common.py`` line 226, ``srt/configs/deepseek_v41.py`` lines 23-71), but it is not DeepSeek-V4:
  its compress ratios 1 and 2 keep compressed KV and compressors only on
  ``kv_source_layer_ids`` and indexers only on ``index_source_layer_ids``, the other layers
  reading the nearest source below them (vLLM ``models/deepseek_v41/attention.py`` lines
  303-350, which refuses ratios other than 0, 1 and 2: "only 0 (sliding window), 1 and 2 are
  supported."; SGLang ``srt/mem_cache/deepseek_v4_memory_pool.py`` lines 94-115 and
  ``srt/model_executor/pool_configurator.py`` lines 1390-1440, with its own page padding), and
  it adds Engram n-gram tables on ``engram_layer_ids`` (vLLM ``models/deepseek_v41/nvidia/
  model.py`` lines 291-316, ``common/engram.py``). None of that is read by kvbudget yet.
"""

from __future__ import annotations

__all__ = ["NOT_MODELLED"]

_DSV41 = (
    "model_type {model_type!r} is DeepSeek-V4.1, which kvbudget does not model yet: its "
    "compress ratios 1 and 2 keep compressed KV only on kv_source_layer_ids and indexer keys only "
    "on index_source_layer_ids (vLLM 0.32 models/deepseek_v41/attention.py lines 303-350; SGLang "
    "0.5.23 srt/mem_cache/deepseek_v4_memory_pool.py lines 94-115), and Engram tables sit on "
    "engram_layer_ids; pass --kv-cache-memory and --weights-bytes from the engine's log, or use "
    "the explicit mode (--layers/--kv-heads/--head-dim)"
)

#: model_type -> the one-line refusal (``{model_type}`` filled in)
NOT_MODELLED: dict[str, str] = {
    "deepseek_v41": _DSV41,
    "deepseek_v41_text": _DSV41,
}
