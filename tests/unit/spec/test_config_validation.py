"""Issue #30 item 3 and the RoPE part of item 9: contradictory config fields are refused with one
line naming the field, the value and the fix, never coerced into a number (each case gave exit 0
or a ZeroDivisionError before). Types and ranges are transformers' (``bool`` flags, ``int`` sizes;
``modeling_rope_utils.py``: a RoPE factor is a number >= 1)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.errors import SpecError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from tests.unit.calc.helpers_calc import run_main

LLAMA = MODELS_DIR / "meta-llama--Llama-3.1-8B.json"


def _config(tmp_path: Path, **fields: Any) -> str:
    raw = json.loads(LLAMA.read_text(encoding="utf-8"))
    raw.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    return str(path)


BAD = [
    ("intermediate_size", -14336),
    ("intermediate_size", [14336, -1]),
    ("tie_word_embeddings", "false"),
    ("tie_word_embeddings", 0),
    ("max_position_embeddings", -1),
    ("vocab_size", 0),
    ("hidden_size", "4096"),
    ("num_experts_per_tok", 1.5),
    ("use_sliding_window", "no"),
]


@pytest.mark.parametrize(("key", "value"), BAD, ids=[f"{k}={v!r}" for k, v in BAD])
def test_wrong_type_or_range_is_refused(tmp_path: Path, key: str, value: Any) -> None:
    with pytest.raises(SpecError) as exc:
        resolve_model(_config(tmp_path, **{key: value}))
    text = str(exc.value)
    assert text.startswith(f"{key}:") and "\n" not in text
    assert "fix the config" in text


@pytest.mark.parametrize("factor", [-8, 0, 1e300, 0.5, True, "4"])
def test_rope_factor_out_of_range_is_refused(tmp_path: Path, factor: Any) -> None:
    rope = {"rope_type": "linear", "factor": factor}
    with pytest.raises(SpecError, match=r"^rope_scaling\.factor: expected a number from 1"):
        resolve_model(_config(tmp_path, rope_scaling=rope))


def test_nested_rope_parameters_are_checked(tmp_path: Path) -> None:
    """Gemma-4 style: one RoPE block per layer type."""
    rope = {"full_attention": {"rope_type": "yarn", "factor": 0}, "sliding_attention": {}}
    with pytest.raises(SpecError, match=r"rope_parameters\.full_attention\.factor"):
        resolve_model(_config(tmp_path, rope_parameters=rope))


def test_valid_values_still_resolve(tmp_path: Path) -> None:
    path = _config(
        tmp_path,
        tie_word_embeddings=False,
        rope_scaling={"rope_type": "llama3", "factor": 8.0},
        n_shared_experts=0,
    )
    spec = resolve_model(path).spec
    assert spec is not None and spec.tie_word_embeddings is False


def test_plan_refuses_negative_context_in_one_line(tmp_path: Path) -> None:
    """max_position_embeddings -1 crashed plan with ZeroDivisionError."""
    code, _out, err = run_main(
        ["plan", "--model", _config(tmp_path, max_position_embeddings=-1), "--gpu", "H100-80GB"]
    )
    assert code != 0 and "Traceback" not in err
    assert "max_position_embeddings: expected a positive integer" in err


def test_string_bool_cannot_be_set_either(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match=r"^tie_word_embeddings"):
        resolve_model(_config(tmp_path), overrides={"tie_word_embeddings": "false"})


@pytest.mark.parametrize("factor", [-8, 0, 1e300])
def test_fingerprint_refuses_the_rope_factors_calc_refuses(tmp_path: Path, factor: Any) -> None:
    """Issue #30 item 9: fingerprint exited 0 on RoPE factors calc and plan refuse."""
    path = _config(tmp_path, rope_scaling={"rope_type": "linear", "factor": factor})
    code, _out, err = run_main(["fingerprint", "--model", path])
    assert code != 0 and "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("SpecError: rope_scaling.factor: expected")


def test_a_shared_expert_of_size_zero_is_accepted(tmp_path: Path) -> None:
    """The published Qwen3-Coder-480B-A35B-Instruct config (qwen3_moe) carries
    ``shared_expert_intermediate_size: 0`` (no shared expert); it was refused as non-positive."""
    resolved = resolve_model(_config(tmp_path, shared_expert_intermediate_size=0))
    assert resolved.spec is not None, resolved.reason
    with pytest.raises(SpecError, match="shared_expert_intermediate_size"):
        resolve_model(_config(tmp_path, shared_expert_intermediate_size=-1))
