"""``kvbudget sim``: JSON keys, flags, scenario file, one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.sim.native import build_label

REQUIRED = {
    "requests_completed",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "prefix_hit_rate_tokens",
    "num_preemptions",
    "num_gpu_blocks",
    "simulated_s",
    "wall_s",
    "simulator_build",
}


def _run(args: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(sim, args, catch_exceptions=False)
    return result.exit_code, result.output


def test_timing_model_roofline_is_the_roofline() -> None:
    code, out = _run(
        ["--requests", "4", "--concurrency", "2", "--timing-model", "roofline", "--json"]
    )
    assert code == 0, out
    assert json.loads(out)["timing_model"] == "roofline"


def test_json_summary_has_the_required_keys(tmp_path: Path) -> None:
    trace = tmp_path / "trace.json"
    records = tmp_path / "records.jsonl"
    code, out = _run(
        [
            "--requests", "40", "--rate", "5", "--input-tokens", "256", "--output-tokens", "16",
            "--shared-prefix-tokens", "128", "--json", "--trace-out", str(trace),
            "--records-out", str(records),
        ]
    )  # fmt: skip
    assert code == 0, out
    summary = json.loads(out)
    assert set(summary) >= REQUIRED
    # the default (auto) on H100-SXM, Llama-3.1-8B: aiconfigurator-core's H100 vLLM tables
    assert summary["figures"] == "simulated"
    assert summary["timing_model"].startswith(
        "measured (aiconfigurator-core 0.12.0, h100_sxm, vllm 0.24.0 tables"
    )
    # the build that ran is named: this session's (test_sim_native checks which one that is)
    assert summary["simulator_build"] == build_label()
    assert summary["simulator_build"].startswith(("compiled with mypyc ", "pure Python ("))
    assert summary["requests_completed"] == 40
    # 128 of 256 prompt tokens are shared: every request after the first hits them
    assert summary["prefix_cache_hits_tokens"] == 39 * 128
    assert json.loads(trace.read_text())["traceEvents"]
    lines = records.read_text().splitlines()
    assert len(lines) == 40 and json.loads(lines[0])["source"] == "simulated"


def test_samples_csv(tmp_path: Path) -> None:
    path = tmp_path / "samples.csv"
    code, out = _run(
        ["--requests", "20", "--rate", "5", "--output-tokens", "8", "--replicas", "2",
         "--samples-out", str(path), "--sample-every-s", "0.5"]
    )  # fmt: skip
    assert code == 0, out
    rows = path.read_text().splitlines()
    assert rows[0] == "time_s,replica,kv_usage,num_running,num_waiting"
    times = sorted({float(r.split(",")[0]) for r in rows[1:]})
    assert times[:3] == [0.0, 0.5, 1.0]
    assert {r.split(",")[1] for r in rows[1:]} == {"replica-0", "replica-1"}


def test_no_prefix_caching_gives_zero_hits() -> None:
    code, out = _run(
        ["--requests", "20", "--rate", "5", "--input-tokens", "256", "--output-tokens", "8",
         "--shared-prefix-tokens", "128", "--no-prefix-caching", "--json"]
    )  # fmt: skip
    assert code == 0
    assert json.loads(out)["prefix_hit_rate_tokens"] == 0.0


def test_scenario_file_with_flag_override(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "replicas: 2\nrouter: least_outstanding\nworkload:\n  num_requests: 30\n"
        "  arrivals: {kind: poisson, rate_per_s: 4}\n"
        "  input_tokens: {kind: fixed, value: 200}\n  output_tokens: {kind: fixed, value: 10}\n"
    )
    code, out = _run(["--scenario", str(path), "--requests", "12", "--json"])
    assert code == 0, out
    summary = json.loads(out)
    assert summary["requests_total"] == 12
    assert summary["replicas"] == 2 and summary["router"] == "least_outstanding"


def test_bad_router_is_one_line_config_error() -> None:
    result = CliRunner().invoke(sim, ["--router", "random", "--requests", "5"])
    assert result.exit_code != 0
    assert "unknown policy 'random'" in str(result.exception)


def test_heterogeneous_replicas_each_get_their_own_plan(tmp_path: Path) -> None:
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.capacity.planner import make_plan

    path = tmp_path / "h.yaml"
    path.write_text(
        "router: least_kv\nreplica_overrides:\n  - {gpu: H100-SXM}\n  - {gpu: A100-40GB}\n"
        "workload:\n  num_requests: 10\n  arrivals: {kind: poisson, rate_per_s: 2}\n"
        "  input_tokens: {kind: fixed, value: 100}\n  output_tokens: {kind: fixed, value: 5}\n"
    )
    code, out = _run(["--scenario", str(path), "--json"])
    assert code == 0, out
    blocks = json.loads(out)["num_gpu_blocks_by_replica"]
    for name, gpu in (("replica-0", "H100-SXM"), ("replica-1", "A100-40GB")):
        plan = make_plan(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu=gpu))
        assert blocks[name] == plan.num_blocks


def test_calibrated_timing_profile_is_named_in_the_output(tmp_path: Path) -> None:
    profile = tmp_path / "p.json"
    profile.write_text(
        json.dumps(
            {
                "name": "toy",
                "model_id": "meta-llama/Llama-3.1-8B",
                "gpu": "H100-SXM",
                "engine": "made-up points for a test",
                "prefill_points": [[128, 0.01], [1024, 0.05], [4096, 0.2]],
                "decode_points": [[1, 1000, 0.01], [16, 16000, 0.012], [64, 64000, 0.02]],
            }
        )
    )
    code, out = _run(
        ["--requests", "10", "--rate", "2", "--timing-profile", str(profile), "--json"]
    )
    assert code == 0, out
    summary = json.loads(out)
    assert summary["timing_model"] == "calibrated:toy"
    assert summary["figures"] == "simulated"
