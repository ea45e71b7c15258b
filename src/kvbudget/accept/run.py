"""Run the matrix of one acceptance plan (seed steps 4-5): baseline, warm-up, the nine cells.

:func:`run_matrix` is given a started target, built through a
:data:`kvbudget.accept.targets.base.TargetFactory` by its
caller: :func:`kvbudget.accept.acceptance.run_acceptance` (the plan's run, written to ``OUT``),
:mod:`kvbudget.accept.ab_runs` (each arm of a single-factor comparison, nothing written) and
the calibrated prediction beside a measured run (nothing written). Its order of work:

1. record the idle baseline (not counted as KV), then run the uniform warm-up (not scored);
2. run the cells in the declared order (or the listed subset), each ``repetitions`` times.
   With ``out_dir``, records are appended to ``OUT/records.jsonl`` and each finished
   repetition to ``OUT/progress.jsonl`` as they come; ``resume=True`` skips repetitions already
   there (a resumed simulated run keeps the earlier repetitions' numbers; the engine state is
   rebuilt by the warm-up, not restored) and drops the records of an unfinished one;
3. after a capacity error a cell runs no further repetition, and the rest of that input tier's
   row is not run (last passing tier kept, no retry); after a failed cell the idle baseline
   must recover, else every later cell is not run;
4. each cell's summaries, checks and verdict (:func:`kvbudget.accept.cells.summarize_cell`).

Lock resolution, the single-factor comparisons, audits, stop conditions and the overall verdict
are run by :func:`kvbudget.accept.acceptance.run_acceptance`, not here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.accept.cells import summarize_cell
from kvbudget.accept.judge.stats import PERCENTILES
from kvbudget.accept.judge.verdicts import row_stopped
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.request_keys import WARMUP_CELL, RequestKey
from kvbudget.accept.result import CellResult, Verdict
from kvbudget.accept.resume_files import load_progress
from kvbudget.accept.targets.base import CellRun, Target, TargetInfo
from kvbudget.accept.workloads import cell_requests, warmup_requests
from kvbudget.errors import ConfigError
from kvbudget.records import JsonlWriter
from kvbudget.workload.request import PlannedRequest
from kvbudget.workload.tokenizer import encode


def with_quality_prompts(
    plan: AcceptPlan,
    requests: list[PlannedRequest],
    *,
    input_tier: str,
    cell_id: str,
    repetition: int,
) -> list[PlannedRequest]:
    """Put each applicable checkpoint's prompt into one of the cell's timed requests.

    The checkpoint request keeps its slot (arrival, output length, tenant) and gets the id
    ``<cell>#<rep>/quality:<checkpoint id>``; its output is judged, its latency counted.
    """
    out = list(requests)
    slot = 0
    for checkpoint in plan.quality:
        if input_tier not in checkpoint.tiers or checkpoint.prompt_file is None:
            continue
        if slot >= len(out):
            break
        text = Path(checkpoint.prompt_file).read_text(encoding="utf-8")
        out[slot] = replace(
            out[slot],
            request_id=RequestKey(cell_id, repetition).quality(checkpoint.id).encode(),
            prompt_token_ids=tuple(encode(text)),
            prompt_text=text,
            prefix_group=None,
            shared_prefix_tokens=0,
        )
        slot += 1
    return out


def check_quality_files(plan: AcceptPlan) -> None:
    """Every checkpoint prompt file exists before anything runs."""
    for index, checkpoint in enumerate(plan.quality):
        if checkpoint.prompt_file is not None and not Path(checkpoint.prompt_file).is_file():
            raise ConfigError(
                f"quality.{index}.prompt_file: {checkpoint.prompt_file!r} not found; give the "
                "path of the checkpoint's prompt (relative to the working directory)",
                field=f"quality.{index}.prompt_file",
            )


#: the idle baseline counts as recovered when KV usage is at most this and nothing runs
RECOVERY_KV_USAGE = 0.01

Progress = Callable[[str, int, int], None]


@dataclass(slots=True)
class MatrixOutcome:
    cells: list[CellResult]
    runs: dict[str, list[CellRun]]
    baseline: dict[str, float]
    warmup: dict[str, Any]
    notes: list[str]


def _run_to_json(cell_id: str, repetition: int, run: CellRun) -> dict[str, Any]:
    return {
        "cell_id": cell_id,
        "repetition": repetition,
        "duration_s": run.duration_s,
        "capacity_error": run.capacity_error,
        "counters": run.counters,
        "kv_usage_after_drain": run.kv_usage_after_drain,
        "samples": [s.model_dump(mode="json") for s in run.samples],
    }


def _drop_unfinished_records(out_dir: Path, done: dict[tuple[str, int], CellRun]) -> None:
    """Keep only the records of finished repetitions (a killed repetition is run again)."""
    path = out_dir / "records.jsonl"
    if not path.exists():
        return
    kept = [rec for run in done.values() for rec in run.records]
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(rec.model_dump_json() + "\n" for rec in kept), encoding="utf-8")
    tmp.replace(path)


def _recovered(baseline: dict[str, float]) -> bool:
    return (
        baseline.get("kv_usage", 0.0) <= RECOVERY_KV_USAGE
        and baseline.get("num_running", 0.0) == 0.0
    )


def run_matrix(
    plan: AcceptPlan,
    target: Target,
    *,
    out_dir: Path | None,
    resume: bool = False,
    cells_subset: list[str] | None = None,
    progress: Progress | None = None,
    rng: np.random.Generator,
    percentiles: Sequence[float] = PERCENTILES,
) -> MatrixOutcome:
    """Warm-up then every (or the listed) cell with its repetitions; each cell's summaries
    hold ``percentiles`` (``--metric-percentiles``) beside p50/p90/p95/p99."""
    info = target.info
    done, notes = load_progress(out_dir) if (out_dir is not None and resume) else ({}, [])
    files = _open_run_files(out_dir, done, resume=resume)
    try:
        baseline = target.idle_baseline()
        warmup = _run_warmup(plan, target, files)
        cells = _cells_to_run(plan, cells_subset)
        matrix = _MatrixRun(
            plan,
            target,
            info,
            done=done,
            files=files,
            progress=progress,
            total=len(cells) * plan.load.repetitions,
            notes=notes,
        )
        for cell in cells:
            matrix.run_cell(cell, rng=rng, percentiles=percentiles)
        return MatrixOutcome(matrix.results, matrix.runs, baseline, warmup, matrix.notes)
    finally:
        files.close()


@dataclass(frozen=True, slots=True)
class _Cell:
    """One cell of the matrix: its place in the declared order and its two tiers."""

    index: int
    input_tier: str
    conc_tier: str

    @property
    def cell_id(self) -> str:
        return f"{self.input_tier}/{self.conc_tier}"


@dataclass(slots=True)
class _RunFiles:
    """``OUT/records.jsonl`` and ``OUT/progress.jsonl`` while the matrix runs (None without OUT)."""

    records: JsonlWriter | None = None
    progress: JsonlWriter | None = None

    def write_warmup(self, run: CellRun) -> None:
        if self.records is not None:
            self.records.write_many(run.records)

    def write_repetition(self, cell_id: str, repetition: int, run: CellRun) -> None:
        if self.records is not None and self.progress is not None:
            self.records.write_many(run.records)
            self.progress.write(_run_to_json(cell_id, repetition, run))

    def close(self) -> None:
        if self.records is not None:
            self.records.close()
        if self.progress is not None:
            self.progress.close()


def _open_run_files(
    out_dir: Path | None, done: dict[tuple[str, int], CellRun], *, resume: bool
) -> _RunFiles:
    """Resumed: keep the finished repetitions' records; fresh: never append to an earlier
    run's files."""
    if out_dir is None:
        return _RunFiles()
    if resume:
        _drop_unfinished_records(out_dir, done)
    else:
        for stale in ("records.jsonl", "progress.jsonl"):
            (out_dir / stale).unlink(missing_ok=True)
    return _RunFiles(
        JsonlWriter(out_dir / "records.jsonl"), JsonlWriter(out_dir / "progress.jsonl")
    )


def _run_warmup(plan: AcceptPlan, target: Target, files: _RunFiles) -> dict[str, Any]:
    """The uniform warm-up (not scored); its records are kept beside the cells'."""
    warm = warmup_requests(plan.load, seed=plan.seed)
    warm_info: dict[str, Any] = {"requests": len(warm), "scored": False}
    if warm:
        warm_run = target.run_cell(
            warm,
            cell_id=WARMUP_CELL,
            closed_loop_concurrency=None,
            duration_s=None,
            warmup=True,
        )
        warm_info["duration_s"] = warm_run.duration_s
        warm_info["errors"] = sum(1 for r in warm_run.records if r.status == "error")
        files.write_warmup(warm_run)
    return warm_info


def _cells_to_run(plan: AcceptPlan, cells_subset: list[str] | None) -> list[_Cell]:
    """The cells in the declared order, or those of ``cells_subset``."""
    return [
        _Cell(i, a, c)
        for i, (a, c) in enumerate(plan.load.cell_order())
        if cells_subset is None or f"{a}/{c}" in cells_subset
    ]


@dataclass(slots=True)
class _MatrixRun:
    """The cells run so far, each input tier's row and whether the matrix has halted."""

    plan: AcceptPlan
    target: Target
    info: TargetInfo
    done: dict[tuple[str, int], CellRun]
    files: _RunFiles
    progress: Progress | None
    total: int
    notes: list[str]
    step: int = 0
    halted: str | None = None
    rows: dict[str, list[tuple[str, Verdict, str | None]]] = field(default_factory=dict)
    results: list[CellResult] = field(default_factory=list)
    runs: dict[str, list[CellRun]] = field(default_factory=dict)

    def run_cell(
        self, cell: _Cell, *, rng: np.random.Generator, percentiles: Sequence[float]
    ) -> None:
        """Run the cell's repetitions unless it is skipped, then summarize and judge it."""
        skipped = self.skip_reason(cell)
        if skipped is None:
            runs = self.run_repetitions(cell)
        else:
            runs = []
            self.step += self.plan.load.repetitions
        result, _ = summarize_cell(
            self.plan,
            cell_id=cell.cell_id,
            order=cell.index,
            runs=runs,
            kind=self.info.source,
            synthetic_text=self.info.synthetic_text,
            rng=rng,
            skipped_reason=skipped,
            percentiles=percentiles,
        )
        self.results.append(result)
        self.runs[cell.cell_id] = runs
        if skipped is None:
            self.add_to_row(cell, result, runs)
            if result.verdict == "fail" and self.halted is None:
                self.check_recovery(cell)

    def skip_reason(self, cell: _Cell) -> str | None:
        """Why the cell is not run: the matrix halted, or its row stopped; None: run it."""
        stop, why = row_stopped(self.rows.get(cell.input_tier, []))
        return self.halted or (why if stop else None)

    def run_repetitions(self, cell: _Cell) -> list[CellRun]:
        """The cell's repetitions (a finished one is taken from ``--resume``'s progress);
        none after a capacity error."""
        runs: list[CellRun] = []
        for rep in range(self.plan.load.repetitions):
            self.step += 1
            if self.progress is not None:
                self.progress(cell.cell_id, self.step, self.total)
            run = self.done.get((cell.cell_id, rep))
            if run is None:
                run = self.run_repetition(cell, rep)
                self.files.write_repetition(cell.cell_id, rep, run)
            runs.append(run)
            if run.capacity_error is not None:
                break  # no repetition, no retry after a capacity error
        return runs

    def run_repetition(self, cell: _Cell, rep: int) -> CellRun:
        """One repetition's seeded requests (quality prompts in place on a real engine), run."""
        load = self.plan.load
        tier = load.concurrency[cell.conc_tier]  # type: ignore[index]
        requests = cell_requests(
            load,
            load.tiers[cell.input_tier],  # type: ignore[index]
            tier,
            cell_id=cell.cell_id,
            seed=self.plan.seed,
            cell_index=cell.index,
            repetition=rep,
        )
        if not self.info.synthetic_text:
            requests = with_quality_prompts(
                self.plan,
                requests,
                input_tier=cell.input_tier,
                cell_id=cell.cell_id,
                repetition=rep,
            )
        return self.target.run_cell(
            requests,
            cell_id=cell.cell_id,
            closed_loop_concurrency=tier.concurrency if tier.arrival == "closed" else None,
            duration_s=tier.duration_s,
        )

    def add_to_row(self, cell: _Cell, result: CellResult, runs: list[CellRun]) -> None:
        """A run cell joins its input tier's row (a row stops after a capacity error)."""
        cap = next((r.capacity_error for r in runs if r.capacity_error), None)
        self.rows.setdefault(cell.input_tier, []).append((cell.conc_tier, result.verdict, cap))

    def check_recovery(self, cell: _Cell) -> None:
        """After a failed cell the idle baseline must recover, else every later cell is not run."""
        after = self.target.idle_baseline()
        if not after:
            self.notes.append(
                f"after {cell.cell_id} failed the idle baseline could not be read "
                "(no metrics); recovery was not verified"
            )
        elif not _recovered(after):
            self.halted = (
                f"not run: the idle baseline did not recover after {cell.cell_id} failed "
                f"(kv_usage {after.get('kv_usage', float('nan')):.3f}, "
                f"running {after.get('num_running', float('nan')):.0f})"
            )
            self.notes.append(self.halted)
