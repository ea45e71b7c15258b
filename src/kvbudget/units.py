"""Units: binary byte sizes, ceiling division, parsing and formatting.

All byte figures are binary (KiB = 2**10, MiB = 2**20, GiB = 2**30). Parsers accept
``"80GiB"``, ``"80 GB"`` (decimal, 80e9), ``"1.5TiB"``, plain integers (bytes), and token
counts like ``"128K"`` (= 131072 when binary suffix ``Ki``, 128000 for ``K``).
"""

from __future__ import annotations

import math
import re

from kvbudget.errors import ConfigError
from kvbudget.safety.limits import MAX_INT_FLAG

#: largest byte size accepted anywhere (1 EiB)
MAX_BYTES = 1 << 60

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

_BYTE_SUFFIXES: dict[str, int] = {
    "": 1,
    "b": 1,
    "kib": KiB,
    "mib": MiB,
    "gib": GiB,
    "tib": TiB,
    "kb": 1000,
    "mb": 1000**2,
    "gb": 1000**3,
    "tb": 1000**4,
    "k": KiB,
    "m": MiB,
    "g": GiB,
    "t": TiB,
}

_COUNT_SUFFIXES: dict[str, int] = {
    "": 1,
    "k": 1000,
    "m": 1000**2,
    "ki": 1024,
    "mi": 1024**2,
}

_NUMBER_RE = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers (``-(-a // b)``)."""
    if b <= 0:
        raise ValueError(f"cdiv divisor must be positive, got {b}")
    return -(-a // b)


def parse_bytes(text: str | int | float, *, field: str = "size") -> int:
    """Parse a byte size such as ``"80GiB"``, ``"141 GB"`` or ``1073741824``.

    Bare ``G``/``M``/``K`` are binary (GiB/MiB/KiB), as ``nvidia-smi`` users expect;
    ``GB``/``MB`` are decimal. Raises :class:`ConfigError` naming ``field``.
    """
    if isinstance(text, bool):
        raise ConfigError(f"{field}: expected a size like 80GiB, got {text!r}", field=field)
    if isinstance(text, int):
        value = float(text)
        suffix = ""
    elif isinstance(text, float):
        value = text
        suffix = ""
    else:
        match = _NUMBER_RE.match(text)
        if not match:
            raise ConfigError(
                f"{field}: cannot read {text!r} as a size; write e.g. 80GiB, 141GB or 1073741824",
                field=field,
            )
        value = float(match.group(1))
        suffix = match.group(2).lower()
    if suffix not in _BYTE_SUFFIXES:
        raise ConfigError(
            f"{field}: unknown unit {suffix!r} in {text!r}; use B, KiB, MiB, GiB, TiB, KB, MB, GB or TB",
            field=field,
        )
    result = value * _BYTE_SUFFIXES[suffix]
    if not math.isfinite(result) or result > MAX_BYTES:
        raise ConfigError(
            f"{field}: {str(text)[:40]!r} is beyond the largest size kvbudget accepts (1 EiB); "
            "give a real memory size such as 80GiB",
            field=field,
        )
    if result < 0:
        raise ConfigError(f"{field}: size must be non-negative, got {text!r}", field=field)
    return int(result)


def parse_count(
    text: str | int, *, field: str = "count", minimum: int = 1, maximum: int = MAX_INT_FLAG
) -> int:
    """Parse a positive integer count such as ``4096``, ``"128K"`` (128,000) or ``"128Ki"``.

    Refuses zero/negative (below ``minimum``), values above ``maximum`` (2**53 unless lower)
    and non-integers with a one-line error.
    """
    if isinstance(text, bool):
        raise ConfigError(f"{field}: expected an integer, got {text!r}", field=field)
    if isinstance(text, int):
        value = text
    else:
        match = _NUMBER_RE.match(str(text))
        if not match:
            raise ConfigError(
                f"{field}: {text!r} is not a whole number; give a positive integer such as 4096",
                field=field,
            )
        suffix = match.group(2).lower()
        if suffix not in _COUNT_SUFFIXES:
            raise ConfigError(
                f"{field}: unknown suffix {suffix!r} in {text!r}; use K, M, Ki or Mi", field=field
            )
        raw = float(match.group(1)) * _COUNT_SUFFIXES[suffix]
        if not math.isfinite(raw) or raw > maximum:
            raise ConfigError(
                f"{field}: {str(text)[:40]!r} is beyond the limit of {maximum:,}; give a smaller "
                "count",
                field=field,
            )
        if raw != int(raw):
            raise ConfigError(
                f"{field}: {text!r} is not a whole number; give a positive integer", field=field
            )
        value = int(raw)
    if value < minimum:
        raise ConfigError(f"{field}: must be an integer >= {minimum}, got {text!r}", field=field)
    if value > maximum:
        raise ConfigError(
            f"{field}: {str(value)[:40]} is beyond the limit of {maximum:,}; give a smaller count",
            field=field,
        )
    return value


def to_mib(num_bytes: int | float) -> float:
    """Bytes to MiB (binary)."""
    return num_bytes / MiB


def to_gib(num_bytes: int | float) -> float:
    """Bytes to GiB (binary)."""
    return num_bytes / GiB


def format_bytes(num_bytes: int | float, *, digits: int = 2) -> str:
    """Human-readable binary size: ``4.00 GiB``, ``128.00 KiB``, ``512 B``."""
    value = float(num_bytes)
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(value) >= size:
            return f"{value / size:.{digits}f} {unit}"
    return f"{int(value)} B"
