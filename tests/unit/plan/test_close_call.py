"""Verdicts that say how sure they are, and remedies that work (issue #32 item 3)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from kvbudget.capacity.close_call import close_call
from kvbudget.capacity.memory import MemoryTerm, RankMemory
from kvbudget.cli.plan import plan

GIB = 1 << 30


def _rank(available: float, *, estimated: dict[str, float]) -> RankMemory:
    def term(name: str, gib: float) -> MemoryTerm:
        source = "estimated" if name in estimated else "computed"
        return MemoryTerm(name, int(estimated.get(name, gib) * GIB), source, "by hand")

    return RankMemory(
        pp_rank=0,
        total_bytes=80 * GIB,
        gpu_memory_utilization=0.9,
        requested_bytes=72 * GIB,
        weights=term("weights", 60),
        activation=term("activation", 2),
        non_torch=term("non_torch", 0.25),
        cudagraph=term("cudagraph", 1),
        cudagraph_subtracted=True,
        kv_cache_memory_override=False,
        available_kv_bytes=int(available * GIB),
        num_layers=32,
        group_size=1,
        num_blocks=1,
        kv_pool_bytes=int(available * GIB),
    )


def test_a_miss_smaller_than_the_estimates_is_a_close_call() -> None:
    # short by 1 GiB (10 available, 11 needed) while 3.45 + 0.25 GiB are estimates
    rank = _rank(10, estimated={"cudagraph": 3.45, "non_torch": 0.25})
    call = close_call(rank, 11 * GIB)
    assert call is not None and not call.fits
    assert call.margin_bytes == GIB
    assert call.estimated_bytes == int(3.45 * GIB) + int(0.25 * GIB)
    text = call.text()
    assert text.startswith("close call: does not start, short by 1.00 GiB, but 3.70 GiB")
    assert "might start" in text and "Available KV cache memory" in text


def test_headroom_smaller_than_the_estimates_is_a_close_call_too() -> None:
    call = close_call(_rank(10, estimated={"cudagraph": 1.0}), int(9.7 * GIB))
    assert call is not None and call.fits and "might not start" in call.text()


def test_a_margin_beyond_every_estimate_stands() -> None:
    assert close_call(_rank(10, estimated={"non_torch": 0.25}), 11 * GIB) is None
    assert close_call(_rank(10, estimated={}), int(10.1 * GIB)) is None  # nothing estimated


def test_weights_that_cannot_fit_get_the_knob_that_works() -> None:
    """Llama-3.1-70B in bf16 on one H100: about 131 GiB of weights (70.6e9 x 2 B) against the
    71 GiB vLLM may use at 0.9. fp8 KV cannot help; fp8 weights halve them."""
    result = CliRunner().invoke(
        plan, ["--model", "meta-llama/Llama-3.1-70B", "--gpu", "h100", "--json"]
    )
    doc = json.loads(result.output)
    remedies = doc["remedies"]
    assert any(r.startswith("--quantization fp8 (or an FP8 checkpoint") for r in remedies)
    assert not any(r.startswith("--kv-dtype fp8") for r in remedies)
    assert any("the weights alone" in r for r in remedies)


def test_plan_json_carries_the_close_call() -> None:
    """gpt-oss-120b on one H100 at 0.9: short of one max-length request by less than the
    estimated CUDA-graph pool (issue #32's example: 'does not start' on a small gap)."""
    args = ["--model", "openai/gpt-oss-120b", "--gpu", "h100", "--gpu-memory-utilization", "0.9"]
    result = CliRunner().invoke(plan, [*args, "--json"])
    doc = json.loads(result.output)
    assert doc["fits"] is False and doc["close_call"] is not None
    call = doc["close_call"]
    assert call["margin_bytes"] <= call["estimated_bytes"]
    assert call["text"].startswith("close call: does not start")
