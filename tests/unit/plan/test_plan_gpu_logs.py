"""``plan`` from scratch against 26 real vLLM 0.19.0 start-ups on H100-80GB, term by term.

Expected values are what vLLM logged (tests/fixtures/vllm_gpu_logs, see its README); no logged
figure is given to ``plan``. The logs print GiB to two decimals, so a term agrees within 0.01 GiB
at best. Terms kvbudget computes from vLLM's source (the sampler warm-up, the device total) are
held to that; the forward phase of the profile run is a lower bound (Inductor's buffer reuse is
not modelled) and is held to "not above the log, within 0.5 GiB".
"""

from __future__ import annotations

import statistics

import pytest

from kvbudget.capacity.model_dtype import with_dtype
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan, stage_profile
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB
from tests.unit.plan.gpu_logs import LoggedRun, load_runs, started_runs

RUNS = started_runs()
IDS = [r.name for r in RUNS]


def _plan(run: LoggedRun) -> PlanResult:
    return make_plan(PlanRequest(**run.request_fields()))


def _gib(num_bytes: int) -> float:
    return num_bytes / GiB


def test_fixture_holds_26_runs_one_failed() -> None:
    runs = load_runs()
    assert len(runs) == 26
    assert [r.status for r in runs].count("ok") == 25


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_device_total_is_torchs(run: LoggedRun) -> None:
    # vLLM logs torch.cuda.mem_get_info's total (79.19 GiB), not nvidia-smi's 81,559 MiB
    result = _plan(run)
    assert _gib(result.ranks[0].total_bytes) == pytest.approx(run.total_gib, abs=0.005)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_weights_per_stage(run: LoggedRun) -> None:
    result = _plan(run)
    predicted = sorted(round(_gib(r.weights.num_bytes), 2) for r in result.ranks)
    logged = sorted({w.weights_gib for w in run.workers})
    # every logged stage weight is matched by a predicted stage within 0.07 GiB
    for value in logged:
        assert min(abs(p - value) for p in predicted) <= 0.07, (predicted, logged)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_non_torch_per_gpu(run: LoggedRun) -> None:
    result = _plan(run)
    for rank in result.ranks:
        for worker in run.workers:
            assert _gib(rank.non_torch.num_bytes) == pytest.approx(worker.non_torch_gib, abs=0.02)


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_activation_of_the_last_stage(run: LoggedRun) -> None:
    """The last stage runs the sampler warm-up; its logged activation is the largest."""
    result = _plan(run)
    last = result.ranks[-1]
    logged = max(w.activation_gib for w in run.workers)
    predicted = _gib(last.activation.num_bytes)
    assert last.activation.source == "computed"
    request = PlanRequest(**run.request_fields())
    spec = resolve_model(str(run.config)).spec
    assert spec is not None
    phases = stage_profile(
        request,
        with_dtype(spec, run.flags["dtype"]),
        request.pp - 1,
        result.max_num_batched_tokens,
        result.max_num_seqs,
    )
    if phases.sampler_is_peak:
        assert predicted == pytest.approx(logged, abs=0.02)
    else:  # the dummy forward is the peak: a lower bound
        assert logged - 0.5 <= predicted <= logged + 0.01


@pytest.mark.parametrize("run", [r for r in RUNS if r.flags["pp"] > 1], ids=lambda r: r.name)
def test_activation_of_stages_without_the_sampler(run: LoggedRun) -> None:
    result = _plan(run)
    logged = sorted(w.activation_gib for w in run.workers)[:-1]
    for rank in result.ranks[:-1]:
        predicted = _gib(rank.activation.num_bytes)
        assert min(logged) - 0.25 <= predicted <= max(logged) + 0.01


@pytest.mark.parametrize("run", RUNS, ids=IDS)
def test_available_kv_tokens_concurrency_and_verdict(run: LoggedRun) -> None:
    result = _plan(run)
    assert run.available_kv_gib is not None and run.kv_tokens and run.max_concurrency
    assert _gib(result.available_kv_bytes) == pytest.approx(run.available_kv_gib, rel=0.015)
    assert result.kv_cache_tokens == pytest.approx(run.kv_tokens, rel=0.015)
    assert result.max_concurrency == pytest.approx(run.max_concurrency, rel=0.015)
    assert result.fits and result.error is None  # every logged run started


def test_mean_available_kv_error_is_small() -> None:
    errors = []
    for run in RUNS:
        assert run.available_kv_gib is not None
        got = _gib(_plan(run).available_kv_bytes)
        errors.append(abs(got - run.available_kv_gib) / run.available_kv_gib)
    assert statistics.fmean(errors) <= 0.002  # 0.2 % mean over the 25 started runs
    assert max(errors) <= 0.015


def test_float32_doubles_weights_and_kv_element() -> None:
    run = next(r for r in RUNS if r.flags["dtype"] == "float32")
    bf16 = next(
        r
        for r in RUNS
        if r.model == run.model
        and r.flags["dtype"] == "bfloat16"
        and r.flags["tp"] == r.flags["pp"] == 1
        and r.flags["max_model_len"] == 8192
        and r.flags["kv_cache_dtype"] == "auto"
        and r.flags["quantization"] == "None"
    )
    f32, b16 = _plan(run), _plan(bf16)
    assert f32.ranks[0].weights.num_bytes == 2 * b16.ranks[0].weights.num_bytes
    assert f32.kv_bytes_per_token_per_rank == 2 * b16.kv_bytes_per_token_per_rank
    # logged: 29.98 vs 14.99 GiB of weights; 175,296 vs 476,016 tokens
    assert run.workers[0].weights_gib == pytest.approx(2 * bf16.workers[0].weights_gib, abs=0.01)
