"""vLLM's grouping on runs equals the same grouping done layer by layer (engines-kv-accounting §2.1).

The reference below is the per-layer reading of ``get_kv_cache_groups``: bucket the layers by
spec in index order, ``group_size = min`` (``max`` when ``max < 1.5 * min``, strided), then
``bucket[i::num_groups]`` (strided) or ``bucket[i * size:(i + 1) * size]`` (contiguous).
"""

from __future__ import annotations

import pytest

from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.pool import group_layers
from kvbudget.spec.layer_runs import IndexedRuns, Runs
from kvbudget.units import cdiv

FULL = VllmLayerSpec(0, "full", 16, 16384)
SLIDING = VllmLayerSpec(0, "sliding", 16, 16384, sliding_window=512)
NONE = VllmLayerSpec(0, "none", 16, 0)


def reference(kinds: list[str], strided: bool) -> list[tuple[str, list[int], int]]:
    buckets: dict[str, list[int]] = {}
    for i, kind in enumerate(kinds):
        if kind != "none":
            buckets.setdefault(kind, []).append(i)
    if len(buckets) == 1:
        ((kind, members),) = buckets.items()
        return [(kind, members, 0)]
    sizes = [len(b) for b in buckets.values()]
    size = min(sizes)
    if strided and max(sizes) < 1.5 * min(sizes):
        size = max(sizes)
    out = []
    for kind, bucket in buckets.items():
        n = cdiv(len(bucket), size)
        for i in range(n):
            members = bucket[i::n] if strided else bucket[i * size : (i + 1) * size]
            out.append((kind, members, size - len(members)))
    return out


def runs_of(kinds: Runs[str]) -> IndexedRuns[VllmLayerSpec]:
    by_kind = {"full": FULL, "sliding": SLIDING, "none": NONE}
    mapped = kinds.map(lambda kind, i: by_kind[kind])
    return IndexedRuns(mapped.blocks, base=0)


def periodic(n: int, pattern: str) -> Runs[str]:
    names = {"f": "full", "s": "sliding", "n": "none"}
    return Runs.periodic([names[c] for c in pattern], n)


def assert_listed_matches_reference(kinds: list[str]) -> None:
    """A listed ``layer_types``, compressed by runs, groups as the per-layer reading does."""
    runs = runs_of(Runs.from_items(kinds))
    for strided in (True, False):
        got = [
            (g.kind, list(g.layer_indices), g.num_padding_layers)
            for g in group_layers(runs, strided=strided)
        ]
        assert got == reference(kinds, strided)


@pytest.mark.parametrize("strided", [True, False])
@pytest.mark.parametrize(
    ("n", "pattern"),
    [
        (62, "sssssf"),
        (60, "sssssf"),
        (26, "sf"),
        (48, "sssf"),
        (35, "fsssssss"),
        (40, "sssssssf"),
        (37, "ssnf"),
        (30, "f"),
        (1000, "sssssf"),
        (997, "ssssssssssf"),
        (62, "ssnssf"),  # none layers, a cut last period (layers 60, 61: sliding), 5 sliding groups
        (65, "nssnsf"),
        (50, "fsns"),
    ],
)
def test_runs_grouping_equals_per_layer(n: int, pattern: str, strided: bool) -> None:
    kinds = periodic(n, pattern)
    groups = group_layers(runs_of(kinds), strided=strided)
    got = [(g.kind, list(g.layer_indices), g.num_padding_layers) for g in groups]
    assert got == reference(list(kinds), strided)


def test_listed_layers_compressed_by_runs_group_the_same() -> None:
    kinds = ["sliding"] * 7 + ["full"] * 2 + ["sliding"] * 11 + ["full"] * 3 + ["sliding"] * 5
    assert_listed_matches_reference(kinds)


def test_none_layers_and_a_cut_last_period_by_hand() -> None:
    # 62 layers of "ssnssf": 10 full (5, 11, ..., 59), 10 none (2, 8, ..., 56), 42 sliding (four
    # per period plus 60, 61); group_size = 10 (the smaller bucket; 42 >= 1.5 x 10), the sliding
    # bucket splits into cdiv(42, 10) = 5 groups: strided, groups 0 and 1 take 9 layers, 2-4 take 8
    groups = group_layers(runs_of(periodic(62, "ssnssf")), strided=True)
    got = [(g.kind, len(g.layer_indices), g.num_padding_layers) for g in groups]
    assert got == [("sliding", 9, 1)] * 2 + [("sliding", 8, 2)] * 3 + [("full", 10, 0)]
    # the sliding bucket in index order is 0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, ...: group 0 takes
    # every 5th member (bucket[0], bucket[5], bucket[10]); 60 and 61 are members 40 and 41
    assert list(groups[0].layer_indices)[:3] == [0, 7, 15]
    assert 61 in groups[1].layer_indices and 60 in groups[0].layer_indices


def test_listed_layers_with_none_in_the_middle() -> None:
    kinds = (
        ["sliding"] * 7
        + ["none"] * 2
        + ["full"] * 2
        + ["sliding"] * 5
        + ["none"]
        + ["full"] * 3
        + ["sliding"] * 4
    )
    assert_listed_matches_reference(kinds)
    # by hand: 16 sliding, 5 full (9, 10, 17, 18, 19) -> group_size 5, cdiv(16, 5) = 4 groups
    groups = group_layers(runs_of(Runs.from_items(kinds)), strided=False)
    assert [len(g.layer_indices) for g in groups] == [5, 5, 5, 1, 5]
    assert list(groups[-1].layer_indices) == [9, 10, 17, 18, 19]
