"""Units: binary byte sizes, ceiling division, parsing and formatting.

All byte figures are binary (KiB = 2**10, MiB = 2**20, GiB = 2**30). Parsers accept
``"80GiB"``, ``"80 GB"`` (decimal, 80e9), ``"1.5TiB"``, plain integers (bytes), and counts
with vLLM's size suffixes.

Single-letter suffixes mean what vLLM 0.32.0's ``human_readable_int`` makes of them
(``vllm/utils/argparse_utils.py``; used by ``--max-model-len``, ``--max-num-batched-tokens``,
``--kv-cache-memory-bytes`` ...): lower case is decimal, upper case binary, so ``1k`` = 1,000,
``1K`` = 1,024, ``128K`` = 131,072, ``25.6k`` = 25,600, ``80g`` = 80e9 and ``80G`` = 80 GiB;
a decimal with a binary suffix (``1.5K``) is refused, as vLLM refuses it. The spelled-out
units stay case-insensitive: ``Ki``/``Mi``/``Gi`` and ``KiB``/``MiB``/``GiB`` binary,
``KB``/``MB``/``GB`` decimal.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from kvbudget.errors import ConfigError, shown_value
from kvbudget.safety.limits import MAX_INT_FLAG

#: largest byte size accepted anywhere (1 EiB)
MAX_BYTES = 1 << 60

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30
TiB = 1 << 40

#: vLLM 0.32.0 ``human_readable_int``: lower case decimal, upper case binary (case matters)
_VLLM_SUFFIXES: dict[str, int] = {
    "k": 10**3,
    "m": 10**6,
    "g": 10**9,
    "t": 10**12,
    "K": KiB,
    "M": MiB,
    "G": GiB,
    "T": TiB,
}

#: spelled-out byte units (case-insensitive)
_BYTE_UNITS: dict[str, int] = {
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
}

#: spelled-out binary count suffixes (case-insensitive)
_COUNT_UNITS: dict[str, int] = {
    "": 1,
    "ki": KiB,
    "mi": MiB,
    "gi": GiB,
    "ti": TiB,
}


def _multiplier(suffix: str, units: dict[str, int]) -> int | None:
    """The factor of ``suffix``: vLLM's single letters (case-sensitive), else ``units``."""
    if suffix in _VLLM_SUFFIXES:
        return _VLLM_SUFFIXES[suffix]
    return units.get(suffix.lower())


def _binary_decimal(number: str, suffix: str) -> bool:
    """vLLM refuses a decimal with a binary single-letter suffix (``1.5K``)."""
    return "." in number and suffix in _VLLM_SUFFIXES and suffix.isupper()


_NUMBER_RE = re.compile(r"^\s*(-?[0-9]+(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def cdiv(a: int, b: int) -> int:
    """Ceiling division for non-negative integers (``-(-a // b)``)."""
    if b <= 0:
        raise ValueError(f"cdiv divisor must be positive, got {b}")
    return -(-a // b)


def parse_bytes(text: str | int | float, *, field: str = "size") -> int:
    """Parse a byte size such as ``"80GiB"``, ``"141 GB"`` or ``1073741824``.

    Bare ``G``/``M``/``K`` are binary (GiB/MiB/KiB) and bare ``g``/``m``/``k`` decimal, as
    vLLM's ``--kv-cache-memory-bytes`` reads them; ``GiB`` is binary and ``GB`` decimal in any
    case. Raises :class:`ConfigError` naming ``field``.
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
        suffix = match.group(2)
        if _binary_decimal(match.group(1), suffix):
            raise ConfigError(
                f"{field}: {text!r} has a decimal with the binary suffix {suffix} (vLLM refuses "
                f"it); write {match.group(1)}{suffix}iB or {match.group(1)}{suffix.lower()}",
                field=field,
            )
    factor = _multiplier(suffix, _BYTE_UNITS)
    if factor is None:
        raise ConfigError(
            f"{field}: unknown unit {suffix!r} in {text!r}; use B, KiB, MiB, GiB, TiB, KB, MB, "
            "GB, TB or vLLM's k/m/g (decimal) and K/M/G (binary)",
            field=field,
        )
    result = value * factor
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
    """Parse an integer count such as ``4096``, ``"128k"`` (128,000) or ``"128K"`` (131,072).

    Suffixes as vLLM 0.32.0's ``human_readable_int`` reads them (module docstring), plus
    ``Ki``/``Mi``. Refuses values below ``minimum`` or above ``maximum`` (2**53 unless lower),
    non-integers (``2.5``, ``1.0005k``) and a decimal with a binary suffix (``1.5K``) with a
    one-line error.
    """
    if isinstance(text, bool):
        raise ConfigError(f"{field}: expected an integer, got {text!r}", field=field)
    if isinstance(text, int):
        value = text
    else:
        match = _NUMBER_RE.match(str(text))
        if not match:
            raise ConfigError(
                f"{field}: {shown_value(text)} is not a whole number; give a positive integer such as 4096",
                field=field,
            )
        number, suffix = match.group(1), match.group(2)
        factor = _multiplier(suffix, _COUNT_UNITS)
        if factor is None:
            raise ConfigError(
                f"{field}: unknown suffix {suffix!r} in {text!r}; use vLLM's k/m/g (1k = 1000) "
                "or K/M/G (1K = 1024)",
                field=field,
            )
        if _binary_decimal(number, suffix):
            raise ConfigError(
                f"{field}: {text!r} has a decimal with the binary suffix {suffix} (vLLM refuses "
                f"it); did you mean {number}{suffix.lower()}?",
                field=field,
            )
        raw = Decimal(number) * factor  # exact: 25.6k is 25,600, not 25,600.000000000004
        if raw > maximum:
            raise ConfigError(
                f"{field}: {str(text)[:40]!r} is beyond the limit of {maximum:,}; give a smaller "
                "count",
                field=field,
            )
        if raw != int(raw):
            raise ConfigError(
                f"{field}: {shown_value(text)} is not a whole number; give a positive integer",
                field=field,
            )
        value = int(raw)
    if value < minimum:
        raise ConfigError(
            f"{field} {text}: must be an integer >= {minimum}, e.g. {max(minimum, 1)}", field=field
        )
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
