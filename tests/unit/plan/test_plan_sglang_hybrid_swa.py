"""SGLang's generic hybrid SWA pool by version: 0.5.4 sizes the pool as if every layer were full
and splits it after (``model_executor/model_runner.py`` lines 1557-1575); 0.5.23's
``HybridSWAPoolConfigurator`` sizes full tokens as ``int(rest // (F + r x S))`` and floors both
pools to the page (``model_executor/pool_configurator.py`` lines 786-803, 859-893, 907-916), and
refuses a sliding pool at or below ``sliding_window + page_size`` (lines 197-216).

Without ``--swa-full-tokens-ratio`` SGLang takes 0.8 (0.5.23 ``arg_groups/fields/schedule.py``
lines 150-161; 0.5.4 ``server_args.py`` line 235) for the models it runs with the hybrid pool:
0.5.23's ``is_hybrid_swa_model`` architectures (``configs/model_config.py`` lines 2651-2697)
unless ``disable_hybrid_swa_memory`` (Gemma-2/3, Olmo2); 0.5.4 none of these (gpt-oss sets
``disable_hybrid_swa_memory``, ``server_args.py`` line 959; Llama-4 needs
``--hybrid-kvcache-ratio``, ``model_runner.py`` lines 392-400).

A ratio given for a model SGLang runs without the pool is ignored, as SGLang ignores it (0.5.23
only range-checks it, ``arg_groups/kv_cache_hook.py`` lines 427-428, and a model that is not
``is_hybrid_swa`` gets ``DefaultPoolConfigurator``, ``pool_configurator.py`` lines 1716-1725;
0.5.4 reads it in ``set_num_token_hybrid`` only when ``is_hybrid``, ``model_runner.py`` lines
1715-1716). Between 0.5.4 and 0.5.23 (not read) a given ratio is applied with 0.5.4's split.

The test model is a 0.5.23 hybrid SWA architecture (``LagunaForCausalLM``, ``model_config.py``
lines 2651-2697) unless a test says otherwise.

Expected values are worked by hand from those lines (rest given with ``kv_cache_memory_bytes``);
SGLang 0.5.23's own configurator prints the same (``scripts/check_sglang_hybrid_swa_pool.py``:
full 9,984, swa 7,936; the 4,000-token sliding pool's ValueError)."""

from __future__ import annotations

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.spec.layers import FullAttention, SlidingWindow
from kvbudget.spec.model import ModelSpec

#: 8 KV heads x (256 + 256) x 2 B = 8192 B per token per layer, full and sliding alike
LAYER_BYTES = 8192


#: a 0.5.23 hybrid SWA architecture (``configs/model_config.py`` lines 2651-2697)
HYBRID_ARCH = "LagunaForCausalLM"
#: no hybrid SWA architecture of 0.5.23, no 0.5.4 model class
NOT_HYBRID_ARCH = "HybridSwaForCausalLM"
#: an SGLang release between 0.5.4 and 0.5.23, whose hybrid SWA models kvbudget has not read
UNREAD = "0.5.22"


def _model(
    model_type: str = "hybrid_swa", window: int = 4096, architecture: str = HYBRID_ARCH
) -> ModelSpec:
    """21 sliding + 21 full layers (odd indices full)."""
    layers: list[FullAttention] = [
        FullAttention(i, 8, 256) if i % 2 else SlidingWindow(i, 8, 256, sliding_window=window)
        for i in range(42)
    ]
    return ModelSpec(
        model_id=f"test/{model_type}",
        architecture="GptOssForCausalLM" if model_type == "gpt_oss" else architecture,
        model_type=model_type,
        layers=tuple(layers),
        hidden_size=3584,
        num_attention_heads=16,
        vocab_size=256000,
        intermediate_size=14336,
        max_position_embeddings=8192,
        torch_dtype="bfloat16",
    )


def _plan(
    version: str, rest: int, page_size: int, max_len: int = 8192, model: ModelSpec | None = None
) -> PlanResult:
    return make_plan(
        PlanRequest(
            model="hybrid-swa",
            gpu="H100",
            engine="sglang",
            engine_version=version,
            kv_cache_memory_bytes=rest,
            swa_full_tokens_ratio=0.8,
            page_size=page_size,
            max_model_len=max_len,
        ),
        model or _model(),
    )


# rest: 10,000 x (F + 0.8 x S) + 1000 B, F = S = 21 x 8192 = 172,032 B (the +1000 keeps the
# float floor off a tie): 10,000 x 309,657.6 + 1000 = 3,096,577,000 B
REST = 10_000 * 21 * LAYER_BYTES * 18 // 10 + 1000


def test_0523_sizes_full_tokens_then_floors_both_pools() -> None:
    r = _plan("0.5.23", REST, 64)
    assert r.sglang is not None
    # pool_configurator.py 907-916: int(3,096,577,000 // 309,657.6) = 10,000 (10,000.003)
    # 859-893: full = 10,000 // 64 x 64 = 9,984; swa = int(9,984 x 0.8) = int(7,987.2) = 7,987
    # -> 7,987 // 64 x 64 = 7,936
    assert r.sglang.full_tokens == 9984
    assert r.sglang.swa_tokens == 7936
    assert r.sglang.max_total_num_tokens == 9984
    assert r.kv_cache_tokens == 9984
    # pool bytes on the one rank: 9,984 x 172,032 + 7,936 x 172,032 = 17,920 x 172,032
    # = 3,082,813,440 B
    assert r.ranks[0].kv_pool_bytes == 17_920 * 172_032
    assert r.fits


def test_before_0523_the_054_split_after_sizing() -> None:
    """An unread release before the configurator: the given ratio, 0.5.4's split
    (``model_runner.py`` lines 1557-1575), with a note that kvbudget has not read the release."""
    r = _plan(UNREAD, REST, 64)
    assert any("is not read (0.5.4 and 0.5.23 are)" in n for n in r.notes)
    assert r.sglang is not None
    # max_total = 3,096,577,000 // (42 x 8192 = 344,064) = 9,000 (9,000.003) -> 9,000 // 64 x 64
    # = 8,960; model_runner.py 1561-1575: full = int(8,960 x 42 / (0.8 x 21 + 21)) =
    # int(9,955.56) = 9,955; swa = int(9,955 x 0.8) = int(7,964.0) = 7,964
    assert r.sglang.max_total_num_tokens == 8960
    assert r.sglang.full_tokens == 9955
    assert r.sglang.swa_tokens == 7964


def test_0523_refuses_a_sliding_pool_below_the_window() -> None:
    # rest 5,000 x 309,657.6 + 1000 = 1,548,289,000 B -> full int(5,000.003) = 5,000 (page 1),
    # swa = int(5,000 x 0.8) = 4,000 <= 4,096 + 1: validate_swa_pool_size raises (lines 209-216)
    rest = 5_000 * 21 * LAYER_BYTES * 18 // 10 + 1000
    r = _plan("0.5.23", rest, 1, max_len=4096)
    assert r.sglang is not None and r.sglang.swa_tokens == 4000
    assert not r.fits
    assert r.error is not None and r.error.startswith("SWA pool (4000 tokens) cannot hold")
    # 0.5.4's split has no such check: max_total 1,548,289,000 // 344,064 = 4,500; full =
    # int(4,500 x 42 / 37.8) = 5,000 (or 4,999 by float rounding) >= 4,096: fits
    old = _plan(UNREAD, rest, 1, max_len=4096)
    assert old.fits and old.sglang is not None and old.sglang.full_tokens in (4999, 5000)


def test_gpt_oss_ratio_ignored_by_054_taken_by_0523() -> None:
    # 0.5.4 server_args.py line 959 sets disable_hybrid_swa_memory for GPT-OSS, so is_hybrid is
    # off and set_num_token_hybrid never reads the ratio (model_runner.py 392-400, 1715-1716):
    # every layer full, 3,096,577,000 // (42 x 8,192) = 9,000 (9,000.003) -> 8,960 (page 64);
    # 0.5.23's model_overrides/gpt_oss.py does not, and GptOssForCausalLM is a hybrid SWA arch
    # (configs/model_config.py lines 88-90, 2651-2690)
    model = _model("gpt_oss", window=128)
    old = _plan("0.5.4", REST, 64, model=model)
    assert old.sglang is not None and old.sglang.swa_tokens is None
    assert old.sglang.max_total_num_tokens == 8960
    [line] = [n for n in old.notes if n.startswith("--swa-full-tokens-ratio")]
    assert line.startswith("--swa-full-tokens-ratio 0.8 ignored, as SGLang 0.5.4 ignores it: ")
    assert "disable_hybrid_swa_memory for model_type gpt_oss" in line
    r = _plan("0.5.23", REST, 64, model=model)
    assert r.sglang is not None and r.sglang.full_tokens == 9984  # as the first test


def test_0523_plan_takes_the_0523_default_fraction() -> None:
    # the non-MLA H100 TP 1 default worked in test_plan_sglang_mem_fraction_0523.py: 0.83
    r = make_plan(
        PlanRequest(model="hybrid-swa", gpu="H100", engine="sglang", engine_version="0.5.23"),
        _model(),
    )
    assert r.sglang is not None and r.sglang.mem_fraction_static == 0.83


#: gpt-oss-120b (catalog ``openai--gpt-oss-120b.json``): 36 layers alternating sliding (window
#: 128) and full, 8 KV heads x 64, bf16 K and V: 8 x 64 x 2 x 2 = 2,048 B per layer per token;
#: F = S = 18 x 2,048 = 36,864 B
GPT_OSS_HALF_BYTES = 18 * 2048
#: rest 10,000 x (F + 0.8 x S) + 1000 = 10,000 x 66,355.2 + 1000 = 663,553,000 B
GPT_OSS_REST = 10_000 * GPT_OSS_HALF_BYTES * 18 // 10 + 1000


def _gpt_oss(version: str) -> PlanResult:
    from kvbudget.spec.resolve import resolve_model

    spec = resolve_model("openai/gpt-oss-120b").spec
    assert spec is not None
    return make_plan(
        PlanRequest(
            model="openai/gpt-oss-120b",
            gpu="H200",
            engine="sglang",
            engine_version=version,
            kv_cache_memory_bytes=GPT_OSS_REST,
            max_model_len=8192,
        ),
        spec,
    )


def test_gpt_oss_0523_default_hybrid_pool_at_0_8() -> None:
    r = _gpt_oss("0.5.23")
    assert r.sglang is not None
    # GptOssForCausalLM is in SWA_SINK_ARCHS (model_config.py lines 88-96), a hybrid SWA arch
    # (2651-2697), gpt_oss.py sets no disable_hybrid_swa_memory: ratio 0.8 (schedule.py 150-161)
    assert r.sglang.swa_full_tokens_ratio == 0.8
    assert r.defaults_applied["swa_full_tokens_ratio"].startswith("0.8 (SGLang's fallback")
    # pool_configurator.py 907-916: int(663,553,000 // 66,355.2) = int(10,000.015) = 10,000 full
    # tokens; page 1: swa = int(10,000 x 0.8) = 8,000 (> 128 + 1, lines 197-216)
    assert r.sglang.full_tokens == 10_000
    assert r.sglang.swa_tokens == 8000
    assert r.sglang.max_total_num_tokens == 10_000
    assert r.kv_cache_tokens == 10_000
    # pool bytes: 10,000 x 36,864 + 8,000 x 36,864 = 663,552,000 B
    assert r.ranks[0].kv_pool_bytes == 663_552_000


def test_gpt_oss_054_default_keeps_the_full_pool() -> None:
    r = _gpt_oss("0.5.4")
    assert r.sglang is not None
    # server_args.py line 959: disable_hybrid_swa_memory for GPT-OSS; every layer full:
    # cell 36 x 2,048 = 73,728 B; 663,553,000 // 73,728 = 9,000 (9,000.01)
    assert r.sglang.swa_full_tokens_ratio is None and r.sglang.swa_tokens is None
    assert r.sglang.cell_size_bytes == 73_728
    assert r.sglang.max_total_num_tokens == 9000
    said = r.defaults_applied["swa_full_tokens_ratio"]
    assert said.startswith("none (SGLang sets disable_hybrid_swa_memory for model_type gpt_oss")


def test_no_default_pool_outside_sglangs_hybrid_archs() -> None:
    # HybridSwaForCausalLM is no hybrid SWA arch at 0.5.23 (model_config.py 2651-2697) and has
    # no get_attention_sliding_window_size at 0.5.4 (model_runner.py 921-928): every layer full,
    # cell 42 x 8,192 = 344,064 B; 3,096,577,000 // 344,064 = 9,000 (9,000.003)
    for version in ("0.5.23", "0.5.4"):
        r = make_plan(
            PlanRequest(
                model="hybrid-swa",
                gpu="H100",
                engine="sglang",
                engine_version=version,
                kv_cache_memory_bytes=REST,
                max_model_len=8192,
            ),
            _model(architecture=NOT_HYBRID_ARCH),
        )
        assert r.sglang is not None and r.sglang.swa_tokens is None
        assert r.sglang.max_total_num_tokens == 9000
        assert r.defaults_applied["swa_full_tokens_ratio"].startswith("none (")


def test_a_given_ratio_outside_sglangs_hybrid_models_is_ignored_as_sglang_does() -> None:
    """HybridSwaForCausalLM: no 0.5.23 hybrid SWA arch, no 0.5.4 model class. SGLang sizes every
    layer as full whatever the ratio: 3,096,577,000 // 344,064 = 9,000 (9,000.003) -> 8,960 at
    64-token pages; an unread release in between applies it (0.5.4's split, as above)."""
    model = _model(architecture=NOT_HYBRID_ARCH)
    for version, where in (
        ("0.5.23", "pool_configurator.py lines 1716-1725"),
        ("0.5.4", "model_runner.py lines 1715-1716"),
    ):
        r = _plan(version, REST, 64, model=model)
        assert r.sglang is not None and r.sglang.swa_tokens is None
        assert r.sglang.swa_full_tokens_ratio is None
        assert r.sglang.max_total_num_tokens == 8960
        [line] = [n for n in r.notes if n.startswith("--swa-full-tokens-ratio")]
        assert line.startswith(f"--swa-full-tokens-ratio 0.8 ignored, as SGLang {version} ")
        assert f"does not run {NOT_HYBRID_ARCH} with its hybrid SWA pool" in line
        assert where in line
    unread = _plan(UNREAD, REST, 64, model=model)
    assert unread.sglang is not None and unread.sglang.swa_tokens is not None
    gpt_oss = _plan("0.5.23", REST, 64, model=_model("gpt_oss", window=128)).notes
    assert not any(n.startswith("--swa-full-tokens-ratio") for n in gpt_oss)
