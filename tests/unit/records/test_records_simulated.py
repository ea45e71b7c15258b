"""One builder of simulated records: every simulated path labels a cancelled request as vLLM does.

vLLM 0.32.0 (``vllm/v1/engine/__init__.py``): ``FINISH_REASON_STRINGS = ("stop", "length",
"abort", "error", "repetition")``, ``FinishReason.ABORT`` = "aborted by client". So a request
the client cancelled, or the server aborted, finishes with ``finish_reason="abort"``; the record
says ``status="cancelled"`` (``error_kind="cancelled"``), as a measured run's cancelled request.
Before this builder, ``kvbudget sim --records-out`` wrote a client's cancel with no finish reason
and the driver's abort as an ``other`` error, while accept's simulated target wrote ``abort``.
"""

from __future__ import annotations

import numpy as np
import pytest

from kvbudget.records.simulated import ended_as, simulated_record
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.request_result import RequestResult
from kvbudget.sim.slots import SlotConfig
from kvbudget.sim.slots_records import run_planned
from kvbudget.sim.timing import FixedTiming
from kvbudget.workload.request import PlannedRequest

CFG = ReplicaConfig(
    num_gpu_blocks=64, block_size=4, max_model_len=64, max_num_batched_tokens=64, max_num_seqs=4
)


def test_each_ending_has_one_set_of_labels() -> None:
    times = {"sent_s": 1.0, "first_token_s": 1.5, "done_s": 2.5, "prompt_tokens": 8}
    ok = simulated_record("a", "finished", finish_reason="length", output_tokens=3, **times)
    assert (ok.status, ok.error_kind, ok.finish_reason) == ("ok", None, "length")
    # 1.5 - 1.0; (2.5 - 1.5) / (3 - 1); 2.5 - 1.0
    assert (ok.ttft_s, ok.tpot_s, ok.e2e_s) == (0.5, 0.5, 1.5)
    for internal in ("cancelled", "abort", None):  # the simulator's two reasons, or none
        gone = simulated_record("b", "aborted", finish_reason=internal, output_tokens=3, **times)
        assert (gone.status, gone.error_kind, gone.finish_reason) == (
            "cancelled",
            "cancelled",
            "abort",
        )
        assert gone.error_excerpt is None and gone.http_status is None
    refused = simulated_record(
        "c", "error", error="x" * 300, http_status=400, sent_s=1.0, done_s=1.0, prompt_tokens=8
    )
    assert (refused.status, refused.error_kind, refused.http_status) == (
        "error",
        "http_status",
        400,
    )
    assert refused.error_excerpt == "x" * 200 and refused.finish_reason is None
    other = simulated_record(
        "d", "error", error="horizon: waiting", sent_s=0.0, done_s=None, prompt_tokens=8
    )
    assert (other.error_kind, other.http_status, other.error_excerpt) == (
        "other",
        None,
        "horizon: waiting",
    )
    assert {r.source for r in (ok, gone, refused, other)} == {"simulated"}
    assert {r.token_count_source for r in (ok, gone, refused, other)} == {"simulated"}


@pytest.mark.parametrize("fast", [True, False])
def test_kvbudget_sim_writes_a_clients_cancel_as_vllms_abort(fast: bool) -> None:
    reqs = [EngineRequest("cancel", (4, 5, 6), 10, arrival_s=0.0, cancel_after_tokens=3)]
    setup = ReplicaSetup(CFG, FixedTiming(step_s=0.01), fast_path=fast)
    (res,) = simulate(reqs, ClusterSpec([setup]), seed=0).requests
    record = res.to_record()
    assert (record.status, record.error_kind, record.finish_reason) == (
        "cancelled",
        "cancelled",
        "abort",
    )
    assert record.output_tokens == 3 and record.error_excerpt is None


def test_a_result_the_driver_aborted_is_cancelled_too() -> None:
    res = RequestResult(
        request_id="gone",
        replica="r0",
        arrival_s=0.0,
        first_scheduled_s=0.0,
        first_token_s=0.1,
        finish_s=0.2,
        prompt_tokens=8,
        output_tokens=2,
        cached_tokens_by_tier={},
        preemptions=0,
        status="unfinished",
        reason="abort",  # kvbudget.sim.engine's abort_request
    )
    record = res.to_record()
    assert (record.status, record.finish_reason, record.error_excerpt) == (
        "cancelled",
        "abort",
        None,
    )


def test_the_slot_engine_records_through_the_same_builder() -> None:
    """llama.cpp answers 400 to a prompt that fits no slot; a served request stops at length."""
    config = SlotConfig(num_slots=1, n_ctx_slot=8)
    planned = [
        PlannedRequest("fits", 0.0, (1, 2, 3), output_tokens=2),
        PlannedRequest("too-long", 0.0, tuple(range(10, 20)), output_tokens=2),
    ]
    records, _ = run_planned(config, FixedTiming(step_s=0.01), planned)
    fits, too_long = records
    assert (fits.status, fits.finish_reason, fits.http_status) == ("ok", "length", None)
    assert (too_long.status, too_long.error_kind, too_long.http_status) == (
        "error",
        "http_status",
        400,
    )
    assert too_long.error_excerpt == "prompt of 10 tokens does not fit a slot of 8 cells"
    assert np.isclose(fits.ttft_s or 0.0, 0.01)  # one prompt step of 10 ms, then its first token


def test_one_rule_says_how_a_simulated_request_ended() -> None:
    # the engine's (status, finish_reason): a finished request; a client's cancel (explicit and
    # fast path: status "aborted", reason "cancelled"); the driver's abort; a horizon's leftover
    assert ended_as("finished", "length") == "finished"
    assert ended_as("aborted", "cancelled") == "aborted"
    assert ended_as("aborted", "abort") == "aborted"
    assert ended_as("cancelled", "cancelled") == "aborted"  # sim.results' own status word
    assert ended_as("unfinished", "horizon: waiting") == "error"
