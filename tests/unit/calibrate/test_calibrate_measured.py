"""`kvbudget calibrate --gpu`: the measured model's correction stored in the profile.

The engine run is synthetic: its prompts take 1.5 x and its decode steps 0.8 x what the plain
measured model (aiconfigurator-core's tables for Llama-3.1-8B on an H100, built the way ``sim
--timing-model measured`` builds it) prices them, so the stored factors must be 1.5 and 0.8.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from kvbudget.calibrate import run as run_module
from kvbudget.calibrate.engine import EngineInfo
from kvbudget.calibrate.fit import decode_observation, prefill_observation
from kvbudget.calibrate.run import CalibrateOptions, calibrate, measured_model
from kvbudget.errors import ConfigError

MODEL = "meta-llama/Llama-3.1-8B"


def _info(engine: str = "vllm") -> EngineInfo:
    return EngineInfo(
        engine=engine,
        version="0.12.0",
        model_id=MODEL,
        max_model_len=8192,
        settings={"max_num_batched_tokens": 8192},
    )


def _opts(**kw: Any) -> CalibrateOptions:
    return CalibrateOptions(base_url="http://127.0.0.1:9", model=MODEL, name="h100-run", **kw)


def test_the_measured_model_of_the_engine() -> None:
    import aiconfigurator_core  # noqa: F401  (never skipped: make test installs the extra)

    timing = measured_model(_opts(gpu="H100-SXM"), _info())
    assert timing.name.startswith("measured (aiconfigurator-core 0.12.0, h100_sxm, vllm ")
    assert timing.name.endswith("engine vllm 0.12.0)")


def test_only_a_vllm_engine_is_corrected() -> None:
    with pytest.raises(ConfigError, match="--gpu: the measured model prices vLLM engines only"):
        measured_model(_opts(gpu="H100-SXM"), _info("llama.cpp"))


def test_a_run_at_a_known_multiple_stores_factors_1_5_and_0_8(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import aiconfigurator_core  # noqa: F401

    opts = _opts(gpu="H100-SXM")
    plain = measured_model(opts, _info())
    prompts = [64, 256, 1024, 4096]
    decodes = [(1, 512, 32), (4, 1024, 32), (8, 2048, 32)]  # batch, start context, steps
    obs = [prefill_observation(n, 0, 1.5 * plain.prefill_time_s(n), n_ubatch=8192) for n in prompts]
    for batch, start, steps in decodes:
        # the profile keeps each decode run as one step at its end context (build_profile)
        per_step = 0.8 * plain.decode_time_s(batch, batch * (start + steps))
        obs.append(decode_observation(batch, start, steps, per_step * steps))

    async def discover(*_: Any, **__: Any) -> EngineInfo:
        return _info()

    async def run_series(*_: Any, **__: Any) -> list[Any]:
        return []

    monkeypatch.setattr(run_module, "discover", discover)
    monkeypatch.setattr(run_module, "run_series", run_series)
    monkeypatch.setattr(run_module, "observations", lambda results, n_ubatch: obs)
    monkeypatch.setattr(run_module, "request_overhead_s", lambda results: 0.0)
    profile = asyncio.run(calibrate(opts)).profile
    c = profile.measured_correction
    assert c is not None
    assert c.measured_model == plain.name
    assert c.prefill_factor == pytest.approx(1.5)
    assert c.decode_factor == pytest.approx(0.8)
    assert (c.num_prefill_points, c.num_decode_points, c.prefill_step_tokens) == (4, 3, 8192)
    assert (c.profile, c.engine) == ("h100-run", "vllm 0.12.0")
    assert c.prefill_rms_rel_after == pytest.approx(0.0, abs=1e-9)


def test_validate_with_gpu_is_refused(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from kvbudget.cli.calibrate import calibrate as command

    result = CliRunner().invoke(
        command,
        [
            *("--base-url", "http://127.0.0.1:9", "--model", "m"),
            *("--out", str(tmp_path / "never.json")),
            *("--validate", "--gpu", "H100-SXM"),
        ],
    )
    assert result.exit_code != 0
    assert "--gpu: corrects the measured model from a calibration run" in str(result.exception)
