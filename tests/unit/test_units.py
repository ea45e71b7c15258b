from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvbudget.errors import ConfigError
from kvbudget.units import GiB, MiB, cdiv, format_bytes, parse_bytes, parse_count


def test_parse_bytes_binary_and_decimal() -> None:
    assert parse_bytes("80GiB") == 80 * 2**30
    assert parse_bytes("80G") == 80 * 2**30
    assert parse_bytes("141 GB") == 141 * 10**9
    assert parse_bytes("1.5MiB") == 1_572_864
    assert parse_bytes(1024) == 1024


@pytest.mark.parametrize("bad", ["", "abc", "-1GiB", "12 parsecs", "1e3"])
def test_parse_bytes_rejects(bad: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_bytes(bad, field="--gpu-memory")
    assert "--gpu-memory" in str(info.value)
    assert "\n" not in str(info.value)


def test_parse_count() -> None:
    assert parse_count("4096") == 4096
    assert parse_count("128K") == 128_000
    assert parse_count("128Ki") == 131_072
    for bad in ["0", "-3", "2.5", "x", True]:
        with pytest.raises(ConfigError):
            parse_count(bad, field="--tokens")  # type: ignore[arg-type]


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
