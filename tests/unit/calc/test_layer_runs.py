"""Run-length layer sequences: the per-layer view equals the explicit list it stands for."""

from __future__ import annotations

import pytest

from kvbudget.spec.arch_common import nth_types, split_types
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layer_runs import LayerSeq, Runs
from kvbudget.spec.layers import FullAttention, SlidingWindow


def gemma_types(n: int, every: int) -> list[str]:
    return ["full_attention" if (i + 1) % every == 0 else "sliding_attention" for i in range(n)]


def test_periodic_types_equal_the_explicit_list() -> None:
    for n in (0, 1, 5, 6, 7, 62, 100):
        for every in (1, 2, 6, 11, 50, 1000):
            assert list(nth_types(n, every, every - 1, "full_attention", "sliding_attention")) == (
                gemma_types(n, every)
            ), (n, every)


def test_small_blocks_whatever_the_period() -> None:
    n = 100_000_000
    for every in (6, 9_999, 10_001, 50_000_000, n):
        types = nth_types(n, every, every - 1, "full_attention", "sliding_attention")
        assert len(types) == n
        assert sum(len(b.pattern) for b in types.blocks) <= 3 * 10_001
        assert sum(len(r) for t, r in types.runs() if t == "full_attention") == n // every
        assert types[every - 1] == "full_attention" and types[every - 2] == "sliding_attention"
        assert types[n - 1] == ("full_attention" if n % every == 0 else "sliding_attention")


def test_split_types() -> None:
    assert list(split_types(5, 2, "full_attention", "sliding_attention")) == [
        "full_attention",
        "full_attention",
        "sliding_attention",
        "sliding_attention",
        "sliding_attention",
    ]


def test_layer_seq_indices_slices_and_runs() -> None:
    full = FullAttention(0, 8, 128)
    sliding = SlidingWindow(0, 8, 128, sliding_window=512)
    seq = LayerSeq.from_runs(
        nth_types(40, 6, 5, "f", "s"),
        lambda t, i: FullAttention(i, 8, 128) if t == "f" else SlidingWindow(i, 8, 128, 0, 512),
    )
    explicit = [
        FullAttention(i, 8, 128) if (i + 1) % 6 == 0 else SlidingWindow(i, 8, 128, 0, 512)
        for i in range(40)
    ]
    assert list(seq) == explicit and seq == tuple(explicit)
    assert seq[5] == FullAttention(5, 8, 128) and seq[-1] == explicit[-1]
    assert list(seq[4:9]) == explicit[4:9] and [x.layer_index for x in seq[4:9]] == [4, 5, 6, 7, 8]
    with pytest.raises(ValueError, match=r"slices with step 1 only"):
        seq[::5]
    # runs: layers 5, 11, ..., 35 full (stride 6), then the 4-layer sliding tail 36..39
    runs = [(type(layer).__name__, indices) for layer, indices in seq.runs()]
    assert ("FullAttention", range(5, 36, 6)) in runs and len(runs) == 6 + 4
    assert sum(len(r) for _, r in runs) == 40
    assert seq.distinct() == [sliding, FullAttention(5, 8, 128)] and full.layer_index == 0
    assert list(LayerSeq.from_items(explicit)) == explicit


def test_replaced_and_chain() -> None:
    seq = LayerSeq.periodic([FullAttention(0, 8, 128)], 10)
    out = seq.replaced({3: FullAttention(3, 4, 64), 9: FullAttention(9, 2, 64)})
    expected = [FullAttention(i, 8, 128) for i in range(10)]
    expected[3], expected[9] = FullAttention(3, 4, 64), FullAttention(9, 2, 64)
    assert list(out) == expected
    assert list(Runs.chain([Runs.periodic("ab", 3), Runs.periodic("c", 2)])) == list("abacc")


def test_layer_indices_json_forms() -> None:
    ids = LayerIndices([range(0, 60, 6), range(1, 60, 6), range(60, 62)])
    assert len(ids) == 22 and 60 in ids and 2 not in ids
    assert list(ids)[:4] == [0, 1, 6, 7]
    assert ids.as_ranges() == [[6 * k, 6 * k + 2] for k in range(10)] + [[60, 62]]
    big = LayerIndices([range(0, 120_000, 6), range(120_000, 120_002)])
    assert big.as_ranges() == [[0, 119_995, 6], [120_000, 120_002]]  # stop: last + 1
    assert LayerIndices.of((0, 1, 2, 5)).as_ranges() == [[0, 3], [5, 6]]
    assert big.split(10, 20) == (12, 18)
    # the k-th index without listing: ids is 0, 1, 6, 7, ..., 54, 55, 60, 61
    assert [ids[k] for k in (0, 1, 2, 3, 19, 20, 21, -1, -22)] == [0, 1, 6, 7, 55, 60, 61, 61, 0]
    assert ids[3:7] == (7, 12, 13, 18) and ids[5:5] == ()
    assert big[19_999] == 119_994 and big[20_000] == 120_000 and big[-1] == 120_001
    with pytest.raises(IndexError):
        ids[22]
    with pytest.raises(ValueError, match=r"step 1"):
        ids[::2]
