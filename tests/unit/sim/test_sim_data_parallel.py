"""vLLM ``--data-parallel-size``: engines with their own pools, experts over every GPU.

Rules from vLLM 0.32.0: ``model_executor/layers/fused_moe/config.py``
``FusedMoEParallelConfig.make`` flattens a MoE layer over ``dp x tp`` ranks (tensor-sharded,
``tp_size = dp x tp``; with ``--enable-expert-parallel`` ``ep_size = dp x tp``, ``tp_size =
1``); ``v1/engine/core_client.py`` ``DPLBAsyncMPClient.get_core_engine_for_request`` sends a
request to the engine with the fewest requests in flight.
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from kvbudget.capacity.weights import compute_weights
from kvbudget.cli.main import cli
from kvbudget.errors import ConfigError
from kvbudget.sim.scenario import build_cluster, scenario_from_dict
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import FullAttention
from kvbudget.spec.model import ModelSpec


def _moe() -> ModelSpec:
    return ModelSpec(
        "m",
        "MixtralForCausalLM",
        "mixtral",
        LayerSeq.periodic([FullAttention(0, 8, 128)], 2),
        num_experts=8,
        hidden_size=1024,
        num_attention_heads=8,
        vocab_size=1000,
        intermediate_size=2048,
        moe_intermediate_size=2048,
        torch_dtype="bfloat16",
    )


def test_the_experts_are_spread_over_every_gpu_of_the_deployment() -> None:
    """Per GPU at tp 2: attention (q, k, v, o: 4 x 1024 x 1024) and the router (1024 x 8,
    replicated) as at dp 1; the experts (8 x 3 x 1024 x 2048) over tp 2 at dp 1, over the
    8 GPUs of dp 4 x tp 2."""
    spec = _moe()
    experts = 8 * 3 * 1024 * 2048 * 2
    one = compute_weights(spec, tp=2).per_rank_bytes[0]
    four = compute_weights(spec, tp=2, moe_ranks=8).per_rank_bytes[0]
    assert one - four == 2 * (experts // 2 - experts // 8)


def _scenario(**fields: Any) -> Any:
    data = {"model": "Qwen/Qwen3-30B-A3B", "gpu": "H100-SXM", "tp": 2, **fields}
    data.setdefault("max_model_len", 4096)
    return scenario_from_dict(data)


def test_one_deployment_of_dp_engines_routed_least_outstanding() -> None:
    scenario = _scenario(data_parallel_size=4, timing_model="roofline")
    assert scenario.router == "least_outstanding"
    cluster = build_cluster(scenario)
    assert len(cluster.setups) == 4 and cluster.router == "least_outstanding"
    assert _scenario(data_parallel_size=4, router="round_robin").router == "round_robin"
    with pytest.raises(ConfigError, match=r"^replicas: data_parallel_size 4 simulates one"):
        _scenario(data_parallel_size=4, replicas=2)


def test_each_engine_has_the_pool_of_its_own_gpus() -> None:
    """A MoE model's engine holds 1/dp of the experts, so its pool grows with dp; a dense
    model's does not change."""
    moe_1 = build_cluster(_scenario(timing_model="roofline")).setups[0].config.num_gpu_blocks
    moe_4 = build_cluster(_scenario(data_parallel_size=4, timing_model="roofline"))
    assert moe_4.setups[0].config.num_gpu_blocks > moe_1
    dense = {"model": "meta-llama/Llama-3.1-8B", "timing_model": "roofline"}
    dense_1 = build_cluster(_scenario(**dense)).setups[0].config.num_gpu_blocks
    dense_4 = build_cluster(_scenario(data_parallel_size=4, **dense)).setups[0]
    assert dense_4.config.num_gpu_blocks == dense_1


@pytest.mark.parametrize(("expert_parallel", "moe_tp", "moe_ep"), [(False, 8, None), (True, 1, 8)])
def test_the_measured_model_prices_the_moe_over_every_engine(
    monkeypatch: pytest.MonkeyPatch, expert_parallel: bool, moe_tp: int, moe_ep: int | None
) -> None:
    from kvbudget.sim import aic

    seen: list[aic.MeasuredCase] = []

    def capture(case: aic.MeasuredCase, cache_dir: object) -> Any:
        seen.append(case)
        raise aic.MeasuredUnavailable("captured")

    monkeypatch.setattr(aic, "compile_measured", capture)
    build_cluster(_scenario(data_parallel_size=4, enable_expert_parallel=expert_parallel))
    case = seen[0]
    assert (case.tp, case.attention_dp, case.moe_tp, case.moe_ep) == (2, 4, moe_tp, moe_ep)


def test_plan_and_sim_take_the_flag() -> None:
    args = ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--dp", "2", "--json"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert "data parallel 2: this plan is one of 2 engines of 1 GPU(s)" in out.output
    sglang = CliRunner().invoke(cli, [*args[:-1], "--engine", "sglang"])
    assert "data_parallel_size: 2 is planned for vLLM only" in str(sglang.exception)
    sim_args = ["sim", "--model", "meta-llama/Llama-3.1-8B", "--dp", "2", "--requests", "20"]
    sim_args += ["--timing-model", "roofline", "--max-model-len", "4096", "--json"]
    sim = CliRunner().invoke(cli, sim_args)
    assert sim.exit_code == 0, sim.output
    assert '"data_parallel_size": 2' in sim.output and '"replicas": 2' in sim.output
