"""Scale-in (drain, cancel + retry, migration by re-prefill or transfer) and a pod crash.

FixedTiming: a step costs 0.01 s + 0.001 s per scheduled token. Two replicas, round robin.
Request "a" (40-token prompt, 100 outputs) goes to replica 0 at t=0; its prefill step takes
0.050 s, then each decode step 0.011 s, so by t=0.5 s it has streamed
1 + floor((0.5 - 0.05) / 0.011) = 41 tokens; the step that started at 0.49 s (its 42nd token
ends at 0.501 s) is in flight and wasted. Replica 0 is scaled in at 0.1 s with a grace of 0.4 s:
at 0.5 s request "a" is still running.
"""

from __future__ import annotations

import pytest

from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.config import ReplicaConfig
from kvbudget.sim.lifecycle import Crash, LifecycleStats, ScaleIn
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest
from kvbudget.sim.timing import FixedTiming

CFG = ReplicaConfig(
    num_gpu_blocks=128,
    block_size=4,
    max_num_seqs=4,
    max_num_batched_tokens=64,
    max_model_len=256,
    kv_bytes_per_token=1000,
)
TIMING = FixedTiming(step_s=0.01, per_token_s=0.001)
A = EngineRequest("a", tuple(range(100, 140)), 100, arrival_s=0.0)
STREAMED = 41


def _run(event: ScaleIn | Crash) -> tuple[dict[str, object], dict[str, object]]:
    setups = [ReplicaSetup(CFG, TIMING), ReplicaSetup(CFG, TIMING)]
    key = "scale_in" if isinstance(event, ScaleIn) else "crashes"
    res = simulate([A], ClusterSpec(setups, router="round_robin", **{key: [event]}), seed=0)
    return {r.request_id: r for r in res.requests}, res.summary()["lifecycle"]


def test_drain_finishes_within_the_grace_period() -> None:
    # 100 outputs end at 0.05 + 99 x 0.011 = 1.139 s, inside a 5 s grace: nothing is touched
    by_id, stats = _run(ScaleIn(at_s=0.1, replica=0, grace_s=5.0))
    assert set(by_id) == {"a"} and by_id["a"].finished  # type: ignore[attr-defined]
    assert stats["cancelled"] == 0 and stats["duplicated_prefill_tokens"] == 0


def test_cancel_and_retry_counts_duplicated_work() -> None:
    by_id, stats = _run(ScaleIn(at_s=0.1, replica=0, grace_s=0.4))
    first, again = by_id["a"], by_id["a#retry1"]
    assert first.status == "cancelled" and first.output_tokens == STREAMED  # type: ignore[attr-defined]
    assert again.finished and again.replica == "replica-1"  # type: ignore[attr-defined]
    assert again.output_tokens == 100 and again.arrival_s == 0.0  # type: ignore[attr-defined]
    assert stats["duplicated_prefill_tokens"] == 40
    assert stats["duplicated_output_tokens"] == STREAMED + 1  # the in-flight token too


def test_migration_by_reprefill_keeps_the_streamed_output() -> None:
    by_id, stats = _run(ScaleIn(at_s=0.1, replica=0, grace_s=0.4, on_deadline="reprefill"))
    moved = by_id["a#migrate1"]
    # the continuation's prompt is the 40 prompt tokens + 41 streamed ones; 59 outputs remain
    assert moved.prompt_tokens == 40 + STREAMED and moved.output_tokens == 100 - STREAMED  # type: ignore[attr-defined]
    assert "a" not in by_id  # the migrated attempt is not a client-visible failure
    # recomputed on the target: the whole context
    assert stats["duplicated_prefill_tokens"] == 40 + STREAMED
    assert stats["duplicated_output_tokens"] == 0


def test_migration_by_transfer_moves_the_kv_instead() -> None:
    event = ScaleIn(
        at_s=0.1,
        replica=0,
        grace_s=0.4,
        on_deadline="transfer",
        transfer_bandwidth_bytes_per_s=1e6,
    )
    by_id, stats = _run(event)
    moved = by_id["a#migrate1"]
    # every context token's KV but the last: 80 x 1,000 B
    assert stats["transfer_bytes"] == (40 + STREAMED - 1) * 1000
    assert stats["duplicated_prefill_tokens"] == 0
    # 80,000 B at 1 MB/s: arrives at 0.5 + 0.080; one zero-length admission, then one step of
    # 1 token (0.011 s) gives its first token at 0.591 s
    assert moved.cached_tokens_by_tier == {"transfer": 40 + STREAMED - 1}  # type: ignore[attr-defined]
    assert moved.first_token_s == pytest.approx(0.5 + 0.080 + 0.011)  # type: ignore[attr-defined]


def test_crash_recomputes_from_the_saved_context_on_another_replica() -> None:
    by_id, stats = _run(Crash(at_s=0.5, replica=0, restart_s=60.0))
    recovered = by_id["a#recover1"]
    assert recovered.replica == "replica-1" and recovered.finished  # type: ignore[attr-defined]
    assert recovered.prompt_tokens == 40 + STREAMED  # type: ignore[attr-defined]
    assert stats["lost_in_crash"] == 1
    assert stats["duplicated_prefill_tokens"] == 40 + STREAMED


def test_scenario_file_declares_scale_in_and_crashes(tmp_path: object) -> None:
    import json
    import subprocess
    import sys
    from pathlib import Path

    path = Path(str(tmp_path)) / "s.yaml"
    path.write_text(
        "replicas: 2\n"
        "workload: {num_requests: 20, arrivals: {kind: poisson, rate_per_s: 5},"
        " input_tokens: {kind: fixed, value: 64}, output_tokens: {kind: fixed, value: 8}}\n"
        "scale_in: [{at_s: 1, replica: 0, grace_s: 0.5}]\n"
        "crashes: [{at_s: 2, replica: 1, restart_s: 1}]\n"
    )
    cmd = [sys.executable, "-m", "kvbudget", "sim", "--scenario", str(path), "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert set(summary["lifecycle"]) >= {"cancelled", "lost_in_crash", "duplicated_prefill_tokens"}
    path.write_text("scale_in: [{at_s: 1, replica: 0, on_deadline: teleport}]\n")
    bad = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "on_deadline" in bad.stderr


def test_scale_out_warmup_shifts_traffic_gradually() -> None:
    import zlib

    from kvbudget.sim.driver import ScaleOut

    # one replica; a second one is added at 0 s, ready at 1 s, warm-up 10 s; one short request
    # every 0.05 s for 15 s, round robin over the replicas eligible for each request
    reqs = [EngineRequest(f"r{i}", (1, 2, 3, 4, 5), 2, arrival_s=i * 0.05) for i in range(300)]
    setup = ReplicaSetup(CFG, TIMING)
    spec = ClusterSpec([setup], scale_out=[ScaleOut(0.0, setup, 1.0, 10.0)])
    res = simulate(reqs, spec, seed=0)
    on_new = {r.request_id for r in res.requests if r.replica == "replica-1"}
    for r in reqs:
        share = zlib.crc32(r.request_id.encode()) / 2**32
        eligible = r.arrival_s >= 1.0 and (r.arrival_s >= 11.0 or share < (r.arrival_s - 1) / 10)
        if not eligible:  # never before it is ready, nor above the ramp's share
            assert r.request_id not in on_new
    early = sum(1 for r in reqs[20:120] if r.request_id in on_new)  # 1-6 s: ramp < 50%
    late = sum(1 for r in reqs[220:] if r.request_id in on_new)  # 11-15 s: plain round robin
    assert early < 100 * 0.5 / 2 + 10 and late == 40  # round robin: every other one of 80


def test_resent_ids_count_attempts_without_reading_the_id_text() -> None:
    stats = LifecycleStats()
    first = stats.resend_id("a", "retry")
    assert first == "a#retry1"
    assert stats.resend_id(first, "retry") == "a#retry2"  # the same request re-sent again
    moved = stats.resend_id(first, "migrate")
    assert moved == "a#retry1#migrate1"
    assert stats.resend_id(moved, "migrate") == "a#retry1#migrate2"
    # a workload id that only looks like a re-send is an original: its first retry is 1
    assert stats.resend_id("trace#retry7", "retry") == "trace#retry7#retry1"
