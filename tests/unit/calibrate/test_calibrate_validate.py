"""The validation cells scale with the engine's slots and context."""

from __future__ import annotations

import asyncio
import math
from typing import cast

import pytest

from kvbudget.calibrate.engine import EngineInfo
from kvbudget.calibrate.predict import CellFigures, CellLoad
from kvbudget.calibrate.validate import cell_load, default_cells, measure_cell
from kvbudget.load.client import ClientRequest, OpenAIClient
from kvbudget.load.outcome import StreamOutcome


def test_cells_for_four_slots_of_2048() -> None:
    info = EngineInfo("llama.cpp", "b1", "m", num_slots=4, n_ctx_slot=2048)
    cells = {c.cell_id: c for c in default_cells(info, output_tokens=32)}
    # short = 2048 / 16, medium = 2048 / 4, long = 3 * 2048 / 4 - 32; normal 4 / 2, peak 2 * 4
    assert cells["short/single"].prompt_tokens == 128
    assert cells["medium/normal"].prompt_tokens == 512
    assert cells["long/peak"].prompt_tokens == 1504
    assert cells["short/normal"].concurrency == 2 and cells["short/peak"].concurrency == 8
    held_out = {c.cell_id for c in cells.values() if c.role == "held-out"}
    assert held_out == {"short/peak", "long/single", "long/peak"}
    # every prompt plus its output fits a slot
    assert all(c.prompt_tokens + c.output_tokens <= 2048 for c in cells.values())


def test_cell_prompts_are_seeded_and_distinct() -> None:
    info = EngineInfo("llama.cpp", "b1", "m", num_slots=4, n_ctx_slot=2048)
    plan = default_cells(info)[3]
    a, b = cell_load(plan, 5), cell_load(plan, 5)
    assert a == b and len(a.prompts) == plan.num_requests
    assert len(set(a.prompts)) == len(a.prompts)
    assert cell_load(plan, 6) != a


class _BurstClient:
    """Streams each request's 4 tokens either spread out or all at one instant."""

    base_url = "http://fake"

    def __init__(self, bursts: set[int]) -> None:
        self.bursts = bursts
        self.n = 0

    async def stream(self, req: ClientRequest) -> StreamOutcome:
        k, self.n = self.n, self.n + 1
        t0 = 10.0 * k
        gaps = [0.0, 0.0, 0.0, 0.0] if k in self.bursts else [0.0, 0.1, 0.2, 0.3]
        return StreamOutcome(
            request_id=req.request_id,
            sent_s=t0,
            chunk_times_s=[t0 + 0.5 + g for g in gaps],
            usage_completion_tokens=4,
        )


def _measure(bursts: set[int]) -> tuple[CellFigures, list[str]]:
    load = CellLoad("short/single", tuple((7, 8, 9) for _ in range(4)), 4, 1)
    client = cast(OpenAIClient, _BurstClient(bursts))
    return asyncio.run(measure_cell(client, "m", load, "fake"))


def test_a_burst_request_has_no_tpot_rather_than_zero() -> None:
    # by hand: the spread requests' TPOT is (0.3 - 0) / 3 = 0.1 s; bursts are left out
    cell, warnings = _measure({0, 1, 2})
    assert cell.tpot_p50_s == pytest.approx(0.1)
    assert cell.ttft_p50_s == pytest.approx(0.5)
    assert warnings == [
        "short/single: 3 of 4 requests delivered every token to the client at one instant, so "
        "their TPOT is not observable and is left out (run the client where it is not starved "
        "of CPU by the engine)"
    ]
    cell, warnings = _measure({0, 1, 2, 3})
    assert math.isnan(cell.tpot_p50_s) and "the cell has no measured TPOT" in warnings[0]
    cell, warnings = _measure(set())
    assert cell.tpot_p50_s == pytest.approx(0.1) and warnings == []
