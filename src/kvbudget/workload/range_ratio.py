"""``--random-range-ratio``: per-request lengths as vLLM bench serve's random dataset draws them.

vLLM 0.32.0 ``vllm/benchmarks/datasets/utils.py`` ``get_sampling_params``: with range ratio
``r`` (one float for both, or ``{"input": r_in, "output": r_out}``; each in ``[0, 1)``), the
input length is an integer drawn uniformly from ``[floor(L_in * (1 - r)), ceil(L_in * (1 +
r))]`` and the output length from ``[max(1, floor(L_out * (1 - r))), max(1, ceil(L_out * (1 +
r)))]`` (``rng.integers(low, high + 1)``); the default ratio is ``0.0``
(``datasets/datasets.py``, ``--random-range-ratio``, ``default="0.0"``). vLLM subtracts the
tokenizer's special tokens from ``L_in`` before sampling (the server adds them back); kvbudget
has no tokenizer here, so ``L_in`` is the whole prompt.
"""

from __future__ import annotations

import json
import math
from typing import Any

from kvbudget.errors import ConfigError

FLAG = "--random-range-ratio"


def _ratio(value: Any, text: str) -> float:
    try:
        ratio = float(value)
    except (TypeError, ValueError):
        ratio = math.nan
    if not 0.0 <= ratio < 1.0:
        raise ConfigError(
            f"{FLAG} {text!r}: each ratio must be in [0, 1) as in vllm bench serve; give e.g. "
            '0.1 or \'{"input": 0.3, "output": 0.5}\'',
            field="random_range_ratio",
        )
    return ratio


def parse_range_ratio(text: str) -> tuple[float, float]:
    """``"0.1"`` -> ``(0.1, 0.1)``; ``'{"input": 0.3, "output": 0.5}'`` -> ``(0.3, 0.5)``."""
    raw = str(text).strip()
    if raw.startswith("{"):
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict) or set(data) != {"input", "output"}:
            raise ConfigError(
                f"{FLAG} {text!r}: a JSON mapping needs exactly the keys input and output, "
                'e.g. \'{"input": 0.3, "output": 0.5}\'',
                field="random_range_ratio",
            )
        return _ratio(data["input"], text), _ratio(data["output"], text)
    ratio = _ratio(raw, text)
    return ratio, ratio


def ranged_length(mean_tokens: int, ratio: float, *, minimum: int = 0) -> dict[str, Any]:
    """The length spec (``fixed`` at ratio 0, else ``uniform``) vLLM's sampler draws from."""
    if ratio == 0.0:
        return {"kind": "fixed", "value": mean_tokens}
    low = max(minimum, math.floor(mean_tokens * (1 - ratio)))
    high = max(minimum, math.ceil(mean_tokens * (1 + ratio)))
    return {"kind": "uniform", "low": low, "high": high}
