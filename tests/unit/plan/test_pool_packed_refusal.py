"""State buckets in vLLM 0.32's ``_get_packed_kv_cache_groups`` (``v1/core/kv_cache_utils.py``
lines 1860-1994), on specs with the page sizes vLLM's own spec classes give (``MLAAttentionSpec``
block 16: 16 x head_size B; ``CircularBufferSpec`` block 8: 8 x head_size B).

Both cases were run through vLLM 0.32's own function on the CPU (BLHNC layout): the first raises
``StopIteration``, the second gives the groups ``[m0, m1] (1,536 B), [r0], [r1], [r2], [r3]``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvbudget.capacity.layouts.base import LayoutNotApplicable
from kvbudget.capacity.pool_packed import packed_groups


@dataclass(frozen=True)
class _Spec:
    name: str
    page_size_bytes: int
    bucket_key: str
    is_state: bool = False
    is_sliding: bool = False


def test_an_unsplittable_state_bucket_is_refused_in_one_line() -> None:
    """MLA pages 512, 512 (one page size: not a mixed bucket, so ``repeats_per_group`` is None,
    lines 1903-1925); rings 1,024 x 3 and 2,048 x 1 (a ``CircularBufferSpec`` bucket is always a
    state bucket, line 1942; unbalanced). anchor = max(1 x 1,024, cdiv(3, 4) x 1,024 + cdiv(1, 4)
    x 2,048) = 3,072 (lines 1948-1959); 3,072 // 1,024 = 3 rings a block, cdiv(4, 3) = 2 groups
    (lines 1963-1966), but ``zip`` of the 3 and the 1 ring gives 1 pattern repeat (line 1975):
    the second group is empty and ``UniformTypeKVCacheSpecs.from_specs`` fails on it (lines
    1982-1983)."""
    mla = [_Spec("m0", 512, "mla"), _Spec("m1", 512, "mla")]
    rings = [_Spec(f"r{i}", 1024, "ring", is_state=True) for i in range(3)]
    rings.append(_Spec("r3", 2048, "ring", is_state=True))
    with pytest.raises(LayoutNotApplicable) as info:
        packed_groups([*mla, *rings])
    message = str(info.value)
    assert message.startswith(
        "layers: vLLM 0.32 cannot split a state bucket of 4 specs, pages [1024, 2048] B in 1 "
        "pattern repeats, into 2 groups"
    )
    assert "\n" not in message


def test_a_ring_bucket_splits_by_the_repeats_and_the_states_a_block_holds() -> None:
    """MLA pages 1,024 and 512 (one bucket, mixed and balanced, 1 + 1: floor 1, repeats =
    _approximate_gcd([1, 4], 1) = 1 (d=1 pads 0)); 4 rings of 512 B (balanced, one page): the
    ring bucket splits into max(cdiv(4, 1), cdiv(4, max(1,536 // 512, 1))) = max(4, 2) = 4
    groups (lines 1927-1930, 1961-1966), one ring each (strided, lines 1975-1979)."""
    mla = [_Spec("m0", 1024, "mla"), _Spec("m1", 512, "mla")]
    rings = [_Spec(f"r{i}", 512, "ring", is_state=True) for i in range(4)]
    groups = packed_groups([*mla, *rings])
    assert groups is not None
    assert [[s.name for s in g] for g in groups] == [["m0", "m1"], ["r0"], ["r1"], ["r2"], ["r3"]]
    assert sum(s.page_size_bytes for s in groups[0]) == 1536
