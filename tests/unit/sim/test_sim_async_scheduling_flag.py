"""vLLM's ``--async-scheduling`` / ``--no-async-scheduling`` on the commands that simulate it.

The flag as vLLM 0.32.0 spells it: ``vllm/engine/arg_utils.py`` adds ``--async-scheduling``
from ``SchedulerConfig.async_scheduling: bool | None = None`` (``config/scheduler.py``) with
``argparse.BooleanOptionalAction``, so ``--no-async-scheduling`` sets False and not giving it
leaves None, which ``VllmConfig.__post_init__`` (``config/vllm.py``) resolves: on unless an
incompatible option rules it out. 0.13.0's ``config/scheduler.py`` has ``async_scheduling:
bool = False`` (off unless given); 0.14.0's has ``Field(default=None)`` (on). 0.13.0 and 0.14.0
``config/vllm.py`` refuse an explicit ``--async-scheduling`` with ``pipeline_parallel_size >
1``: "Async scheduling is not yet compatible with pipeline_parallel_size > 1.".

Expected times by hand. A calibrated profile whose fit is a 10 ms step overhead and nothing
else makes every step 10 ms. Constant arrivals at 40/s: r0 at 0 ms, r1 at 25 ms; 16 prompt
tokens, 4 output tokens (the prefill step gives the first token, three decode steps the rest).
r0 reaches an idle engine: prefilled in [0, 10], decodes [10, 40], TTFT 10 ms, E2E 40 ms.
r1 arrives during step [20, 30]. Without async scheduling it joins the next step, [30, 40]:
first token at 40 ms (TTFT 15 ms), last at 70 ms (E2E 45 ms). With it, step [30, 40] was
scheduled at 20 ms while [20, 30] ran (``EngineCore.step_with_batch_queue``), so r1 is
scheduled into [40, 50]: first token at 50 ms (TTFT 25 ms), last at 80 ms (E2E 55 ms). Mean
TTFT: 12.5 ms without, 17.5 ms with (one 10 ms step more for r1, half of it on the mean).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.errors import ConfigError

STEP_S = 0.010
SYNC_TTFT_MEAN_S = (0.010 + 0.015) / 2
ASYNC_TTFT_MEAN_S = (0.010 + 0.025) / 2
SYNC_E2E_MEAN_S = (0.040 + 0.045) / 2
ASYNC_E2E_MEAN_S = (0.040 + 0.055) / 2


def _scenario(tmp_path: Path) -> Path:
    profile = tmp_path / "step10ms.json"
    profile.write_text(
        json.dumps(
            {
                "name": "step10ms",
                "model_id": "meta-llama/Llama-3.1-8B",
                "gpu": "H100-SXM",
                "engine": "a hand-made fit for a test: every step 10 ms",
                "prefill_points": [[1, STEP_S], [2, STEP_S], [3, STEP_S]],
                "decode_points": [[1, 1, STEP_S], [2, 2, STEP_S], [3, 3, STEP_S]],
                "fit": {
                    "step_overhead_s": STEP_S,
                    "prefill_per_token_s": 0.0,
                    "prefill_per_pair_s": 0.0,
                    "decode_per_seq_s": 0.0,
                    "decode_per_context_token_s": 0.0,
                },
            }
        )
    )
    scenario = tmp_path / "two.yaml"
    scenario.write_text(
        f"model: meta-llama/Llama-3.1-8B\ngpu: H100-SXM\nmax_model_len: 4096\n"
        f"prefix_caching: false\ntiming_profile: {profile}\n"
        "workload:\n  num_requests: 2\n  arrivals: {kind: constant, rate_per_s: 40}\n"
        "  input_tokens: {kind: fixed, value: 16}\n  output_tokens: {kind: fixed, value: 4}\n"
    )
    return scenario


def _run(tmp_path: Path, *flags: str) -> dict[str, Any]:
    out = CliRunner().invoke(sim, ["--scenario", str(_scenario(tmp_path)), *flags, "--json"])
    assert out.exit_code == 0, out.output
    summary: dict[str, Any] = json.loads(out.output)
    return summary


def test_async_scheduling_flag_delays_a_request_reaching_a_busy_engine_by_one_step(
    tmp_path: Path,
) -> None:
    on = _run(tmp_path, "--async-scheduling")
    off = _run(tmp_path, "--no-async-scheduling")
    assert off["ttft_mean_s"] == pytest.approx(SYNC_TTFT_MEAN_S)
    assert on["ttft_mean_s"] == pytest.approx(ASYNC_TTFT_MEAN_S)
    assert off["e2e_mean_s"] == pytest.approx(SYNC_E2E_MEAN_S)
    assert on["e2e_mean_s"] == pytest.approx(ASYNC_E2E_MEAN_S)
    assert on["async_scheduling"] == {
        "enabled": True,
        "source": "flag",
        "reason": "--async-scheduling given (vLLM 0.33.0)",
    }
    assert off["async_scheduling"]["enabled"] is False
    assert off["async_scheduling"]["reason"] == "--no-async-scheduling given (vLLM 0.33.0)"


@pytest.mark.parametrize(
    ("version", "enabled", "ttft_mean_s"),
    [
        ("0.13.0", False, SYNC_TTFT_MEAN_S),
        ("0.14.0", True, ASYNC_TTFT_MEAN_S),
        ("0.32.0", True, ASYNC_TTFT_MEAN_S),
    ],
)
def test_not_given_the_flag_follows_the_engine_version(
    tmp_path: Path, version: str, enabled: bool, ttft_mean_s: float
) -> None:
    summary = _run(tmp_path, "--engine-version", version)
    assert summary["ttft_mean_s"] == pytest.approx(ttft_mean_s)
    assert summary["async_scheduling"]["enabled"] is enabled
    assert summary["async_scheduling"]["source"] == "version default"
    assert summary["async_scheduling"]["reason"].startswith(f"vLLM {version}'s default: ")


def test_the_flag_overrides_the_version_default(tmp_path: Path) -> None:
    old_on = _run(tmp_path, "--engine-version", "0.13.0", "--async-scheduling")
    new_off = _run(tmp_path, "--engine-version", "0.14.0", "--no-async-scheduling")
    assert old_on["ttft_mean_s"] == pytest.approx(ASYNC_TTFT_MEAN_S)
    assert new_off["ttft_mean_s"] == pytest.approx(SYNC_TTFT_MEAN_S)


def test_async_scheduling_with_pipeline_parallel_is_refused_where_vllm_refuses_it() -> None:
    """0.14.0 ``config/vllm.py``: an explicit ``--async-scheduling`` with pp > 1 raises."""
    out = CliRunner().invoke(
        sim,
        ["--engine-version", "0.14.0", "--pp", "2", "--async-scheduling", "--requests", "2"],
    )
    assert isinstance(out.exception, ConfigError), out.output
    line = out.exception.one_line()
    assert "\n" not in line
    assert (
        'async_scheduling: vLLM 0.14.0 refuses --async-scheduling with --pp 2 ("Async '
        'scheduling is not yet compatible with pipeline_parallel_size > 1."' in line
    )
    assert "drop --async-scheduling, use --pp 1, or pass --engine-version 0.32.0" in line


def test_the_async_scheduling_rule_by_version() -> None:
    """The resolved value and its reason, against the three vLLM sources read."""
    from kvbudget.capacity.versions import vllm_async_scheduling

    assert not vllm_async_scheduling((0, 13, 0), 1, None).enabled
    assert vllm_async_scheduling((0, 14, 0), 1, None).enabled
    assert not vllm_async_scheduling((0, 14, 0), 2, None).enabled  # 0.14.0 turns it off
    assert vllm_async_scheduling((0, 32, 0), 2, None).enabled  # the V2 model runner keeps it
    assert vllm_async_scheduling((0, 32, 0), 2, True).enabled  # 0.32.0 accepts it
    assert not vllm_async_scheduling((0, 13, 0), 2, False).enabled  # off is always accepted
    with pytest.raises(ConfigError, match=r"vLLM 0\.13\.0 refuses --async-scheduling with --pp 4"):
        vllm_async_scheduling((0, 13, 0), 4, True)


def test_llamacpp_refuses_the_vllm_flag() -> None:
    out = CliRunner().invoke(sim, ["--engine", "llamacpp", "--requests", "2", "--async-scheduling"])
    assert isinstance(out.exception, ConfigError), out.output
    assert "--async-scheduling: a vLLM flag; llama-server has no async scheduling" in str(
        out.exception
    )


def test_sweep_axis_async_scheduling(tmp_path: Path) -> None:
    """``grid.async_scheduling: [false, true]``: two points, the hand-worked TTFTs (p50 of the
    two requests is their mean: 12.5 ms and 17.5 ms), the flag's reason in each row; a point
    0.14.0 refuses (pp 2 with async scheduling) is a not-run row naming the flag."""
    import yaml

    from kvbudget.sweep.grid import expand, grid_from_dict
    from kvbudget.sweep.point import run_point

    base = yaml.safe_load(_scenario(tmp_path).read_text())
    rows = [
        run_point(p)
        for p in expand(grid_from_dict({"base": base, "grid": {"async_scheduling": [False, True]}}))
    ]
    assert [r["async_scheduling"] for r in rows] == [False, True]
    assert [r["async_scheduling_enabled"] for r in rows] == [False, True]
    assert rows[0]["ttft_p50_s"] == pytest.approx(SYNC_TTFT_MEAN_S)
    assert rows[1]["ttft_p50_s"] == pytest.approx(ASYNC_TTFT_MEAN_S)
    assert rows[1]["async_scheduling_reason"] == "--async-scheduling given (vLLM 0.33.0)"
    refused = {**base, "engine_version": "0.14.0", "pp": 2, "async_scheduling": True}
    (point,) = expand(grid_from_dict({"base": refused}))
    row = run_point(point)
    assert row["status"] == "not-run"
    assert "vLLM 0.14.0 refuses --async-scheduling with --pp 2" in row["reason"]


def test_closed_loop_replacement_waits_one_more_step(tmp_path: Path) -> None:
    """Closed loop of 2, four requests of 4 output tokens, under the simulator's documented
    event rules (docs/simulator.md: a closed-loop replacement reaches the engine after the step
    starting at its send has begun; an idle engine takes what reaches it at once). r0 and r1
    are prefilled together in [0, 10] and finish at 40 ms; both replacements are sent at 40 ms.
    r2 reaches an idle engine and starts [40, 50] at once (TTFT 10 ms either way). r3 arrives
    after that step began: without async scheduling it joins [50, 60] (first token at 60 ms,
    TTFT 20 ms, E2E 50 ms); with it, [50, 60] was scheduled while [40, 50] ran, so r3 joins
    [60, 70] (TTFT 30 ms, E2E 60 ms): one 10 ms step more. Mean TTFT 12.5 ms and 15 ms."""
    scenario = _scenario(tmp_path)
    closed = scenario.read_text().replace(
        "num_requests: 2\n  arrivals: {kind: constant, rate_per_s: 40}",
        "num_requests: 4\n  arrivals: {kind: closed, concurrency: 2}",
    )
    scenario.write_text(closed)
    expected = {
        "--no-async-scheduling": ((0.010 * 3 + 0.020) / 4, (0.040 * 3 + 0.050) / 4),
        "--async-scheduling": ((0.010 * 3 + 0.030) / 4, (0.040 * 3 + 0.060) / 4),
    }
    for flag, (ttft_mean_s, e2e_mean_s) in expected.items():
        out = CliRunner().invoke(sim, ["--scenario", str(scenario), flag, "--json"])
        assert out.exit_code == 0, out.output
        summary = json.loads(out.output)
        assert summary["requests_completed"] == 4
        assert summary["ttft_mean_s"] == pytest.approx(ttft_mean_s), flag
        assert summary["e2e_mean_s"] == pytest.approx(e2e_mean_s), flag


def test_capacity_takes_the_flag_and_says_so(tmp_path: Path) -> None:
    """``kvbudget capacity`` builds the replicas as ``sim`` does: its answer states the
    setting; with ``--base-url`` the flag is refused (the server is the engine)."""
    from kvbudget.cli.capacity import capacity

    args = ["--scenario", str(_scenario(tmp_path)), "--slo", "ttft_p95<1s"]
    args += ["--num-requests", "20", "--seeds", "1", "--json"]
    for flag, enabled in (("--async-scheduling", True), ("--no-async-scheduling", False)):
        out = CliRunner().invoke(capacity, [*args, flag])
        assert out.exit_code == 0, out.output
        doc = json.loads(out.output)
        assert doc["async_scheduling"]["enabled"] is enabled
        assert doc["async_scheduling"]["source"] == "flag"
    http = CliRunner().invoke(
        capacity,
        [
            "--base-url",
            "http://127.0.0.1:9",
            "--model",
            "m",
            "--slo",
            "ttft_p95<1s",
            "--async-scheduling",
        ],
    )
    assert isinstance(http.exception, ConfigError), http.output
    assert "--async-scheduling with --base-url" in str(http.exception)


def test_serve_gpu_takes_the_flag() -> None:
    """``serve --gpu`` builds its replica with the flag (its start line prints the description);
    without ``--gpu`` the flag is refused, as every planned-only engine input."""
    from kvbudget.cli.main import cli
    from kvbudget.serve.build import ServeEngineOptions, build_engine

    opts = ServeEngineOptions(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM", max_model_len=4096)
    off = build_engine(replace(opts, async_scheduling=False))
    default = build_engine(opts)
    assert not off.config.async_scheduling
    assert "async scheduling off (--no-async-scheduling given (vLLM 0.33.0))" in off.description
    assert default.config.async_scheduling
    assert "async scheduling on (vLLM 0.33.0's default: on from 0.14.0;" in default.description
    out = CliRunner().invoke(cli, ["serve", "--model", "m", "--async-scheduling"])
    assert isinstance(out.exception, ConfigError)
    assert "--async-scheduling True: only used to plan the replica with --gpu" in str(out.exception)


def test_build_replica_reads_the_flag_from_its_plan_request() -> None:
    """One flag, one owner: ``PlanRequest.async_scheduling`` (what ``plan`` reads) is what the
    built replica schedules with when ``build_replica`` is given no separate value. vLLM 0.13.0
    is off by default (``async_scheduling: bool = False``), so only the request's flag turns it
    on; an explicit argument still wins."""
    from kvbudget.capacity.plan_types import PlanRequest
    from kvbudget.sim.fromplan import build_replica

    def built(flag: bool | None, argument: bool | None = None) -> bool:
        request = PlanRequest(
            model="meta-llama/Llama-3.1-8B",
            gpu="H100-SXM",
            engine_version="0.13.0",
            max_model_len=4096,
            async_scheduling=flag,
        )
        replica = build_replica(request, timing_model="roofline", async_scheduling=argument)
        return replica.config.async_scheduling

    assert built(None) is False
    assert built(True) is True
    assert built(True, argument=False) is False
