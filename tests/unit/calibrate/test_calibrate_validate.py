"""The validation cells scale with the engine's slots and context."""

from __future__ import annotations

from kvbudget.calibrate.engine import EngineInfo
from kvbudget.calibrate.validate import cell_load, default_cells


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
