"""SGLang's ``--kv-cache-dtype auto`` on compressed-tensors and ``Fp8Config`` checkpoints, by hand.

SGLang 0.5.23 ``mem_cache/kv_cache_dtype.py`` lines 49-59 (``configure_kv_cache_dtype``): ``auto``
is ``float8_e4m3fn`` when ``model.quant_config.kv_cache_quant_algo`` is a string equal to ``FP8``
in any case, else the model dtype. Which class the config becomes is its ``quant_method``
(``layers/quantization/__init__.py`` lines 64-65: ``fp8`` / ``mxfp8`` -> ``Fp8Config``; line 81:
``compressed-tensors`` -> ``CompressedTensorsConfig``):

* ``CompressedTensorsConfig.kv_cache_quant_algo`` (``compressed_tensors/compressed_tensors.py``
  lines 142-151) is ``"FP8"`` when ``kv_cache_scheme`` (read flat, line 314) passes
  ``CompressedTensorsKVCacheMethod.is_supported_scheme`` (lines 1275-1285: ``type`` float,
  ``num_bits`` 8, ``strategy`` tensor, ``symmetric`` (default true), not ``dynamic``), else None;
  an unsupported scheme is logged "Ignoring compressed-tensors kv_cache_scheme ...: only static
  symmetric per-tensor FP8 scales are supported." (lines 212-224).
* ``Fp8Config.from_config`` (``layers/quantization/fp8.py`` lines 366-368, 384-386) keeps the
  config's ``kv_cache_quant_algo``.

SGLang 0.5.4: only ``model_executor/model_runner.py`` lines 1610-1622 read ``kv_cache_quant_algo``
(``getattr(quant_config, "kv_cache_quant_algo", None)``) and neither class defines it (``grep``
of 0.5.4's ``layers/quantization``: only ``modelopt_quant.py``), so ``auto`` is the model dtype.

SGLang's own code, run on the CPU, gives the same dtypes (``scripts/check_sglang_checkpoint_kv.py``:
0.5.23's ``configure_kv_cache_dtype`` on its ``Fp8Config`` / ``CompressedTensorsConfig``: static
per-tensor fp8 scheme -> fp8_e4m3, 1 B; ``attn_head`` or dynamic scheme -> bfloat16, 2 B;
``kv_cache_quant_algo`` ``FP8`` / ``fp8`` -> fp8_e4m3; 0.5.4's two classes name no
``kv_cache_quant_algo``).

The model: nvidia/Llama-3.1-70B-Instruct's config.json (80 layers, 8 KV heads of 128, bfloat16)
with its ``quantization_config`` replaced. One SGLang token: 80 x 8 x 128 x 2 (K, V) x 1 B =
163,840 B in fp8, 327,680 B in bfloat16; a ``--kv-cache-memory`` of 3,000 fp8 tokens holds 3,000
fp8 tokens or 1,500 bfloat16 ones (one-token pages).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from kvbudget.capacity.plan_types import PlanResult
from tests.unit.plan.test_plan_checkpoint_kv import (
    BF16_TOKEN_BYTES,
    CONFIG,
    FP8_TOKEN_BYTES,
    _sglang,
)

#: llm-compressor's FP8-KV recipe: static symmetric per-tensor 8-bit floats
STATIC_FP8 = {
    "num_bits": 8,
    "type": "float",
    "strategy": "tensor",
    "dynamic": False,
    "symmetric": True,
}
CT_FP8_WEIGHTS = {
    "quant_method": "compressed-tensors",
    "format": "float-quantized",
    "config_groups": {
        "group_0": {
            "targets": ["Linear"],
            "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": True},
            "input_activations": {
                "num_bits": 8,
                "type": "float",
                "strategy": "token",
                "dynamic": True,
            },
        }
    },
    "ignore": ["lm_head"],
}


def _snapshot(tmp_path: Path, quant: Mapping[str, object]) -> str:
    config = json.loads(CONFIG.read_text("utf-8"))
    config["quantization_config"] = dict(quant)
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    return str(tmp_path)


def _tokens(plan: PlanResult) -> tuple[str, int, int]:
    assert plan.sglang is not None
    return plan.kv_dtype, plan.sglang.cell_size_bytes, plan.sglang.max_total_num_tokens


def test_compressed_tensors_static_fp8_kv_scheme_is_fp8_on_0_5_23(tmp_path: Path) -> None:
    model = _snapshot(tmp_path, {**CT_FP8_WEIGHTS, "kv_cache_scheme": STATIC_FP8})
    plan = _sglang("0.5.23", model)
    assert _tokens(plan) == ("fp8_e4m3", FP8_TOKEN_BYTES, 3_000)
    said = plan.defaults_applied["kv_dtype"]
    assert "CompressedTensorsConfig" in said
    shown = "{num_bits: 8, type: float, strategy: tensor, dynamic: False, symmetric: True}"
    assert f"config.json kv_cache_scheme = {shown}" in said  # the scheme as written
    bf16 = _sglang("0.5.23", model, kv_dtype="bfloat16")  # an explicit dtype wins
    assert _tokens(bf16) == ("bfloat16", BF16_TOKEN_BYTES, 1_500)
    assert "kv_dtype" not in bf16.defaults_applied


def test_compressed_tensors_symmetric_defaults_to_true(tmp_path: Path) -> None:
    """``kv_cache_scheme.get("symmetric", True)``: a scheme without the key is supported."""
    scheme = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False}
    plan = _sglang("0.5.23", _snapshot(tmp_path, {**CT_FP8_WEIGHTS, "kv_cache_scheme": scheme}))
    assert _tokens(plan) == ("fp8_e4m3", FP8_TOKEN_BYTES, 3_000)


def test_0_5_4_keeps_the_model_dtype_and_says_why(tmp_path: Path) -> None:
    plan = _sglang("0.5.4", _snapshot(tmp_path, {**CT_FP8_WEIGHTS, "kv_cache_scheme": STATIC_FP8}))
    assert _tokens(plan) == ("bfloat16", BF16_TOKEN_BYTES, 1_500)
    [line] = [n for n in plan.notes if "kv_cache_scheme" in n]
    assert "SGLang 0.5.4's CompressedTensorsConfig has no kv_cache_quant_algo" in line
    assert "pass --kv-cache-dtype fp8_e4m3" in line
    assert "assumed" not in line  # 0.5.4 itself was read
    between = _sglang(
        "0.5.10", _snapshot(tmp_path, {**CT_FP8_WEIGHTS, "kv_cache_scheme": STATIC_FP8})
    )
    [line] = [n for n in between.notes if "kv_cache_scheme" in n]
    assert "the cut-off between 0.5.4 and 0.5.23 is assumed" in line


def test_an_unsupported_kv_scheme_keeps_the_model_dtype_in_sglangs_words(tmp_path: Path) -> None:
    """A per-head (``attn_head``) or dynamic scheme fails ``is_supported_scheme``."""
    for scheme in ({**STATIC_FP8, "strategy": "attn_head"}, {**STATIC_FP8, "dynamic": True}):
        plan = _sglang("0.5.23", _snapshot(tmp_path, {**CT_FP8_WEIGHTS, "kv_cache_scheme": scheme}))
        assert _tokens(plan) == ("bfloat16", BF16_TOKEN_BYTES, 1_500)
        [line] = [n for n in plan.notes if "kv_cache_scheme" in n]
        assert "SGLang 0.5.23 takes only FP8" in line
        assert "only static symmetric per-tensor FP8 scales are supported." in line


def test_fp8_config_kv_cache_quant_algo_in_any_case(tmp_path: Path) -> None:
    quant = {"quant_method": "fp8", "activation_scheme": "dynamic", "kv_cache_quant_algo": "fp8"}
    model = _snapshot(tmp_path, quant)
    plan = _sglang("0.5.23", model)
    assert _tokens(plan) == ("fp8_e4m3", FP8_TOKEN_BYTES, 3_000)
    assert "config.json kv_cache_quant_algo = fp8" in plan.defaults_applied["kv_dtype"]
    assert _tokens(_sglang("0.5.4", model)) == ("bfloat16", BF16_TOKEN_BYTES, 1_500)


def test_fp8_config_without_a_kv_algo_is_the_model_dtype_without_a_word(tmp_path: Path) -> None:
    plan = _sglang(
        "0.5.23", _snapshot(tmp_path, {"quant_method": "fp8", "activation_scheme": "dynamic"})
    )
    assert _tokens(plan) == ("bfloat16", BF16_TOKEN_BYTES, 1_500)
    assert "kv_dtype" not in plan.defaults_applied
    assert not [n for n in plan.notes if "kv-cache-dtype auto" in n]
