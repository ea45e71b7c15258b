"""The measured step-time model: what it asks aiconfigurator-core for each step, and what it
makes of the answers (kvbudget.sim.measured, kvbudget.sim.aic).

Independent figures:

* the chunk decomposition, by hand from ``pairs = sum n (c + (n + 1)/2)`` and
  ``ctx = sum (c + n)`` of chunks written out below;
* the estimator's arguments, from aiconfigurator-core's ``Engine::mixed_step_breakdown`` source
  (context attention of ``ceil(ctx/isl)`` sequences of ``isl - prefix`` new tokens after
  ``prefix``; decode attention at ``s = isl + osl // 2 + 1``; ``decode_step_latency`` at the same
  ``s``): a fake engine records them;
* a real step, from the wheel's own table file ``systems/data/h100_sxm/gemm/vllm/0.24.0/
  gemm_perf.parquet`` read with pandas: Qwen3-32B at TP 2 has a QKV GEMM of n = (64 + 2 x 8) x
  128 / 2 = 5,120 by k = 5,120 (config.json: 64 query heads, 8 KV heads, head_dim 128, hidden
  5,120) in each of its 64 layers; a decode step of 8 sequences runs it at m = 8 (bf16).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from kvbudget.sim.measured import MeasuredTiming, StepArgs, bucket, prefill_chunks, step_args
from kvbudget.sim.roofline import BatchShape


def _shape(chunks: list[tuple[int, int]], decodes: list[int]) -> BatchShape:
    """The simulator's aggregate of prefill chunks ``(n new, c cached)`` and decode contexts."""
    return BatchShape(
        num_prefill_tokens=sum(n for n, _ in chunks),
        prefill_pairs=sum(n * (c + (n + 1) / 2) for n, c in chunks),
        prefill_context_tokens=sum(c + n for n, c in chunks),
        num_decode_seqs=len(decodes),
        decode_context_tokens=sum(decodes),
    )


@pytest.mark.parametrize(
    ("chunks", "expected"),
    [
        ([(512, 0)], (1, 512, 0)),
        ([(256, 1024)], (1, 256, 1024)),
        ([(128, 0)] * 4, (4, 128, 0)),
        ([(100, 300)] * 2, (2, 100, 300)),
    ],
)
def test_equal_chunks_are_recovered_from_the_aggregate(
    chunks: list[tuple[int, int]], expected: tuple[int, int, int]
) -> None:
    s = _shape(chunks, [])
    assert prefill_chunks(s.num_prefill_tokens, s.prefill_pairs, s.prefill_context_tokens) == (
        expected
    )


def test_no_prefill_is_no_chunk() -> None:
    assert prefill_chunks(0, 0.0, 0) == (0, 0, 0)


@pytest.mark.parametrize(
    ("value", "expected"),
    # exact to 32; 1001 / 16 = 62.56 -> 63 x 16; 4097 / 128 = 32.008 -> 32 x 128
    [(0, 0), (31, 31), (32, 32), (33, 33), (100, 100), (1001, 1008), (4097, 4096)],
)
def test_buckets(value: int, expected: int) -> None:
    assert bucket(value) == expected


class FakeEngine:
    """Records the estimator calls; answers from fixed tuples (milliseconds)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []

    def mixed_step_breakdown(
        self, ctx_tokens: int, gen_tokens: int, isl: int, osl: int, prefix: int = 0
    ) -> tuple[float, float, float, float]:
        self.calls.append(("mixed", (ctx_tokens, gen_tokens, isl, osl, prefix)))
        # total, shared non-attention, context attention, decode attention
        return (100.0, 7.0, 3.0, 2.0)

    def decode_step_latency(self, gen_tokens: int, isl: int, osl: int) -> float:
        self.calls.append(("decode", (gen_tokens, isl, osl)))
        return 10.0


def test_a_decode_step_is_one_generation_step_at_the_mean_context() -> None:
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    # 8 sequences at 1,008 tokens of context (a bucket's own value, 63 x 16):
    # s = isl + 1 // 2 + 1 = 1,008 -> isl 1,007, osl 1
    assert timing.step_time_s(_shape([], [1008] * 8)) == pytest.approx(0.010)
    assert engine.calls == [("decode", (8, 1007, 1))]


def test_a_mixed_step_is_shared_work_plus_both_attentions() -> None:
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    # one chunk of 256 after 1,024 cached, 8 decodes at 1,008
    price = timing.step_time_s(_shape([(256, 1024)], [1008] * 8))
    assert price == pytest.approx((7.0 + 3.0 + 2.0) / 1e3)
    assert engine.calls == [
        ("mixed", (256, 8, 1280, 1, 0)),  # non-attention ops of 256 + 8 tokens
        ("mixed", (1280, 0, 1280, 1, 1024)),  # ceil(1280/1280) = 1 chunk of 256 after 1,024
        ("mixed", (0, 8, 1007, 1, 0)),  # decode attention at s = 1,008
    ]


def test_a_prefill_only_step_has_no_decode_attention() -> None:
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    assert timing.prefill_time_s(512) == pytest.approx((7.0 + 3.0) / 1e3)
    # the shared part and the context attention ask the same breakdown here (no decodes, no
    # cached tokens): called once, both parts read from it
    assert [c[1] for c in engine.calls] == [(512, 0, 512, 1, 0)]


def test_decode_attention_alone_is_the_breakdowns_decode_part() -> None:
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    # 48 sequences of 8,250 tokens each: the fourth part (2 ms) of the breakdown the mixed step
    # asks for its decodes, at s = 8,250 -> isl 8,249; no GEMM part, unbucketed
    assert timing.decode_attention_time_s(48, 8250) == pytest.approx(2.0 / 1e3)
    assert engine.calls == [("mixed", (0, 48, 8249, 1, 0))]
    assert timing.decode_attention_time_s(0, 8250) == 0.0
    assert len(engine.calls) == 1


def test_each_bucket_is_priced_once() -> None:
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    for _ in range(3):
        timing.step_time_s(_shape([], [1008] * 8))
    timing.step_time_s(_shape([], [1013] * 8))  # 1,013 / 16 = 63.3 -> 63 x 16 = 1,008
    assert len(engine.calls) == 1
    timing.step_time_s(_shape([], [1017] * 8))  # 1,017 / 16 = 63.6 -> 64 x 16 = 1,024
    assert len(engine.calls) == 2
    assert timing.num_priced == 2
    assert timing.step_time_s(BatchShape()) == 0.0
    assert step_args(_shape([], [1013] * 8)) == StepArgs(0, 0, 0, 8, 1008)


def test_a_real_decode_step_reads_the_gemm_table() -> None:
    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)
    import pandas

    from kvbudget.sim.aic import MeasuredCase, compile_measured
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model("Qwen/Qwen3-32B")
    assert resolved.source is not None
    case = MeasuredCase("Qwen/Qwen3-32B", resolved.source.raw, "H100-SXM", tp=2)
    timing = compile_measured(case, Path("/tmp/kvbudget-test-aic"))
    assert timing.name == "measured (aiconfigurator-core 0.12.0, h100_sxm, vllm 0.24.0 tables)"
    table = resources.files("aiconfigurator_core") / "systems/data/h100_sxm/gemm/vllm/0.24.0"
    gemm = pandas.read_parquet(str(table / "gemm_perf.parquet"))
    row = gemm[
        (gemm.m == 8) & (gemm.n == 5120) & (gemm.k == 5120) & (gemm.gemm_dtype == "bfloat16")
    ]
    qkv_ms = 64 * float(row.latency.iloc[0])
    engine = timing.engine
    ops = {name: ms for name, ms, _e, _src in engine.decode_step_per_op(8, 1007, 1)}  # type: ignore[attr-defined]
    assert ops["generation_qkv_gemm"] == pytest.approx(qkv_ms, rel=1e-9)
    step_s = timing.step_time_s(_shape([], [1008] * 8))
    assert step_s == pytest.approx(sum(ops.values()) / 1e3, rel=1e-9)
    assert qkv_ms / 1e3 < step_s


def test_a_compiled_spec_is_kept_and_read_back(tmp_path: Path) -> None:
    """The second compile of the same case builds the estimator from the kept spec bytes
    (the wheel's ``EngineHandle(spec_bytes)``) and prices a step exactly as the first did;
    another TP is another spec."""
    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)

    from kvbudget.sim import aic
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model("Qwen/Qwen3-32B")
    assert resolved.source is not None
    case = aic.MeasuredCase("Qwen/Qwen3-32B", resolved.source.raw, "H100-SXM", tp=2)
    first = aic._compile(case, "h100_sxm", None, None, None, tmp_path)
    kept = list((tmp_path / "specs").rglob("*.spec"))
    assert len(kept) == 1 and kept[0].read_bytes() == first.spec_bytes
    again = aic._compile(case, "h100_sxm", None, None, None, tmp_path)
    assert again is not first and again.spec_bytes == first.spec_bytes
    assert again.decode_step_per_op(8, 1007, 1) == first.decode_step_per_op(8, 1007, 1)
    tp4 = aic.MeasuredCase("Qwen/Qwen3-32B", resolved.source.raw, "H100-SXM", tp=4)
    aic._compile(tp4, "h100_sxm", None, None, None, tmp_path)
    assert len(list((tmp_path / "specs").rglob("*.spec"))) == 2
    assert aic.table_version("h100_sxm", tmp_path) == "0.24.0"
    assert (tmp_path / "specs" / "aic-0.12.0" / "tables-h100_sxm.txt").read_text() == "0.24.0"


def test_a_corrupt_kept_spec_is_compiled_again_and_replaced(tmp_path: Path) -> None:
    """A truncated spec file in the cache (a crash mid-write by another tool, a full disk) is a
    cache miss: the case is compiled again, the file replaced, the prices the same."""
    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)

    from kvbudget.sim import aic
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model("Qwen/Qwen3-32B")
    assert resolved.source is not None
    case = aic.MeasuredCase("Qwen/Qwen3-32B", resolved.source.raw, "H100-SXM", tp=2)
    first = aic._compile(case, "h100_sxm", None, None, None, tmp_path)
    (kept,) = list((tmp_path / "specs").rglob("*.spec"))
    kept.write_bytes(first.spec_bytes[:100])
    again = aic._compile(case, "h100_sxm", None, None, None, tmp_path)
    assert kept.read_bytes() == first.spec_bytes
    assert again.decode_step_per_op(8, 1007, 1) == first.decode_step_per_op(8, 1007, 1)


def test_kept_answers_are_the_estimators_own_bit_for_bit(tmp_path: Path) -> None:
    """A later run answers from the kept file exactly what the estimator answered (floats
    written with repr), without building the estimator; a question not kept builds it."""
    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)

    from kvbudget.sim import aic
    from kvbudget.spec.resolve import resolve_model

    resolved = resolve_model("Qwen/Qwen3-32B")
    assert resolved.source is not None
    case = aic.MeasuredCase("Qwen/Qwen3-32B", resolved.source.raw, "H100-SXM", tp=2)
    handle = aic._compile(case, "h100_sxm", None, None, None, tmp_path)
    path = tmp_path / "answers.json"
    first = aic.KeptEstimator(lambda: handle, path)
    decode_ms = first.decode_step_latency(8, 1007, 1)
    mixed_ms = first.mixed_step_breakdown(1024, 16, 1024, 1, 0)
    assert decode_ms == handle.decode_step_latency(8, 1007, 1)
    assert mixed_ms == handle.mixed_step_breakdown(1024, 16, 1024, 1, 0)
    first.save()

    def refuse() -> object:
        raise AssertionError("the estimator was built for a kept answer")

    again = aic.KeptEstimator(refuse, path)
    assert again.decode_step_latency(8, 1007, 1) == decode_ms
    assert again.mixed_step_breakdown(1024, 16, 1024, 1, 0) == mixed_ms
    built: list[object] = []

    def build() -> object:
        built.append(handle)
        return handle

    later = aic.KeptEstimator(build, path)
    assert later.decode_step_latency(16, 2047, 1) == handle.decode_step_latency(16, 2047, 1)
    assert built == [handle]


def test_auto_without_the_extra_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim import aic
    from kvbudget.sim.fromplan import build_replica

    monkeypatch.setattr(aic, "installed_version", lambda: None)
    built = build_replica(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM"))
    assert built.timing_name == (
        "roofline (auto: aiconfigurator-core is not installed; pip install "
        "'kvbudget[gpu-data]' (installs aiconfigurator-core 0.12.0))"
    )
    assert built.timing.name == built.timing_name


def test_auto_names_the_gpu_it_lacks_and_measured_refuses_it() -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.errors import ConfigError
    from kvbudget.sim.fromplan import build_replica

    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="A100-40GB", max_model_len=8192)
    built = build_replica(request)
    assert built.timing_name.startswith("roofline (auto: GPU A100-40GB: aiconfigurator-core")
    with pytest.raises(ConfigError, match="--timing-model measured: GPU A100-40GB"):
        build_replica(request, timing_model="measured")


def test_the_environment_gives_the_choice_where_no_flag_does(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.errors import ConfigError
    from kvbudget.sim.fromplan import build_replica

    request = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=8192)
    monkeypatch.setenv("KVBUDGET_TIMING_MODEL", "roofline")
    assert build_replica(request).timing_name == "roofline"
    monkeypatch.setenv("KVBUDGET_TIMING_MODEL", "fast")
    with pytest.raises(ConfigError, match="KVBUDGET_TIMING_MODEL=fast: not a timing model"):
        build_replica(request)
    assert build_replica(request, timing_model="roofline").timing_name == "roofline"


def test_llamacpp_slots_are_not_priced_by_vllm_tables() -> None:
    from kvbudget.errors import ConfigError
    from kvbudget.sim.scenario import scenario_from_dict
    from kvbudget.sim.slots_scenario import simulate_slots_scenario

    base = {
        "model": "meta-llama/Llama-3.1-8B",
        "gpu": "H100-SXM",
        "max_model_len": 4096,
        "workload": {"num_requests": 2, "arrivals": {"kind": "closed", "concurrency": 1}},
    }
    summary, _ = simulate_slots_scenario(scenario_from_dict(base))
    assert summary["timing_model"] == "roofline"
    with pytest.raises(ConfigError, match=r"not llama\.cpp's"):
        simulate_slots_scenario(scenario_from_dict({**base, "timing_model": "measured"}))


def test_expert_parallel_splits_the_experts_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    """``--enable-expert-parallel`` on a MoE model at TP 4: aiconfigurator-core is asked for
    moe_tp 1, moe_ep 4 (vLLM's ``FusedMoEParallelConfig`` for one data-parallel rank: EP size =
    TP x DP, TP 1 inside the experts); without it moe_tp 4, moe_ep 1 (its default); a dense model
    ignores the flag as vLLM does."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim import aic
    from kvbudget.sim.fromplan import build_replica

    seen: list[aic.MeasuredCase] = []

    def fake(case: aic.MeasuredCase, cache_dir: Path) -> MeasuredTiming:
        seen.append(case)
        return MeasuredTiming(FakeEngine(), name="measured (fake)")

    monkeypatch.setattr(aic, "compile_measured", fake)
    moe = PlanRequest(model="Qwen/Qwen3-30B-A3B", gpu="H100-SXM", tp=4, max_model_len=8192)
    build_replica(moe, timing_model="measured", expert_parallel=True)
    build_replica(moe, timing_model="measured")
    dense = PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", tp=4, max_model_len=8192)
    build_replica(dense, timing_model="measured", expert_parallel=True)
    assert [(c.moe_tp, c.moe_ep) for c in seen] == [(1, 4), (None, None), (None, None)]


def test_the_tables_price_the_kv_dtype_the_plan_stores(monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's Llama-3.1-70B-Instruct-FP8 ships ``hf_quant_config.json`` with
    ``kv_cache_quant_algo: FP8``; vLLM >= 0.14 turns ``--kv-cache-dtype auto`` into fp8_e4m3
    for it (``resolve_kv_cache_dtype_string``, vllm/utils/torch_utils.py lines 512-530), so its
    attention is priced with fp8 KV; vLLM 0.13 kept auto (the model dtype), and so does
    Llama-3.1-8B's bf16 checkpoint on any version."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim import aic
    from kvbudget.sim.fromplan import build_replica

    seen: list[aic.MeasuredCase] = []

    def fake(case: aic.MeasuredCase, cache_dir: Path) -> MeasuredTiming:
        seen.append(case)
        return MeasuredTiming(FakeEngine(), name="measured (fake)")

    monkeypatch.setattr(aic, "compile_measured", fake)
    fp8 = "nvidia/Llama-3.1-70B-Instruct-FP8"
    for model, version in ((fp8, "0.32.0"), (fp8, "0.13.0"), ("meta-llama/Llama-3.1-8B", "0.32.0")):
        request = PlanRequest(
            model=model, gpu="H100-SXM", tp=4, max_model_len=8192, engine_version=version
        )
        build_replica(request, timing_model="measured")
    assert [c.kv_dtype.startswith("fp8") for c in seen] == [True, False, False]


def test_the_decode_key_gives_the_price_of_the_step_args() -> None:
    """A decode-only step's packed key (m's bucket above s's) finds the price of the same
    StepArgs the general path builds: 8 decodes at 1,013 -> StepArgs(0, 0, 0, 8, 1,008)."""
    engine = FakeEngine()
    timing = MeasuredTiming(engine, name="measured (test)")
    shape = _shape([], [1013] * 8)
    assert timing.step_time_s(shape) == timing.price(step_args(shape)) == pytest.approx(0.010)
    assert timing._decode == {(8 << 40) | 1008: pytest.approx(0.010)}
    assert timing._decode_raw == {(8 << 40) | 1013: pytest.approx(0.010)}
    assert timing.num_priced == 1
    # another unbucketed context of the same bucket: a new raw key, the same price, no call
    asked = len(engine.calls)
    assert timing.step_time_s(_shape([], [1010] * 8)) == timing.step_time_s(shape)
    assert len(timing._decode_raw) == 2 and len(timing._decode) == 1
    assert len(engine.calls) == asked


def test_sim_cli_names_expert_parallel_in_the_label_and_the_note() -> None:
    import json

    import aiconfigurator_core  # noqa: F401  (the gpu-data extra make test installs: never skipped)
    from click.testing import CliRunner

    from kvbudget.cli.sim import sim

    args = ["--model", "Qwen/Qwen3-30B-A3B", "--gpu", "H100-SXM", "--tp", "2"]
    out = CliRunner().invoke(sim, [*args, "--enable-expert-parallel", "--requests", "4", "--json"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert "; expert parallel 2;" in summary["timing_model"]
    assert any("expert-parallel MoE kernels" in n for n in summary["notes"])
