"""P/D disaggregation, worked by hand (FixedTiming: a step costs 0.01 s + 0.001 s per token).

One request, 40 prompt tokens, 3 output tokens, arriving at 0; KV 1,000 bytes per token.

Disaggregated (1 prefill + 1 decode replica, link 1 MB/s, latency 2 ms, 1 ms per message):
  prefill   one step of 40 tokens: 0.01 + 0.040 = 0.050 s -> prompt KV exists at 0.050
  transfer  40,000 B: 0.002 + 0.001 + 40,000 / 1e6 = 0.043 s -> arrives at the decoder at 0.093
  decode    39 tokens preloaded; the last prompt token is recomputed: 0.011 s -> first token at
            0.104 (client TTFT 0.104 s); two decode steps of 0.011 s -> done at 0.126
            (TPOT 0.011 s)
Co-located (2 replicas): one step of 40 tokens -> first token at 0.050; done at 0.072.
"""

from __future__ import annotations

import pytest

from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.disagg import KVLinkConfig, PDSpec, compare_pd, simulate_pd, transfer_s
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

CFG = ReplicaConfig(
    num_gpu_blocks=64,
    block_size=4,
    max_num_seqs=4,
    max_num_batched_tokens=64,
    max_model_len=128,
    kv_bytes_per_token=1000,
)
TIMING = FixedTiming(step_s=0.01, per_token_s=0.001)
LINK = KVLinkConfig(bandwidth_bytes_per_s=1e6, latency_s=0.002, per_transfer_s=0.001)
REQ = EngineRequest("r", tuple(range(100, 140)), 3, arrival_s=0.0)


def _spec(**kw: object) -> PDSpec:
    return PDSpec([ReplicaSetup(CFG, TIMING)], [ReplicaSetup(CFG, TIMING)], LINK, **kw)  # type: ignore[arg-type]


def test_one_request_by_hand() -> None:
    result = simulate_pd([REQ], _spec(), seed=0)
    (transfer,) = result.transfers
    assert transfer.start_s == pytest.approx(0.050)
    assert transfer.end_s == pytest.approx(0.093)
    assert transfer.num_bytes == 40_000
    (req,) = result.requests
    assert req.replica == "replica-0->replica-0" and req.finished
    assert req.arrival_s == 0.0
    assert req.first_token_s == pytest.approx(0.104)
    assert req.finish_s == pytest.approx(0.126)
    assert req.output_tokens == 3
    # the decoder computed only the last prompt token
    assert result.decode.replica_stats["replica-0"].prompt_tokens == 40
    assert result.decode.requests[0].cached_tokens_by_tier == {"transfer": 39}


def test_colocated_wins_for_one_short_request() -> None:
    colocated = [ReplicaSetup(CFG, TIMING), ReplicaSetup(CFG, TIMING)]
    table = compare_pd([REQ], _spec(), colocated, seed=0)
    assert table["figures"] == "simulated"
    assert table["disaggregated"]["ttft_p50_s"] == pytest.approx(0.104)
    assert table["colocated"]["ttft_p50_s"] == pytest.approx(0.050)
    assert table["disaggregated"]["tpot_p50_s"] == pytest.approx(0.011)
    assert table["colocated"]["tpot_p50_s"] == pytest.approx(0.011)
    assert table["disaggregated"]["transfer_s_mean"] == pytest.approx(0.043)


def test_tp_mismatch_costs_messages_and_relayout() -> None:
    link = KVLinkConfig(
        bandwidth_bytes_per_s=1e6, latency_s=0.002, per_transfer_s=0.001, relayout_s=0.005
    )
    # prefill TP 2 -> decode TP 1: 1 stream, 2 messages: 0.002 + 0.002 + 0.040 + 0.005
    assert transfer_s(40_000, link, 2, 1) == pytest.approx(0.049)
    # TP 2 -> TP 2: 2 streams, 1 message each: 0.002 + 0.001 + 0.020
    assert transfer_s(40_000, link, 2, 2) == pytest.approx(0.023)


def test_transfers_queue_on_the_prefill_replicas_link() -> None:
    # two requests prefilled in one step (80 tokens > budget 64: the second is chunked) ...
    a = EngineRequest("a", tuple(range(100, 140)), 2, arrival_s=0.0)
    b = EngineRequest("b", tuple(range(200, 240)), 2, arrival_s=0.0)
    result = simulate_pd([a, b], _spec(), seed=0)
    first, second = sorted(result.transfers, key=lambda t: t.start_s)
    # ... the second transfer starts when the first one frees the link, or later
    assert second.start_s >= first.end_s - 1e-12
    assert second.end_s - second.start_s == pytest.approx(0.043)
