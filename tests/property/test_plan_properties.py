"""Properties of the engine pool: monotone in memory, concurrency bounded by blocks, exact fit check."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool import group_layers, needed_bytes, num_blocks_for
from kvbudget.spec.layers import FullAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec

GiB = 1 << 30


def model(num_layers: int, kv_heads: int, head_dim: int, window_every: int) -> ModelSpec:
    layers: list[FullAttention] = []
    for i in range(num_layers):
        if window_every and i % window_every:
            layers.append(SlidingWindow(i, kv_heads, head_dim, sliding_window=512))
        else:
            layers.append(FullAttention(i, kv_heads, head_dim))
    return ModelSpec(
        model_id="prop",
        architecture="X",
        model_type="x",
        layers=tuple(layers),
        hidden_size=1024,
        num_attention_heads=16,
        vocab_size=32000,
        intermediate_size=4096,
        max_position_embeddings=65536,
        torch_dtype="bfloat16",
    )


shapes = st.tuples(
    st.integers(1, 48),  # layers
    st.sampled_from([1, 2, 4, 8]),  # kv heads
    st.sampled_from([64, 128]),  # head dim
    st.sampled_from([0, 2, 6]),  # sliding pattern (0 = dense)
    st.sampled_from([1, 2, 4, 8]),  # tp
    st.sampled_from([1, 2]),  # pp
)


@settings(max_examples=40, deadline=None)
@given(shape=shapes, a=st.integers(0, 40 * GiB), b=st.integers(0, 40 * GiB))
def test_more_memory_never_fewer_blocks(
    shape: tuple[int, int, int, int, int, int], a: int, b: int
) -> None:
    layers, kv, d, every, tp, pp = shape
    pp = min(pp, layers)
    spec = model(layers, kv, d, every)
    lo, hi = sorted((a, b))
    base = {"model": "prop", "gpu": "H100", "tp": tp, "pp": pp, "max_model_len": 4096}
    small = make_plan(PlanRequest(**base, kv_cache_memory_bytes=lo), spec)
    large = make_plan(PlanRequest(**base, kv_cache_memory_bytes=hi), spec)
    assert small.num_blocks <= large.num_blocks
    assert small.kv_cache_tokens <= large.kv_cache_tokens


@settings(max_examples=40, deadline=None)
@given(shape=shapes, mem=st.integers(1 * GiB, 40 * GiB), length=st.integers(1, 65536))
def test_concurrency_times_blocks_per_request_within_blocks(
    shape: tuple[int, int, int, int, int, int], mem: int, length: int
) -> None:
    layers, kv, d, every, tp, pp = shape
    pp = min(pp, layers)
    spec = model(layers, kv, d, every)
    r = make_plan(
        PlanRequest(
            model="prop", gpu="H100", tp=tp, pp=pp, max_model_len=65536, kv_cache_memory_bytes=mem
        ),
        spec,
    )
    # Properties that need no copy of the per-group formula: below the window nothing is
    # dropped, so every group holds the whole sequence (groups x blocks of L tokens); the count
    # never falls as the sequence grows; and past the window plus one step's tokens only the
    # full-attention groups still grow, by exactly their share of the new blocks.
    assert r.block_size == 16
    num_groups = len(r.groups)
    num_full = sum(1 for g in r.groups if g.kind == "full")
    short = min(length, 512)
    assert r.blocks_for_tokens(short) == num_groups * -(-short // 16)
    assert r.blocks_for_tokens(length) <= r.blocks_for_tokens(length + 1)
    far = 512 + r.in_flight_tokens + 32  # past the window plus every batch in flight
    for extra in (16, 160):
        grown = r.blocks_for_tokens(far + extra) - r.blocks_for_tokens(far)
        assert grown == num_full * (-(-(far + extra) // 16) - -(-far // 16))
    # the engine's own figure: max_concurrency x blocks of one max-length request <= num_blocks
    max_len_blocks = r.blocks_for_tokens(r.max_model_len)
    assert int(r.max_concurrency) * max_len_blocks <= r.num_blocks


@settings(max_examples=60, deadline=None)
@given(
    layers=st.integers(1, 64),
    kv=st.sampled_from([1, 2, 4, 8]),
    d=st.sampled_from([64, 128, 256]),
    block=st.sampled_from([16, 32]),
    length=st.integers(1, 131072),
    avail=st.integers(-GiB, 20 * GiB),
)
def test_error_exactly_when_one_max_length_request_does_not_fit(
    layers: int, kv: int, d: int, block: int, length: int, avail: int
) -> None:
    spec = model(layers, kv, d, 0)
    r = make_plan(
        PlanRequest(
            model="prop",
            gpu="H100",
            max_model_len=length,
            block_size=block,
            kv_cache_memory_bytes=max(0, avail),
            # the pool's fit only: lengths past max_position_embeddings are vLLM's other refusal
            allow_long_max_model_len=True,
        ),
        spec,
    )
    page = 2 * block * kv * d * 2
    needed = (
        layers * -(-length // block) * page
    )  # N_layers x cdiv(L, B) x page, worked independently
    fits = max(0, avail) > 0 and needed <= max(0, avail)
    assert r.fits == fits
    assert (r.error is None) == fits
    if not fits and r.estimated_max_model_len:
        est = r.estimated_max_model_len
        assert layers * -(-est // block) * page <= avail
        assert est == length or layers * -(-(est + 1) // block) * page > avail


@settings(max_examples=60, deadline=None)
@given(
    n_slide=st.integers(1, 30),
    n_full=st.integers(1, 30),
    strided=st.booleans(),
    a=st.integers(0, 10 * GiB),
    b=st.integers(0, 10 * GiB),
)
def test_grouping_covers_every_layer_once_and_blocks_monotone(
    n_slide: int, n_full: int, strided: bool, a: int, b: int
) -> None:
    layers = [VllmLayerSpec(i, "sliding", 16, 4096, sliding_window=128) for i in range(n_slide)]
    layers += [VllmLayerSpec(n_slide + i, "full", 16, 4096) for i in range(n_full)]
    groups = group_layers(layers, strided=strided)
    seen = sorted(i for g in groups for i in g.layer_indices)
    assert seen == list(range(n_slide + n_full))
    size = max(g.num_layers for g in groups)
    assert all(g.num_layers + g.num_padding_layers == size for g in groups)
    lo, hi = sorted((a, b))
    assert num_blocks_for(lo, groups) <= num_blocks_for(hi, groups)
    assert needed_bytes(groups, 1000, 256) <= needed_bytes(groups, 2000, 256)


@settings(max_examples=40, deadline=None)
@given(
    shape=shapes,
    a=st.integers(0, 40 * GiB),
    b=st.integers(0, 40 * GiB),
    page=st.sampled_from([1, 16, 64]),
)
def test_sglang_pool_monotone_and_page_aligned(
    shape: tuple[int, int, int, int, int, int], a: int, b: int, page: int
) -> None:
    layers, kv, d, every, tp, pp = shape
    pp = min(pp, layers)
    spec = model(layers, kv, d, every)
    lo, hi = sorted((a, b))
    base = {
        "model": "prop",
        "gpu": "H100",
        "tp": tp,
        "pp": pp,
        "engine": "sglang",
        "page_size": page,
        "max_model_len": 4096,
    }
    small = make_plan(PlanRequest(**base, kv_cache_memory_bytes=lo), spec)
    large = make_plan(PlanRequest(**base, kv_cache_memory_bytes=hi), spec)
    assert small.kv_cache_tokens <= large.kv_cache_tokens
    assert large.kv_cache_tokens % page == 0
    # the pool never holds more bytes than the rest memory it was given
    assert large.kv_cache_tokens * large.kv_bytes_per_token_per_rank <= hi


def test_blocks_per_sequence_worked_example() -> None:
    """One full and one sliding (window 512) group, 65,536 tokens, vLLM's H100 default of 8,192
    batched tokens: full cdiv(65536, 16) = 4,096 blocks; sliding cdiv(511 + 8192, 16) + 1 = 545
    up to vLLM 0.25 (SlidingWindowSpec.max_memory_usage_bytes, reference
    engines-kv-accounting.md §1.4), and from 0.26.0 with async scheduling on a GPU, 2 batches in
    flight (VllmConfig.max_in_flight_tokens): cdiv(511 + 16384, 16) + 1 = 1,057."""
    for version, sliding in (("0.25.0", 545), ("0.33.0", 1057)):
        r = make_plan(
            PlanRequest(
                model="prop",
                gpu="H100",
                max_model_len=65536,
                kv_cache_memory_bytes=8 * GiB,
                engine_version=version,
            ),
            model(2, 8, 128, 2),
        )
        assert r.max_num_batched_tokens == 8192
        assert sorted(g.kind for g in r.groups) == ["full", "sliding"]
        assert r.blocks_for_tokens(65536) == 4096 + sliding
