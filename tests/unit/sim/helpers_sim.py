"""Small builders shared by the simulator tests."""

from __future__ import annotations

import numpy as np

from kvbudget.sim.config import KVGroupConfig, ReplicaConfig
from kvbudget.sim.engine import EngineCore
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming


def make_config(**kw: object) -> ReplicaConfig:
    base: dict[str, object] = {
        "num_gpu_blocks": 64,
        "block_size": 4,
        "max_num_batched_tokens": 64,
        "max_num_seqs": 8,
        "max_model_len": 256,
    }
    base.update(kw)
    return ReplicaConfig.model_validate(base)


def make_engine(step_s: float = 0.01, **kw: object) -> EngineCore:
    return EngineCore(make_config(**kw), FixedTiming(step_s=step_s), np.random.default_rng(0))


def make_request(rid: str, prompt: tuple[int, ...] | int, out: int, **kw: object) -> EngineRequest:
    ids = tuple(range(1000, 1000 + prompt)) if isinstance(prompt, int) else prompt
    return EngineRequest(request_id=rid, prompt_token_ids=ids, max_output_tokens=out, **kw)  # type: ignore[arg-type]


def run_to_end(core: EngineCore, now_s: float = 0.0, max_steps: int = 10_000) -> float:
    for _ in range(max_steps):
        if not core.has_work():
            return now_s
        result = core.step(now_s)
        now_s += result.duration_s
        core.pool.check_invariants()
    raise AssertionError("engine did not drain")


def random_workload(seed: int, n: int = 50) -> list[EngineRequest]:
    """Poisson arrivals of prompts on 3 shared prefixes (<= 69 prompt, <= 39 output tokens),
    about a fifth cancelled by the client."""
    rng = np.random.default_rng(seed)
    prefixes = [
        tuple(rng.integers(1, 500, size=int(rng.integers(4, 40))).tolist()) for _ in range(3)
    ]
    out = []
    t = 0.0
    for i in range(n):
        t += float(rng.exponential(0.01))
        prompt = prefixes[int(rng.integers(0, 3))] + tuple(
            rng.integers(1, 500, size=int(rng.integers(1, 30))).tolist()
        )
        cancel = int(rng.integers(1, 20)) if rng.random() < 0.2 else None
        out.append(
            EngineRequest(
                f"r{i}", prompt, int(rng.integers(1, 40)), arrival_s=t, cancel_after_tokens=cancel
            )
        )
    return out


__all__ = [
    "KVGroupConfig",
    "make_config",
    "make_engine",
    "make_request",
    "random_workload",
    "run_to_end",
]
