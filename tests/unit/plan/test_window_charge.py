"""Issue #32 item 5: a sliding group's few blocks per sequence beside a concurrency figure that
charges it many, explained; and a device headroom that reads the right way round.

Expected numbers are hand arithmetic on vLLM's two rules (block 16):

* kept once decoding (``SlidingWindowManager`` skips ``T - W`` tokens): ``cdiv(L, 16) -
  (L - W) // 16``;
* charged by the concurrency figure (``SlidingWindowSpec.max_memory_usage_bytes``):
  ``cdiv(min(W - 1 + T_b, L), 16) + 1``.

The issue's case is a 128-token window (gpt-oss) with ``max_num_batched_tokens`` 8,192: kept
``128 / 16 = 8``, charged ``cdiv(127 + 8,192, 16) + 1 = 520 + 1 = 521``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.targets.capacity import build_ledger
from kvbudget.capacity.budget import DevicePeak
from kvbudget.capacity.layouts.vllm_specs import VllmLayerSpec
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.capacity.pool import KvCacheGroup
from kvbudget.capacity.window_charge import group_blocks, window_charges
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB, MiB

REPO = Path(__file__).resolve().parents[3]
KVBUDGET = (sys.executable, "-m", "kvbudget")
GEMMA = ("--model", "google/gemma-3-27b-it")


def test_the_issue_window_keeps_8_blocks_and_is_charged_521() -> None:
    assert 128 // 16 == 8
    assert -(-(127 + 8192) // 16) + 1 == 521
    group = KvCacheGroup(
        group_id=0,
        spec=VllmLayerSpec(0, "sliding", 16, 16 * 8 * 64 * 2 * 2, sliding_window=128),
        layer_indices=range(0, 24, 2),
    )
    # a long sequence: 131,072 tokens; cdiv(131,072, 16) - (131,072 - 128) // 16 = 8192 - 8184
    assert 8192 - (131072 - 128) // 16 == 8
    assert group.max_blocks_per_request(131072, 8192) == 521


def test_gemma3_plan_explains_64_kept_against_513_charged() -> None:
    """Gemma-3-27B (window 1,024) at 8,192 tokens: kept 512 - (8,192 - 1,024) // 16 = 64,
    charged cdiv(min(1,023 + 8,192, 8,192), 16) + 1 = 513; the full group 512 both ways."""
    result = make_plan(
        PlanRequest(model="google/gemma-3-27b-it", gpu="h100-sxm", max_model_len=8192)
    )
    blocks = group_blocks(result)
    assert blocks is not None
    assert {(b.kind, b.kept, b.charged) for b in blocks} == {
        ("sliding", 64, 513),
        ("full", 512, 512),
    }
    charges = window_charges(result)
    assert charges is not None
    n_sliding = sum(1 for b in blocks if b.kind == "sliding")
    n_full = len(blocks) - n_sliding
    assert charges.charged_per_sequence == 513 * n_sliding + 512 * n_full
    assert charges.kept_per_sequence == 64 * n_sliding + 512 * n_full
    # the logged figure is num_blocks over the charged blocks (vLLM 0.32: sum_g cdiv)
    assert result.max_concurrency == pytest.approx(result.num_blocks / charges.charged_per_sequence)
    first, summary = charges.lines()
    assert first.startswith("sliding window 1,024 tokens (groups 0-")
    assert "keeps 64 blocks of 16 tokens per group once decoding" in first
    assert "charges it 513 per group" in first
    # vLLM 0.33 (the default) on a GPU schedules asynchronously: 2 batches in flight
    assert "cdiv(min(1,023 + 16,384, 8,192), 16) + 1" in first
    assert "2 batches in flight x max_num_batched_tokens" in first
    assert f"{result.num_blocks / charges.kept_per_sequence:.2f}" in summary


def test_a_full_attention_model_has_nothing_to_explain() -> None:
    result = make_plan(
        PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="h100-sxm", max_model_len=8192)
    )
    assert window_charges(result) is None
    blocks = group_blocks(result)
    assert blocks is not None and all(b.kept == b.charged == 512 for b in blocks)


def _peak(device_gib: float, used_gib: float) -> DevicePeak:
    """A device peak of ``used_gib`` on ``device_gib`` with a 3 % + 150 MiB margin."""
    device = int(device_gib * GiB)
    return DevicePeak(
        pp_rank=0,
        device_bytes=device,
        cuda_context_bytes=0,
        weights_bytes=int(used_gib * GiB),
        activation_bytes=0,
        non_torch_bytes=0,
        cudagraph_bytes=0,
        kv_pool_bytes=0,
        margin_bytes=int(0.03 * device) + 150 * MiB,
    )


def test_headroom_larger_than_the_margin_reads_as_fine() -> None:
    # 80 GiB: margin 2.40 GiB + 0.15 GiB = 2.55 GiB; 76.52 used leaves 3.48 GiB: fine
    assert _peak(80, 76.52).headroom_text() == (
        "headroom 3.48 GiB, more than the 2.55 GiB safety margin: ok"
    )
    # 78.5 used leaves 1.50 GiB, under the 2.55 GiB margin: a problem
    text = _peak(80, 78.5).headroom_text()
    assert text.startswith("headroom 1.50 GiB, less than the 2.55 GiB safety margin: tight")
    # beyond the device: does not fit
    assert _peak(80, 81).headroom_text().startswith("over the device by 1.00 GiB: does not fit")


def test_plan_at_80_columns_says_why_the_window_groups_are_charged_more() -> None:
    env = {**os.environ, "COLUMNS": "80", "TERM": "dumb"}
    proc = subprocess.run(
        [*KVBUDGET, "plan", *GEMMA, "--gpu", "h100-sxm", "--max-model-len", "8192"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert all(len(line) <= 80 for line in lines)
    start = lines.index("why max_concurrency charges the window groups more blocks than they keep:")
    text = " ".join(line.strip() for line in lines[start : start + 14])
    assert "keeps 64 blocks of 16 tokens per group once decoding" in text
    assert "charges it 513 per group" in text
    # charged per sequence, by hand: 6 sliding groups x 513 + the full group's 8,192 / 16 = 512
    assert "3,590 charged per sequence" in text
    # and the figure explained is the one plan reports (its pool depends on the version's
    # CUDA-graph and activation terms, so it is read from plan --json, not typed here)
    doc = json.loads(
        subprocess.run(
            [*KVBUDGET, "plan", *GEMMA, "--gpu", "h100-sxm", "--max-model-len", "8192", "--json"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert f"{doc['max_concurrency']:.2f}x" in text
    # the calculator's own "blocks per sequence" says which moment it counts
    calc = subprocess.run(
        [*KVBUDGET, "calc", *GEMMA, "--engine", "vllm", "--tokens", "8192", "--json"],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert calc.returncode == 0, calc.stderr
    notes = {g["kind"]: g["note"] for g in json.loads(calc.stdout)["groups"]}
    assert notes["sliding"] == (
        "64 block(s) of 16 tokens per sequence (kept once decoding: the blocks the window touches)"
    )


def test_the_report_ledger_carries_the_explanation() -> None:
    """The acceptance ledger's max_concurrency entry carries the same sentences (report.json;
    the report shows each ledger entry's note), and the device peak reads as a verdict."""
    plan = load_plan(REPO / "examples" / "acceptance-demo.yaml")
    result = make_plan(
        PlanRequest(model="google/gemma-3-27b-it", gpu="h100-sxm", max_model_len=8192)
    )
    spec = resolve_model("google/gemma-3-27b-it").spec
    assert spec is not None
    ledger = build_ledger(plan, result, spec)
    (entry,) = [e for e in ledger.entries if e.name == "max_concurrency"]
    assert entry.note is not None and "charges it 513 per group" in entry.note
    (device,) = [b for b in ledger.budgets if b.name == "device_peak"]
    assert "more than the 2.54 GiB safety margin: ok" in device.what, device.what


@pytest.mark.parametrize(
    ("version", "pp", "asynchronous", "batches"),
    [
        ("0.25.0", 1, True, 1),  # no max_in_flight_tokens before 0.26.0
        ("0.26.0", 1, True, 2),  # async: 2 batches (VllmConfig.max_concurrent_batches)
        ("0.26.0", 1, False, 1),
        ("0.32.0", 2, False, 2),  # pipeline parallel fills pp batches
        ("0.32.0", 2, True, 3),  # async with PP: the V2 model runner, pp + 1
    ],
)
def test_batches_in_flight_by_version(
    version: str, pp: int, asynchronous: bool, batches: int
) -> None:
    from kvbudget.capacity.versions import parse_version, vllm_concurrent_batches

    assert vllm_concurrent_batches(parse_version(version), pp, asynchronous) == batches


def test_two_batches_in_flight_double_a_window_groups_charge() -> None:
    """Gemma-3-27B at 32,768 tokens, max_num_batched_tokens 8,192: a sliding group is charged
    cdiv(1,023 + 8,192, 16) + 1 = 577 blocks up to vLLM 0.25 and, with async scheduling's 2
    batches in flight from 0.26.0, cdiv(1,023 + 16,384, 16) + 1 = 1,089; a full group 2,048
    either way. --no-async-scheduling, or no GPU (the CPU build), keeps one batch."""
    assert -(-(1023 + 8192) // 16) + 1 == 577 and -(-(1023 + 16384) // 16) + 1 == 1089

    def charged(**fields: object) -> set[tuple[str, int]]:
        request = PlanRequest(
            model="google/gemma-3-27b-it",
            gpu="h100-sxm",
            max_model_len=32768,
            max_num_batched_tokens=8192,
            **fields,  # type: ignore[arg-type]
        )
        blocks = group_blocks(make_plan(request))
        assert blocks is not None
        return {(b.kind, b.charged) for b in blocks}

    assert charged(engine_version="0.25.0") == {("sliding", 577), ("full", 2048)}
    assert charged(engine_version="0.32.0") == {("sliding", 1089), ("full", 2048)}
    no_async = charged(engine_version="0.32.0", async_scheduling=False)
    assert no_async == {("sliding", 577), ("full", 2048)}
    cpu = make_plan(
        PlanRequest(
            model="google/gemma-3-27b-it",
            kv_cache_memory_bytes=64 * GiB,
            engine_version="0.32.0",
            max_model_len=32768,
            max_num_batched_tokens=8192,
        )
    )
    assert cpu.in_flight_tokens == 8192
    flagged = make_plan(
        PlanRequest(
            model="google/gemma-3-27b-it",
            kv_cache_memory_bytes=64 * GiB,
            engine_version="0.32.0",
            max_model_len=32768,
            max_num_batched_tokens=8192,
            async_scheduling=True,
        )
    )
    assert flagged.in_flight_tokens == 8192
    assert any(n.startswith("async_scheduling: ignored without a device") for n in flagged.notes)
