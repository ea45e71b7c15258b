"""Per-token times (``ReplicaSetup.record_token_times``): the lazy-decode fast path gives the
same times as stepping the explicit engine, token for token, through preemptions and
cancellations; each request has one time per output token, the first at its first token and
the last at its finish."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.errors import KvbudgetError
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.driver import Driver
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.router import Router
from kvbudget.sim.timing import FixedTiming
from tests.unit.sim.helpers_sim import random_workload


def _times(cfg: ReplicaConfig, seed: int, *, fast: bool) -> tuple[dict[str, list[float]], int]:
    setup = ReplicaSetup(
        cfg, FixedTiming(step_s=0.01, per_token_s=1e-4), fast_path=fast, record_token_times=True
    )
    rep = Replica("r", setup, np.random.default_rng(7))
    assert (rep.fast is not None) == fast
    out: dict[str, list[float]] = {}
    preemptions = 0

    def on_finish(req: SimRequest, r: Replica) -> None:
        nonlocal preemptions
        assert r.token_times is not None
        times = r.token_times.pop(req.request_id, [])
        assert len(times) == req.num_output_tokens
        if times:
            assert times[0] == req.first_token_s and times[-1] == req.finish_s
            assert times == sorted(times)
        preemptions += req.num_preemptions
        out[req.request_id] = times

    def on_reject(req: EngineRequest, r: Replica, exc: KvbudgetError) -> None:
        out[req.request_id] = []  # too long for the pool: refused on both paths alike

    Driver([rep], Router("round_robin"), on_finish=on_finish, on_reject=on_reject).run(
        random_workload(seed)
    )
    return out, preemptions


@pytest.mark.parametrize("seed", range(8))
def test_fast_path_token_times_equal_explicit(seed: int) -> None:
    cfg = ReplicaConfig(
        num_gpu_blocks=20 + 3 * seed,  # small pools: preemptions and evictions
        block_size=4,
        max_num_seqs=6,
        max_num_batched_tokens=48,
        max_model_len=256,
        enable_prefix_caching=seed % 4 != 3,
    )
    fast, num_preempted = _times(cfg, seed, fast=True)
    explicit, _ = _times(cfg, seed, fast=False)
    assert fast == explicit
    if seed == 0:
        assert num_preempted > 0  # the preemption path is exercised


def test_token_times_are_off_by_default() -> None:
    """Plain ``kvbudget sim`` replicas keep no per-token times (and keep the fast path)."""
    rep = Replica(
        "r", ReplicaSetup(ReplicaConfig(num_gpu_blocks=64), FixedTiming()), np.random.default_rng(0)
    )
    assert rep.token_times is None and rep.fast is not None and rep.fast.token_times is None
