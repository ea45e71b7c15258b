"""KV dtypes: bytes per row, worked from the formats' definitions."""

from __future__ import annotations

import pytest

from kvbudget.capacity.dtypes import dtype_from_element_bytes, get_kv_dtype
from kvbudget.errors import ConfigError


@pytest.mark.parametrize(
    ("engine", "name", "elements", "row_bytes"),
    [
        ("vllm", "bfloat16", 128, 256),
        ("vllm", "fp8", 128, 128),
        ("vllm", "fp8_e5m2", 128, 128),
        ("vllm", "int8_per_token_head", 128, 128 + 4),  # fp32 scale per token per head
        ("vllm", "nvfp4", 128, 64 + 8),  # fp4 data + one fp8 scale per 16 elements
        ("llamacpp", "f16", 64, 128),
        ("llamacpp", "q8_0", 64, 2 * 34),  # 32 int8 + fp16 scale
        ("llamacpp", "q4_0", 64, 2 * 18),  # 16 B nibbles + fp16 scale
        ("llamacpp", "q4_1", 64, 2 * 20),  # + fp16 min
        ("llamacpp", "q5_0", 64, 2 * 22),  # + 4 B high bits
        ("llamacpp", "q5_1", 64, 2 * 24),
        ("llamacpp", "iq4_nl", 64, 2 * 18),
        ("llamacpp", "float16", 64, 128),  # spelled the torch way
    ],
)
def test_row_bytes(engine: str, name: str, elements: int, row_bytes: int) -> None:
    assert get_kv_dtype(name, engine=engine).row_bytes(elements) == row_bytes


def test_auto_means_model_dtype() -> None:
    assert get_kv_dtype("auto", engine="vllm", model_dtype="bfloat16").name == "bfloat16"
    assert (
        get_kv_dtype("auto", engine="vllm", model_dtype="float32").name == "bfloat16"
    )  # served in 16 bit
    assert get_kv_dtype("auto", engine="hf", model_dtype="float32").name == "float32"
    assert (
        get_kv_dtype("auto", engine="llamacpp", model_dtype="bfloat16").name == "f16"
    )  # -ctk default


def test_refusals_name_the_field() -> None:
    with pytest.raises(ConfigError, match="kv dtype 'q8_0' is not supported by vllm"):
        get_kv_dtype("q8_0", engine="vllm")
    with pytest.raises(ConfigError, match="not a multiple of its block"):
        get_kv_dtype("q8_0", engine="llamacpp").row_bytes(48)
    with pytest.raises(ConfigError, match="dtype_bytes"):
        dtype_from_element_bytes(3)
