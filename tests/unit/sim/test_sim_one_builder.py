"""Every simulated path builds the same replica: a TP = 2 MoE model (Qwen3-30B-A3B on 2 x H100).

The paths: ``kvbudget sim`` (a scenario's replica), accept's ``sim`` target, the audit's
simulated probe (planned) and ``kvbudget serve --gpu`` (the replica its driver steps). They
used to disagree on KV bytes per token (per rank vs per replica) and on MoE active parameters.

Independent figures, by hand from the model's config.json (48 layers, 4 KV heads, head_dim 128,
bf16) and its model card:

* KV bytes per token of the replica: 2 (K and V) x 48 x 4 x 128 x 2 bytes = 98,304 (both ranks
  together; each rank holds 2 of the 4 KV heads, 49,152);
* active parameters: the Qwen3-30B-A3B model card says 3.3B activated of 30.5B.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import yaml

from kvbudget.accept.plan.planfile import parse_plan
from kvbudget.accept.targets.factories import sim_factory
from kvbudget.accept.targets.sim import SimTarget
from kvbudget.audit.probe_sim import SimProbe, SimProbeOptions
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.versions import DEFAULT_VLLM_VERSION
from kvbudget.serve.app import ServeApp
from kvbudget.serve.build import ServeEngineOptions, build_engine
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.roofline import BatchShape
from kvbudget.sim.scenario import build_cluster, scenario_from_dict
from kvbudget.sim.timing import RooflineTiming, StepTimeModel

MODEL = "Qwen/Qwen3-30B-A3B"
GPU = "H100-SXM-80GB"
DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"
#: the same engine flags on every path (the accept demo's lock values)
LIMITS: dict[str, Any] = {
    "max_model_len": 16384,
    "max_num_seqs": 256,
    "max_num_batched_tokens": 8192,
}


def _sim_path() -> tuple[ReplicaConfig, StepTimeModel]:
    scenario = scenario_from_dict(
        {
            "model": MODEL,
            "gpu": GPU,
            "tp": 2,
            **LIMITS,
            "gpu_memory_utilization": 0.9,
            "workload": {"num_requests": 1},
        }
    )
    setup = build_cluster(scenario).setups[0]
    return setup.config, setup.timing


def _accept_path() -> tuple[ReplicaConfig, StepTimeModel]:
    data: dict[str, Any] = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    lock = data["lock"]
    lock["model"]["id"] = MODEL
    lock["model"].pop("config_sha256", None)
    lock["gpu"]["type"] = GPU
    lock["gpu"]["count"] = 2
    lock["tensor_parallel"] = 2
    lock.update(LIMITS, gpu_memory_utilization=0.9, block_size=16)
    lock["engine"]["version"] = DEFAULT_VLLM_VERSION  # the other paths plan the default version
    data["ledger"] = {"inputs": []}
    plan = parse_plan(data)
    target = sim_factory(plan)(plan.lock).target
    assert isinstance(target, SimTarget)
    return target.replica.config, target.replica.timing


def _audit_path() -> tuple[ReplicaConfig, StepTimeModel]:
    request = PlanRequest(model=MODEL, gpu=GPU, tp=2, gpu_memory_utilization=0.9, **LIMITS)
    probe = SimProbe(SimProbeOptions(plan=request), np.random.default_rng(0))
    return probe.replica.config, probe.replica.timing


def _serve_path() -> tuple[ReplicaConfig, StepTimeModel]:
    built = build_engine(ServeEngineOptions(model=MODEL, gpu=GPU, tp=2, **LIMITS))
    app = ServeApp(built.replica, model_name=MODEL, max_model_len=built.config.max_model_len)
    # the replica serve's driver steps (``kvbudget serve --gpu``'s whole path, not started)
    (replica,) = app.engine.driver.replicas
    assert replica.core is app.engine.core
    return replica.config, replica.timing


def test_every_path_builds_the_same_tp2_moe_replica() -> None:
    paths = {
        "sim": _sim_path(),
        "accept": _accept_path(),
        "audit": _audit_path(),
        "serve": _serve_path(),
    }
    configs = {name: cfg.model_copy(update={"name": "r"}) for name, (cfg, _) in paths.items()}
    reference = configs["sim"]
    assert reference.kv_bytes_per_token == 2 * 48 * 4 * 128 * 2  # 98,304, the replica's
    for name, cfg in configs.items():
        assert cfg == reference, name
    # every path chooses the same step-time model (timing_model auto: measured where covered)
    names = {name: timing.name for name, (_, timing) in paths.items()}
    assert len(set(names.values())) == 1, names
    shape = BatchShape(num_decode_seqs=8, decode_context_tokens=8 * 1000)
    prices = {name: timing.step_time_s(shape) for name, (_, timing) in paths.items()}
    assert len(set(prices.values())) == 1, prices


def test_the_roofline_of_the_tp2_moe_replica() -> None:
    scenario = scenario_from_dict(
        {
            "model": MODEL,
            "gpu": GPU,
            "tp": 2,
            **LIMITS,
            "gpu_memory_utilization": 0.9,
            "timing_model": "roofline",
            "workload": {"num_requests": 1},
        }
    )
    timing = build_cluster(scenario).setups[0].timing
    assert isinstance(timing, RooflineTiming)
    cost = timing.model
    assert cost.kv_bytes_per_token == 98_304
    assert timing.tp == 2
    # model card: 3.3B activated parameters (the roofline's estimate is within 5%)
    assert abs(cost.num_active_params - 3.3e9) / 3.3e9 < 0.05
