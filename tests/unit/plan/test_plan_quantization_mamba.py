"""``plan --quantization`` (weights only) and ``--mamba-cache-dtype`` / ``--mamba-ssm-cache-dtype``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.capacity.layouts.vllm import vllm_layer_specs
from kvbudget.cli.plan import plan
from kvbudget.errors import ConfigError
from kvbudget.spec.catalog import find_catalog_entry
from kvbudget.spec.resolve import resolve_model

LLAMA = "meta-llama/Llama-3.1-8B"
QWEN_NEXT = "Qwen/Qwen3-Next-80B-A3B-Thinking"


def plan_json(args: list[str]) -> dict[str, object]:
    result = CliRunner().invoke(
        plan,
        ["--gpu", "H100", "--kv-cache-memory", "10GiB", "--max-model-len", "8192", "--json", *args],
    )
    assert result.exit_code == 0, result.output
    doc: dict[str, object] = json.loads(result.stdout)
    return doc


def _weights_bytes(doc: dict[str, object]) -> int:
    weights = doc["weights"]
    assert isinstance(weights, dict)
    return int(weights["total_bytes"])


def test_quantization_flag_equals_the_config_carrying_it(tmp_path: Path) -> None:
    """``--quantization fp8`` plans what a config with ``quant_method: fp8`` plans (no edit needed)."""
    entry = find_catalog_entry(LLAMA)
    assert entry is not None
    raw = json.loads(entry.path.read_text("utf-8"))
    edited = tmp_path / "config.json"
    edited.write_text(json.dumps({**raw, "quantization_config": {"quant_method": "fp8"}}), "utf-8")
    flag = plan_json(["--model", LLAMA, "--quantization", "fp8"])
    config = plan_json(["--model", str(edited)])
    plain = plan_json(["--model", LLAMA])
    assert _weights_bytes(flag) == _weights_bytes(config)
    assert _weights_bytes(flag) < _weights_bytes(plain)
    # the KV cache is not quantized by quantized weights
    assert flag["kv_dtype"] == plain["kv_dtype"] == "bfloat16"
    assert flag["num_blocks"] == plain["num_blocks"]


def test_quantization_contradicting_the_config_is_refused(tmp_path: Path) -> None:
    entry = find_catalog_entry(LLAMA)
    assert entry is not None
    raw = json.loads(entry.path.read_text("utf-8"))
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**raw, "quantization_config": {"quant_method": "awq"}}), "utf-8")
    result = CliRunner().invoke(
        plan, ["--model", str(path), "--gpu", "H100", "--quantization", "fp8", "--json"]
    )
    assert result.exit_code != 0
    assert isinstance(result.exception, ConfigError)
    assert "quantization" in str(result.exception) and "awq" in str(result.exception)


def test_mamba_state_dtypes_set_the_gated_delta_net_page() -> None:
    """Hand arithmetic for Qwen3-Next's GDN layer (TP 1): kernel 4, 16 K heads x 128, 32 V heads x 128.

    conv (4 - 1) x (2*16*128 + 32*128) = 3 x 8192 = 24,576 elements; ssm 32 x 128 x 128 = 524,288.
    """
    spec = resolve_model(QWEN_NEXT).spec
    assert spec is not None
    conv, ssm = 24_576, 524_288

    def real_page(**kwargs: int | None) -> int:
        layers = vllm_layer_specs(spec, block_size=4096, **kwargs)  # type: ignore[arg-type]
        return next(s.real_page_size_bytes for s in layers if s.kind == "mamba")

    assert real_page() == (conv + ssm) * 2  # auto: the model dtype (bfloat16)
    assert real_page(mamba_ssm_state_bytes=4) == conv * 2 + ssm * 4
    assert real_page(mamba_state_bytes=4) == (conv + ssm) * 4  # ssm auto follows the conv dtype


def test_mamba_dtype_flag_reaches_the_plan_and_bad_names_are_refused() -> None:
    # TP 4: the 80B model's weights (about 149 GiB) do not load on one H100, and vLLM still
    # loads them and runs its profile run with --kv-cache-memory
    pool = ["--tp", "4"]
    base = plan_json(["--model", QWEN_NEXT, *pool])
    fp32 = plan_json(["--model", QWEN_NEXT, "--mamba-ssm-cache-dtype", "float32", *pool])
    assert int(str(fp32["num_blocks"])) < int(str(base["num_blocks"]))
    result = CliRunner().invoke(
        plan, ["--model", QWEN_NEXT, "--gpu", "H100", "--mamba-cache-dtype", "fp8"]
    )
    assert result.exit_code != 0
    assert "mamba_cache_dtype" in str(result.exception)


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_quantization_int4_methods_shrink_weights(method: str) -> None:
    plain = plan_json(["--model", LLAMA])
    quant = plan_json(["--model", LLAMA, "--quantization", method])
    assert _weights_bytes(quant) < _weights_bytes(plain) // 2
