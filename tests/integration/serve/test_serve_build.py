"""How ``kvbudget serve`` builds its engine: manual pool, or the plan for a model on a GPU."""

from __future__ import annotations

import pytest

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.serve.build import ServeEngineOptions, build_engine


def test_manual_pool_uses_the_given_numbers() -> None:
    built = build_engine(
        ServeEngineOptions(model="m", num_gpu_blocks=300, block_size=32, step_s=0.005)
    )
    assert built.config.num_gpu_blocks == 300
    assert built.config.block_size == 32
    assert built.core.stats().num_free_blocks == 299  # block 0 is the null block
    assert built.timing_name.startswith("fixed")


def test_planned_pool_is_the_plan() -> None:
    opts = ServeEngineOptions(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192)
    built = build_engine(opts)
    plan = make_plan(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100", max_model_len=8192))
    assert built.config.num_gpu_blocks == plan.num_blocks
    assert built.config.block_size == plan.block_size
    assert built.config.max_model_len == 8192
    # timing_model auto: aiconfigurator-core's H100 vLLM tables cover Llama-3.1-8B
    assert built.timing_name.startswith("measured (aiconfigurator-core 0.12.0, h100_sxm")


def test_negative_step_time_is_refused() -> None:
    with pytest.raises(ConfigError, match="step-ms"):
        build_engine(ServeEngineOptions(model="m", step_s=-0.001))


def test_tp_without_gpu_is_a_config_error(capsys: pytest.CaptureFixture[str]) -> None:
    from kvbudget.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["serve", "--model", "m", "--tp", "2", "--port", "0"])
    assert info.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "ConfigError: --tp 2: only used to plan the replica with --gpu; add --gpu GPU or drop --tp"
    )


def test_a_fast_path_replica_is_refused() -> None:
    """The lazy-decode fast path produces no per-step tokens to stream."""
    from dataclasses import replace

    import numpy as np

    from kvbudget.serve.engine import RealTimeEngine
    from kvbudget.sim.replica import Replica

    built = build_engine(ServeEngineOptions(model="m", num_gpu_blocks=64))
    assert built.replica.fast is None  # what serve builds
    setup = replace(built.replica.setup, fast_path=True)
    fast = Replica("r", setup, np.random.default_rng(0))
    assert fast.fast is not None
    with pytest.raises(ConfigError, match="fast_path=False"):
        RealTimeEngine(fast)
