"""accept flags an open-loop cell whose queue kept growing (issue 15, item 12); run_acceptance
judges it from the run's records (issue 33: not the CLI re-reading records.jsonl)."""

from __future__ import annotations

from kvbudget.accept.judge.record_checks import unstable_queues
from kvbudget.records import RequestRecord


def _record(cell: str, i: int, arrival_s: float | None, ttft_s: float) -> RequestRecord:
    return RequestRecord(
        request_id=f"{cell}#0/r{i:06d}", source="simulated", status="ok", cell_id=cell,
        scheduled_s=arrival_s, sent_s=arrival_s or 0.0, ttft_s=ttft_s,
    )  # fmt: skip


def test_growing_open_loop_cell_is_an_anomaly_and_closed_loop_is_not() -> None:
    rows = []
    for i in range(60):
        t = i / 10.0  # 10/s offered
        rows.append(_record("short/peak", i, t, 0.2 * (i + 1) - t))  # served at 5/s (D/D/1)
        rows.append(_record("short/normal", i, t, 0.05))  # keeps up
        rows.append(_record("long/single", i, None, 0.05 * i))  # closed loop: no schedule
    found = unstable_queues(rows)
    assert [a.cells for a in found] == [["short/peak"]]
    assert found[0].code == "unstable_queue" and "about 5/s" in found[0].evidence
