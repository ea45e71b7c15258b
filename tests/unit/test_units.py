from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.errors import ConfigError
from kvbudget.units import GiB, MiB, cdiv, format_bytes, parse_bytes, parse_count


def test_parse_bytes_binary_and_decimal() -> None:
    assert parse_bytes("80GiB") == 80 * 2**30
    assert parse_bytes("80G") == 80 * 2**30
    # vLLM 0.32.0 --kv-cache-memory-bytes (human_readable_int): lower case is decimal
    assert parse_bytes("80g") == 80 * 10**9
    assert parse_bytes("20gib") == 20 * 2**30
    assert parse_bytes("141 GB") == 141 * 10**9
    assert parse_bytes("1.5MiB") == 1_572_864
    assert parse_bytes(1024) == 1024


@pytest.mark.parametrize("bad", ["", "abc", "-1GiB", "12 parsecs", "1e3", "1.5G"])
def test_parse_bytes_rejects(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bytes(bad, field="--gpu-memory")
    assert "--gpu-memory" in str(info.value)
    assert "\n" not in str(info.value)


# Expected values: the examples in the docstring of vLLM 0.32.0's human_readable_int
# (vllm/utils/argparse_utils.py: '1k' -> 1,000, '1K' -> 1,024, '25.6k' -> 25,600) and hand
# arithmetic for the rest (k/m/g/t = 10**3/6/9/12, K/M/G/T = 2**10/20/30/40).
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4096", 4096),
        ("1k", 1_000),
        ("1K", 1_024),
        ("25.6k", 25_600),
        ("1.5k", 1_500),
        ("128k", 128_000),
        ("128K", 131_072),
        ("32k", 32_000),
        ("32K", 32_768),
        ("2m", 2_000_000),
        ("2M", 2_097_152),
        ("1g", 10**9),
        ("1G", 2**30),
        ("128Ki", 131_072),
        ("128ki", 131_072),
        (" 10K ", 10_240),
    ],
)
def test_parse_count_reads_suffixes_as_vllm(text: str, expected: int) -> None:
    assert parse_count(text) == expected


@pytest.mark.parametrize("bad", ["0", "-3", "2.5", "x", True, "1.5K", "1.0005k", "3q", "1e3"])
def test_parse_count_refuses(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_count(bad, field="--tokens")  # type: ignore[arg-type]
    assert "--tokens" in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_count_binary_decimal_names_the_fix() -> None:
    with pytest.raises(ConfigError, match=r"1\.5k"):
        parse_count("1.5K", field="--max-model-len")


@given(st.integers(min_value=0, max_value=10**12), st.integers(min_value=1, max_value=10**6))
def test_cdiv_matches_ceiling(a: int, b: int) -> None:
    q = cdiv(a, b)
    assert q * b >= a
    assert (q - 1) * b < a or a == 0


def test_format_bytes() -> None:
    assert format_bytes(4 * GiB) == "4.00 GiB"
    assert format_bytes(128 * 1024) == "128.00 KiB"
    assert format_bytes(3 * MiB) == "3.00 MiB"
    assert format_bytes(12) == "12 B"
