"""``sim`` / ``serve --gpu`` / sweep bases take plan's engine inputs: ``--engine-version``,
``--quantization``, ``--kv-dtype``, ``--pp``, ``--enable-expert-parallel``.

Batch defaults by version and GPU, quoted from vLLM 0.19's ``vllm/engine/arg_utils.py``
(``EngineArgs.get_batch_defaults``, lines 2053-2071): a device of >= 70 GiB whose name does not
contain "a100" gets ``max_num_batched_tokens`` 8192 and ``max_num_seqs`` 1024 for the API
server; others 2048 and 256. The A100 exclusion came with PR #17885 (v0.9.0): before it an
A100-80GB got the large defaults.
"""

from __future__ import annotations

import click
import pytest
from click.testing import CliRunner

from kvbudget.cli.main import cli
from kvbudget.errors import ConfigError
from kvbudget.sim.scenario import build_cluster, scenario_from_dict
from kvbudget.sim.timing import BatchShape, GpuPerf, ModelCost, RooflineParams, RooflineTiming


def _config(**fields: object) -> object:
    scenario = scenario_from_dict({"model": "meta-llama/Llama-3.1-8B", **fields})
    return build_cluster(scenario).setups[0]


@pytest.mark.parametrize(
    ("gpu", "version", "expected"),
    [
        ("H100-SXM", "0.19.0", (8192, 1024)),
        ("L40S", "0.19.0", (2048, 256)),
        ("A100-80GB", "0.19.0", (2048, 256)),
        ("A100-80GB", "0.8.5", (8192, 1024)),
    ],
)
def test_batch_defaults_follow_engine_version_and_gpu(
    gpu: str, version: str, expected: tuple[int, int]
) -> None:
    setup = _config(gpu=gpu, engine_version=version, max_model_len=4096)
    cfg = setup.config  # type: ignore[attr-defined]
    assert (cfg.max_num_batched_tokens, cfg.max_num_seqs) == expected


def test_fp8_gemms_priced_at_the_fp8_peak_by_hand() -> None:
    """Toy model, 1e9 active parameters, GEMM peak 2e15 (fp8) vs attention 1e15 (bf16), both at
    efficiency 0.5; a 4096-token prefill: GEMMs 2e9 * 4096 / 1e15, attention
    4 * 2 * 2 * 4 * 4096 * 4097 / 2 / 5e14, weights 2e9 B + KV 1000 B * 8192 at 5e11 B/s."""
    model = ModelCost("toy", 2, 8, 2, 4, 1e9, 2e9, 1000.0)
    params = RooflineParams(compute_efficiency=0.5, bandwidth_efficiency=0.5, step_overhead_s=0)
    gpu = GpuPerf("toy", 80e9, 1e12, 1e15, 1e11, gemm_peak_flops=2e15, gemm_dtype="fp8")
    t = RooflineTiming(model, gpu, params=params)
    n = 4096
    gemm_s = 2e9 * n / 1e15
    attn_s = 4 * 2 * 2 * 4 * (n * (n + 1) / 2) / 5e14
    memory_s = (2e9 + 1000 * 2 * n) / 5e11
    assert gemm_s + attn_s > memory_s
    assert t.prefill_time_s(n) == pytest.approx(gemm_s + attn_s)
    assert t.name == "roofline (fp8 GEMMs)"
    # the same GPU at bf16 GEMMs: twice the GEMM time
    bf16 = RooflineTiming(model, GpuPerf("toy", 80e9, 1e12, 1e15, 1e11), params=params)
    assert bf16.prefill_time_s(n) == pytest.approx(2 * gemm_s + attn_s)
    assert bf16.step_time_s(BatchShape()) == 0.0


def test_excluded_modules_gemms_stay_at_the_bf16_peak_by_hand() -> None:
    """The same toy model with 2.5e8 of its 1e9 active parameters left unquantized (ModelOpt
    exclude_modules): their GEMMs, 2 * 2.5e8 * 4096 FLOPs, run at the bf16 rate 5e14, the
    other 7.5e8 at the fp8 rate 1e15; attention as before."""
    model = ModelCost("toy", 2, 8, 2, 4, 1e9, 2e9, 1000.0, num_bf16_gemm_params=2.5e8)
    params = RooflineParams(compute_efficiency=0.5, bandwidth_efficiency=0.5, step_overhead_s=0)
    gpu = GpuPerf("toy", 80e9, 1e12, 1e15, 1e11, gemm_peak_flops=2e15, gemm_dtype="fp8")
    n = 4096
    gemm_s = 2 * 7.5e8 * n / 1e15 + 2 * 2.5e8 * n / 5e14
    attn_s = 4 * 2 * 2 * 4 * (n * (n + 1) / 2) / 5e14
    assert RooflineTiming(model, gpu, params=params).prefill_time_s(n) == pytest.approx(
        gemm_s + attn_s
    )
    # GEMMs in bf16 anyway: the excluded share changes nothing
    bf16 = RooflineTiming(model, GpuPerf("toy", 80e9, 1e12, 1e15, 1e11), params=params)
    assert bf16.prefill_time_s(n) == pytest.approx(2 * 1e9 * n / 5e14 + attn_s)


@pytest.mark.parametrize(
    ("quantization", "gpu", "timing"),
    [
        ("fp8", "H100-SXM", "roofline (fp8 GEMMs)"),
        # A100 has no fp8 tensor cores: vLLM runs fp8 weights through a W8A16 kernel
        ("fp8", "A100-80GB", "roofline"),
        # AWQ/GPTQ: 4-bit weights dequantized to bf16 in the kernel
        ("awq", "H100-SXM", "roofline"),
        ("gptq", "H100-SXM", "roofline"),
        # NVFP4: W4A4 FP4 GEMMs need Blackwell's FP4 tensor cores (vLLM 0.32.0
        # kernels/linear/nvfp4: cutlass / FlashInfer at compute capability 100+); Hopper runs
        # the FP4 Marlin W4A16 kernel, bf16 math
        ("modelopt_fp4", "B200", "roofline (fp4 GEMMs)"),
        ("modelopt_fp4", "B300", "roofline (fp4 GEMMs)"),
        ("modelopt_fp4", "H100-SXM", "roofline"),
        ("modelopt", "H100-SXM", "roofline (fp8 GEMMs)"),
    ],
)
def test_gemm_dtype_of_the_quantization(quantization: str, gpu: str, timing: str) -> None:
    # the roofline's own choice of GEMM dtype (the default model is measured where covered)
    setup = _config(gpu=gpu, quantization=quantization, max_model_len=4096, timing_model="roofline")
    assert setup.timing.name == timing  # type: ignore[attr-defined]


def test_fp8_reads_its_stored_weight_bytes() -> None:
    """fp8 halves the weights a memory-bound decode step reads (1 B a linear weight against 2;
    embeddings and norms stay bf16), so a one-sequence decode is faster, not only prefill."""
    shape = BatchShape(num_decode_seqs=1, decode_context_tokens=100)
    bf16 = _config(gpu="H100-SXM", max_model_len=4096).timing  # type: ignore[attr-defined]
    fp8 = _config(gpu="H100-SXM", quantization="fp8", max_model_len=4096).timing  # type: ignore[attr-defined]
    ratio = fp8.step_time_s(shape) / bf16.step_time_s(shape)
    assert 0.5 < ratio < 0.75


def test_llama_70b_fp8_on_two_h100_runs() -> None:
    """The issue's row that could not run: Llama-3.1-70B FP8 on 2x H100 (bf16 does not fit)."""
    args = ["sim", "--model", "meta-llama/Llama-3.1-70B", "--gpu", "H100", "--tp", "2"]
    args += ["--max-model-len", "8192", "--num-requests", "8", "--concurrency", "2"]
    bf16 = CliRunner().invoke(cli, args)
    assert bf16.exception is not None and "KV cache" in str(bf16.exception)
    fp8_args = [*args, "--quantization", "fp8", "--engine-version", "0.19.0"]
    fp8 = CliRunner().invoke(cli, [*fp8_args, "--timing-model", "roofline"])
    assert fp8.exit_code == 0, fp8.output
    assert "roofline (fp8 GEMMs)" in fp8.output


def test_flags_and_help_are_plans() -> None:
    from kvbudget.cli.plan import plan
    from kvbudget.cli.serve import serve
    from kvbudget.cli.sim import sim

    def helps(cmd: click.Command) -> dict[str, str | None]:
        return {p.opts[0]: p.help for p in cmd.params if isinstance(p, click.Option)}

    ours, theirs, served = helps(sim), helps(plan), helps(serve)
    for flag in ("--engine-version", "--quantization", "--kv-dtype", "--pp"):
        assert ours[flag] == theirs[flag] == served[flag], flag
    assert "--enable-expert-parallel" in ours and "--enable-expert-parallel" in served


def test_sim_summary_names_the_engine_inputs() -> None:
    import json

    args = ["sim", "--num-requests", "4", "--concurrency", "2", "--json", "--pp", "2"]
    out = CliRunner().invoke(cli, [*args, "--engine-version", "0.19.0", "--kv-dtype", "fp8"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output)
    assert (summary["pp"], summary["engine_version"], summary["kv_dtype"]) == (2, "0.19.0", "fp8")
    assert any("pipeline parallel 2" in n for n in summary["notes"])


def test_serve_planned_only_flags_need_gpu() -> None:
    out = CliRunner().invoke(cli, ["serve", "--model", "m", "--quantization", "fp8"])
    assert isinstance(out.exception, ConfigError)
    assert "--quantization fp8: only used to plan the replica with --gpu" in str(out.exception)


def test_serve_builds_the_quantized_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    monkeypatch.setenv("KVBUDGET_TIMING_MODEL", "roofline")  # the roofline's fp8 label

    built = build_engine(
        ServeEngineOptions(
            model="meta-llama/Llama-3.1-8B",
            gpu="H100-SXM",
            max_model_len=4096,
            quantization="fp8",
            engine_version="0.19.0",
            enable_expert_parallel=True,
        )
    )
    assert built.timing_name == "roofline (fp8 GEMMs)"
    assert built.config.max_num_batched_tokens == 8192
    assert "expert parallel priced as tensor parallel" in built.description
