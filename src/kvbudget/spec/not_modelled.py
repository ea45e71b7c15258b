"""Model types kvbudget knows it does not model, each with the one line that says why.

Without an entry such a config reaches the generic reading, whose refusal ("supply --set
layer_types=...") points the user at a fix that cannot be right. None is listed today:
DeepSeek-V4.1 (``deepseek_v41``, ``deepseek_v41_text``), once refused here, is read by
:mod:`kvbudget.spec.arch_dsv41` and laid out for vLLM 0.32
(:mod:`kvbudget.capacity.layouts.vllm_dsv41`); the engines that do not model it refuse it in
one line each (:mod:`kvbudget.capacity.dsv41_engines`).
"""

from __future__ import annotations

__all__ = ["NOT_MODELLED"]

#: model_type -> the one-line refusal (``{model_type}`` filled in)
NOT_MODELLED: dict[str, str] = {}
