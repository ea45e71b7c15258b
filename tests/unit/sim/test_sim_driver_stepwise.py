"""The driver's step-wise API (``submit``, ``abort``, ``next_event_s``, ``step``): what
``kvbudget serve`` drives. Expected figures by hand from the fixed timing (10 ms a step, one
replica, block size 4); the last test checks the API against ``Driver.run`` itself."""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.errors import ConfigError, KvbudgetError, SimulationError
from kvbudget.sim.driver import DriveOptions, Driver
from kvbudget.sim.replica import Replica, ReplicaSetup
from kvbudget.sim.request import EngineRequest, SimRequest
from kvbudget.sim.router import Router
from kvbudget.sim.timing import BatchShape, FixedTiming
from tests.unit.sim.helpers_sim import make_config, make_request, random_workload

Record = tuple[str, float | None, float | None, int, int, int, str | None]


class _BreakableTiming(FixedTiming):
    """The fixed timing, raising inside the engine's step while ``broken`` (a bug there).

    The engine itself is not patched: compiled with mypyc (kvbudget.sim.native), its methods
    cannot be replaced from Python."""

    broken = False

    def step_time_s(self, shape: BatchShape) -> float:
        if self.broken:
            raise RuntimeError("bug")
        return super().step_time_s(shape)


def _driver(
    step_s: float = 0.01, *, fast: bool = False, **cfg: object
) -> tuple[Driver, list[SimRequest], list[str]]:
    setup = ReplicaSetup(make_config(**cfg), _BreakableTiming(step_s=step_s), fast_path=fast)
    rep = Replica("r", setup, np.random.default_rng(0))
    done: list[SimRequest] = []
    refused: list[str] = []
    driver = Driver(
        [rep],
        Router("round_robin"),
        on_finish=lambda req, r: done.append(req),
        on_reject=lambda req, r, exc: refused.append(req.request_id),
    )
    return driver, done, refused


def test_tokens_finishes_and_late_steps() -> None:
    driver, done, _ = _driver()
    assert driver.submit(make_request("a", 4, 3), 0.0) is None
    first = driver.step(0.0)  # prefill of 4 tokens and the first output
    assert (first.kind, first.start_s, first.end_s, first.replica) == ("step", 0.0, 0.01, 0)
    assert [(t.request_id, t.token_index, t.finished) for t in first.outputs] == [("a", 0, False)]
    assert driver.next_event_s() == pytest.approx(0.01)
    assert driver.step(0.005).kind == ""  # the next step is not due yet
    late = driver.step(0.5)  # a caller on the wall clock comes late: the step starts then
    assert (late.start_s, late.end_s) == (0.5, pytest.approx(0.51))
    last = driver.step(0.51)
    assert [(t.token_index, t.finished, t.finish_reason) for t in last.outputs] == [
        (2, True, "length")
    ]
    assert [r.request_id for r in last.finished] == ["a"] and done == list(last.finished)
    assert done[0].first_token_s == pytest.approx(0.01)
    assert done[0].finish_s == pytest.approx(0.52)
    idle = driver.step(0.52)  # nothing left: the replica goes idle, no event is pending
    assert idle.outputs == [] and driver.next_event_s() is None
    assert driver.num_finished == 1


def test_a_refusal_is_returned_and_reported() -> None:
    driver, _, refused = _driver()
    exc = driver.submit(make_request("big", 250, 10), 0.0)  # 260 > max_model_len 256
    assert isinstance(exc, KvbudgetError) and "max_model_len" in str(exc)
    assert refused == ["big"] and driver.num_rejected == 1
    assert driver.next_event_s() is None  # nothing to step


def test_abort_frees_the_blocks_at_once() -> None:
    driver, done, _ = _driver()
    driver.submit(make_request("a", 16, 50), 0.0)
    driver.step(0.0)
    pool = driver.replicas[0].core.pool
    assert pool.num_free_blocks < pool.num_blocks - 1
    assert driver.abort("a") is True
    assert pool.num_free_blocks == pool.num_blocks - 1  # all but the null block
    assert [(r.request_id, r.finish_reason) for r in done] == [("a", "abort")]
    assert driver.abort("a") is False
    assert driver.step(0.01).outputs == []  # the pending step finds nothing to do


def test_abort_on_the_fast_path_is_refused() -> None:
    driver, _, _ = _driver(fast=True)
    assert driver.replicas[0].fast is not None
    driver.submit(make_request("a", 4, 5), 0.0)
    with pytest.raises(ConfigError, match="fast_path=False"):
        driver.abort("a")


def test_the_clock_never_goes_back() -> None:
    driver, _, _ = _driver()
    driver.submit(make_request("a", 4, 3), 1.0)
    with pytest.raises(SimulationError, match="time went back"):
        driver.submit(make_request("b", 4, 3), 0.5)


def test_a_failing_step_leaves_the_replica_restartable() -> None:
    driver, done, _ = _driver()
    rep = driver.replicas[0]
    timing = rep.core.timing
    assert isinstance(timing, _BreakableTiming)
    timing.broken = True
    driver.submit(make_request("a", 4, 2), 0.0)
    with pytest.raises(RuntimeError, match="bug"):
        driver.step(0.0)
    assert driver.next_event_s() is None and not rep.busy
    timing.broken = False
    driver.abort("a")
    driver.submit(make_request("b", 4, 2), 1.0)  # restarts the replica
    assert driver.next_event_s() == 1.0
    while driver.next_event_s() is not None:
        driver.step(driver.next_event_s() or 0.0)
    assert [r.request_id for r in done] == ["a", "b"]


def test_zero_cost_steps_still_step() -> None:
    # a timing that costs nothing (``kvbudget serve --step-ms 0``): every request still ends
    driver, done, _ = _driver(step_s=0.0)
    requests = [make_request(f"r{i}", 8, 5) for i in range(3)]
    driver.run(requests)
    assert [(r.request_id, r.num_output_tokens, r.finish_s) for r in done] == [
        (f"r{i}", 5, 0.0) for i in range(3)
    ]


def _record(r: SimRequest) -> Record:
    return (
        r.request_id,
        r.first_token_s,
        r.finish_s,
        r.num_output_tokens,
        r.num_cached_tokens,
        r.num_preemptions,
        r.finish_reason,
    )


@pytest.mark.parametrize("seed", range(4))
def test_stepwise_api_is_the_event_loop(seed: int) -> None:
    """Arrivals submitted at their times and each event stepped at its time give what
    ``Driver.run`` gives: the same finishes, token times and cache hits (small pool:
    preemptions and evictions; planned cancellations)."""
    cfg = {"num_gpu_blocks": 24 + 4 * seed, "max_num_seqs": 6, "max_num_batched_tokens": 48}
    requests = random_workload(seed, 40)
    by_run, run_done, run_refused = _driver(**cfg)
    by_run.run(requests, DriveOptions())
    stepwise, step_done, step_refused = _driver(**cfg)
    pending: list[EngineRequest] = list(requests)
    num_outputs = 0
    while pending or stepwise.next_event_s() is not None:
        due = stepwise.next_event_s()
        if pending and (due is None or pending[0].arrival_s <= due):
            req = pending.pop(0)
            stepwise.submit(req, req.arrival_s)
            continue
        assert due is not None
        num_outputs += len(stepwise.step(due).outputs)
    assert [_record(r) for r in step_done] == [_record(r) for r in run_done]
    assert step_refused == run_refused
    assert num_outputs == sum(r.num_output_tokens for r in step_done)
    assert stepwise.num_steps == by_run.num_steps
    # the cases the comparison is about did happen: preemptions, cache hits, cancellations
    assert sum(r.num_preemptions for r in run_done) > 0
    assert sum(r.num_cached_tokens for r in run_done) > 0
    assert any(r.finish_reason == "cancelled" for r in run_done)
