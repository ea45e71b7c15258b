"""``kvbudget capacity --out DIR --resume``: an interrupted search continues from its finished
probes and gives the uninterrupted answer.

The target is a fake one-slot FIFO server (a test-only :class:`Target`, no kvbudget internals
replaced) that serves every request in exactly ``D = 0.1 s`` with one output token, on a virtual
clock:

* closed loop at concurrency ``c``: once the loop is full every request waits for the ``c - 1``
  ahead of it and its own service, TTFT = ``c * D`` (the first ``c`` requests: ``D .. c D``), so
  the p95 of 200 requests is ``c * D`` and under ``ttft_p95 < 0.35 s`` the highest concurrency is
  ``floor(0.35 / 0.1) = 3`` (4 gives 0.4 s);
* Poisson arrivals: Lindley's recursion ``start_i = max(arrival_i, done_{i-1})``; the service
  rate is ``1 / D = 10 requests/s``.

The fake can be told to raise ``KeyboardInterrupt`` inside its k-th probe (Ctrl-C mid-probe): the
probes before it are on disk, that one is not, and the resume runs it again.
"""

from __future__ import annotations

import heapq
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvbudget.accept.targets.base import CellRun, Target, TargetInfo
from kvbudget.cli.capacity import capacity
from kvbudget.errors import ConfigError
from kvbudget.maxload.journal import PROBES_FILE, ProbeJournal
from kvbudget.maxload.probe import Budget, TargetProbe
from kvbudget.maxload.run import Capacity, find_capacity
from kvbudget.maxload.slo import parse_slo
from kvbudget.records import RequestRecord
from kvbudget.workload.request import PlannedRequest
from tests.unit.maxload.test_capacity_cli import SMALL as CLI_SMALL

SERVICE_S = 0.1
SLO = "ttft_p95<350ms"
WORKLOAD = {
    "input_tokens": {"kind": "fixed", "value": 16},
    "output_tokens": {"kind": "fixed", "value": 1},
}


class OneSlotServer:
    """A fake one-slot FIFO server; counts its probes, and interrupts the ``interrupt_at``-th."""

    info = TargetInfo(kind="http", source="measured", label="measured (fake one-slot server)")

    def __init__(self, interrupt_at: int | None = None) -> None:
        self.calls: list[str] = []
        self.interrupt_at = interrupt_at

    def idle_baseline(self) -> dict[str, float]:
        return {}

    def close(self) -> None:
        pass

    def run_cell(
        self,
        requests: Sequence[PlannedRequest],
        *,
        cell_id: str,
        closed_loop_concurrency: int | None,
        duration_s: float | None,
        warmup: bool = False,
    ) -> CellRun:
        self.calls.append(cell_id)
        if self.interrupt_at is not None and len(self.calls) == self.interrupt_at:
            raise KeyboardInterrupt
        free_s = 0.0
        records = []
        ready = [0.0] * (closed_loop_concurrency or 0)  # closed loop: when each user sends
        for req in requests:
            sent_s = heapq.heappop(ready) if closed_loop_concurrency else req.arrival_s
            done_s = max(sent_s, free_s) + SERVICE_S
            free_s = done_s
            if closed_loop_concurrency:
                heapq.heappush(ready, done_s)
            records.append(
                RequestRecord(
                    request_id=req.request_id,
                    source="measured",
                    status="ok",
                    cell_id=cell_id,
                    warmup=warmup,
                    sent_s=sent_s,
                    first_token_s=done_s,
                    done_s=done_s,
                    token_times_s=[done_s],
                    output_tokens=1,
                )
            )
        return CellRun(records=records, duration_s=free_s)


def _search(
    server: OneSlotServer, journal: ProbeJournal | None, budget: Budget | None = None
) -> Capacity:
    def make_target(_seed: int) -> Target:
        return server

    slo = parse_slo(SLO)
    probe = TargetProbe(make_target, WORKLOAD, slo, num_requests=200, budget=budget)
    probe.journal = journal
    return find_capacity(
        probe,
        slo,
        saturation_concurrency=None,  # as on a server: concurrency first, then the rate
        num_requests=200,
        seeds=(0, 1),
        tolerance=0.05,
        confirm=probe.longer(4),
    )


def _answer(cap: Capacity) -> dict[str, Any]:
    return {k: v for k, v in cap.to_dict().items() if k != "wall_s"}


IDENTITY = {"options": {"--slo": SLO, "--num-requests": 200}, "workload": WORKLOAD}


@pytest.mark.parametrize("interrupt_at", [1, 4, 9])
def test_an_interrupted_search_resumes_to_the_uninterrupted_answer(
    tmp_path: Path, interrupt_at: int
) -> None:
    whole = OneSlotServer()
    expected = _answer(_search(whole, ProbeJournal(tmp_path / "a", IDENTITY, resume=False)))
    assert expected["max_concurrency"] == 3  # floor(0.35 / 0.1), hand-worked above
    assert expected["binding_constraint_concurrency"] == "ttft_p95"
    assert len(whole.calls) > 9

    first = OneSlotServer(interrupt_at=interrupt_at)
    with pytest.raises(KeyboardInterrupt):
        _search(first, ProbeJournal(tmp_path / "b", IDENTITY, resume=False))
    kept = (tmp_path / "b" / PROBES_FILE).read_text().splitlines()
    assert len(kept) == interrupt_at - 1  # the probes that finished; not the interrupted one

    second = OneSlotServer()
    journal = ProbeJournal(tmp_path / "b", IDENTITY, resume=True)
    assert _answer(_search(second, journal)) == expected
    assert journal.num_reused == interrupt_at - 1
    # only what was not finished ran again: the interrupted probe and those after it
    assert second.calls == whole.calls[interrupt_at - 1 :]
    # and the directory now holds every probe of the uninterrupted search, once
    assert len((tmp_path / "b" / PROBES_FILE).read_text().splitlines()) == len(whole.calls)


def test_a_resumed_search_charges_the_reused_probes_to_the_request_budget(tmp_path: Path) -> None:
    whole, spent = OneSlotServer(), Budget(max_requests=2000)
    expected = _answer(_search(whole, None, spent))
    assert expected["stopped"] is not None and "request budget spent" in expected["stopped"]

    with pytest.raises(KeyboardInterrupt):
        _search(
            OneSlotServer(interrupt_at=5),
            ProbeJournal(tmp_path, IDENTITY, resume=False),
            Budget(max_requests=2000),
        )
    resumed = OneSlotServer()
    journal = ProbeJournal(tmp_path, IDENTITY, resume=True)
    budget = Budget(max_requests=2000)
    assert _answer(_search(resumed, journal, budget)) == expected
    assert len(resumed.calls) == len(whole.calls) - 4
    assert budget.num_requests == spent.num_requests  # the whole search's, not this part's


def test_a_torn_last_probe_line_runs_that_probe_again(tmp_path: Path) -> None:
    whole = OneSlotServer()
    expected = _answer(_search(whole, ProbeJournal(tmp_path, IDENTITY, resume=False)))
    probes = tmp_path / PROBES_FILE
    lines = probes.read_bytes().splitlines(keepends=True)
    probes.write_bytes(b"".join(lines[:3]) + lines[3][:40])  # a write cut short
    again = OneSlotServer()
    journal = ProbeJournal(tmp_path, IDENTITY, resume=True)
    assert _answer(_search(again, journal)) == expected
    assert journal.num_reused == 3 and "torn last line" in journal.notes[0]
    assert again.calls == whole.calls[3:]


def test_a_search_in_a_used_directory_needs_resume(tmp_path: Path) -> None:
    ProbeJournal(tmp_path, IDENTITY, resume=False).close()
    with pytest.raises(ConfigError, match=r"already holds a capacity search .* use --resume"):
        ProbeJournal(tmp_path, IDENTITY, resume=False)
    with pytest.raises(ConfigError, match=r"--resume: .* does not exist"):
        ProbeJournal(tmp_path / "empty", IDENTITY, resume=True)


# the simulator, through the command line: the CLI tests' small search, as JSON
SMALL = [*CLI_SMALL, "--json"]


def _run(args: list[str]) -> Any:
    return CliRunner().invoke(capacity, [*SMALL, *args])


def test_simulator_resume_reuses_every_probe_and_keeps_the_answer(tmp_path: Path) -> None:
    out = tmp_path / "cap"
    first = _run(["--slo", "ttft_p95<200ms", "--out", str(out)])
    assert first.exit_code == 0, first.output
    doc = json.loads(first.output)
    saved = json.loads((out / "capacity.json").read_text())
    assert saved["max_rate_per_s"] == doc["max_rate_per_s"]
    num_probes = len((out / PROBES_FILE).read_text().splitlines())
    assert doc["out"] == {"dir": str(out), "resumed": False, "probes_reused": 0, "notes": []}

    # a crash after the fifth probe: the rest of the file never written
    lines = (out / PROBES_FILE).read_text().splitlines(keepends=True)
    (out / PROBES_FILE).write_text("".join(lines[:5]))
    # the budgets may change on resume; the search's options may not
    again = _run(["--slo", "ttft_p95<200ms", "--out", str(out), "--resume"])
    assert again.exit_code == 0, again.output
    redo = json.loads(again.output)
    assert redo["out"]["resumed"] is True and redo["out"]["probes_reused"] == 5
    keys = ("max_rate_per_s", "max_concurrency", "binding_constraint", "rate_points")
    assert {k: redo[k] for k in keys} == {k: doc[k] for k in keys}
    assert len((out / PROBES_FILE).read_text().splitlines()) == num_probes


@pytest.mark.parametrize(
    ("change", "names"),
    [
        (
            ["--slo", "ttft_p95<300ms"],
            [
                '--slo is "ttft_p95<300ms" now but "ttft_p95<200ms"',
                'resume with --slo "ttft_p95<200ms"',
            ],
        ),
        (["--slo", "ttft_p95<200ms", "--input-tokens", "256"], ["--input-tokens", "128"]),
        (
            ["--slo", "ttft_p95<200ms", "--seed", "7"],
            ["--seed is 7 now but null", "resume without --seed,"],
        ),
    ],
)
def test_a_changed_search_is_refused_in_one_line(
    tmp_path: Path, change: list[str], names: list[str]
) -> None:
    out = tmp_path / "cap"
    assert _run(["--slo", "ttft_p95<200ms", "--out", str(out)]).exit_code == 0
    result = CliRunner().invoke(capacity, [*SMALL, *change, "--out", str(out), "--resume"])
    err = result.exception
    assert isinstance(err, ConfigError), (err, result.output)
    text = str(err)
    assert "\n" not in text and text.startswith("--resume: ")
    assert "start a new search with another --out" in text
    for name in names:
        assert name in text, text


def test_resume_needs_out() -> None:
    result = CliRunner().invoke(capacity, [*SMALL, "--slo", "ttft_p95<1s", "--resume"])
    assert isinstance(result.exception, ConfigError)
    assert str(result.exception) == "--resume needs --out DIR (the search to continue)"
