"""Run the matrix of one acceptance plan (seed steps 4-5): baseline, warm-up, the nine cells.

:func:`run_matrix` is given a started target, built through a :data:`TargetFactory` by its
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

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
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
from kvbudget.accept.targets.base import CellRun, Target
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


#: what a run in OUT was started with: ``--resume`` refuses another plan or target
RUN_FILE = "accept-run.json"


def check_resume(plan: AcceptPlan, out_dir: Path, *, resume: bool) -> None:
    """Record the plan's sha256 and target in ``OUT/accept-run.json``; with ``resume``, refuse
    in one line when they differ from the recorded run's (its records would mix with this
    plan's)."""
    path = out_dir / RUN_FILE
    target: dict[str, Any] = plan.target.model_dump(mode="json")
    mine: dict[str, Any] = {"plan_sha256": plan.canonical_sha256(), "target": target}
    if resume:
        progress = out_dir / "progress.jsonl"
        if path.exists():
            try:
                old = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:
                raise ConfigError(
                    f"--resume: {path} is not readable JSON; start over without --resume or "
                    "choose another --out",
                    field="resume",
                ) from exc
            old_target = old.get("target") if isinstance(old, dict) else None
            if old_target != target:
                fields = sorted(
                    k
                    for k in set(target) | set(old_target or {})
                    if (old_target or {}).get(k) != target.get(k)
                )
                raise ConfigError(
                    f"--resume: the run in {out_dir} used another target (differs on "
                    f"target.{', target.'.join(fields) or 'kind'}); resume with the same plan "
                    "or choose another --out",
                    field="resume",
                )
            old_sha = str(old.get("plan_sha256")) if isinstance(old, dict) else ""
            if old_sha != mine["plan_sha256"]:
                raise ConfigError(
                    f"--resume: the run in {out_dir} was made from another plan (sha256 "
                    f"{old_sha[:12]}, this plan {mine['plan_sha256'][:12]}); resume with the "
                    "same plan file or choose another --out",
                    field="resume",
                )
            return
        if progress.exists() and progress.stat().st_size > 0:
            raise ConfigError(
                f"--resume: {out_dir} holds records but no {RUN_FILE} naming their plan, so "
                "they cannot be checked against this one; start over without --resume or "
                "choose another --out",
                field="resume",
            )
    write_json(path, mine)


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
    kind = info.source
    done, notes = load_progress(out_dir) if (out_dir is not None and resume) else ({}, [])
    records_out = progress_out = None
    if out_dir is not None:
        if resume:
            _drop_unfinished_records(out_dir, done)
        else:  # a fresh run never appends to an earlier run's files
            for stale in ("records.jsonl", "progress.jsonl"):
                (out_dir / stale).unlink(missing_ok=True)
        records_out = JsonlWriter(out_dir / "records.jsonl")
        progress_out = JsonlWriter(out_dir / "progress.jsonl")
    try:
        baseline = target.idle_baseline()
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
            if records_out is not None:
                records_out.write_many(warm_run.records)
        order = plan.load.cell_order()
        todo = [
            (i, a, c)
            for i, (a, c) in enumerate(order)
            if cells_subset is None or f"{a}/{c}" in cells_subset
        ]
        rows: dict[str, list[tuple[str, Verdict, str | None]]] = {}
        results: list[CellResult] = []
        all_runs: dict[str, list[CellRun]] = {}
        halted: str | None = None
        total = len(todo) * plan.load.repetitions
        step = 0
        for index, input_tier, conc_tier in todo:
            cell_id = f"{input_tier}/{conc_tier}"
            stop, why = row_stopped(rows.get(input_tier, []))
            skipped = halted or (why if stop else None)
            runs: list[CellRun] = []
            if skipped is None:
                for rep in range(plan.load.repetitions):
                    step += 1
                    if progress is not None:
                        progress(cell_id, step, total)
                    if (cell_id, rep) in done:
                        runs.append(done[(cell_id, rep)])
                        if done[(cell_id, rep)].capacity_error is not None:
                            break
                        continue
                    requests = cell_requests(
                        plan.load,
                        plan.load.tiers[input_tier],  # type: ignore[index]
                        plan.load.concurrency[conc_tier],  # type: ignore[index]
                        cell_id=cell_id,
                        seed=plan.seed,
                        cell_index=index,
                        repetition=rep,
                    )
                    if not info.synthetic_text:
                        requests = with_quality_prompts(
                            plan,
                            requests,
                            input_tier=input_tier,
                            cell_id=cell_id,
                            repetition=rep,
                        )
                    tier = plan.load.concurrency[conc_tier]  # type: ignore[index]
                    run = target.run_cell(
                        requests,
                        cell_id=cell_id,
                        closed_loop_concurrency=tier.concurrency
                        if tier.arrival == "closed"
                        else None,
                        duration_s=tier.duration_s,
                    )
                    runs.append(run)
                    if records_out is not None and progress_out is not None:
                        records_out.write_many(run.records)
                        progress_out.write(_run_to_json(cell_id, rep, run))
                    if run.capacity_error is not None:
                        break  # no repetition, no retry after a capacity error
            else:
                step += plan.load.repetitions
            result, _ = summarize_cell(
                plan,
                cell_id=cell_id,
                order=index,
                runs=runs,
                kind=kind,
                synthetic_text=info.synthetic_text,
                rng=rng,
                skipped_reason=skipped,
                percentiles=percentiles,
            )
            results.append(result)
            all_runs[cell_id] = runs
            if skipped is None:
                cap = next((r.capacity_error for r in runs if r.capacity_error), None)
                rows.setdefault(input_tier, []).append((conc_tier, result.verdict, cap))
                if result.verdict == "fail" and halted is None:
                    after = target.idle_baseline()
                    if not after:
                        notes.append(
                            f"after {cell_id} failed the idle baseline could not be read "
                            "(no metrics); recovery was not verified"
                        )
                    elif not _recovered(after):
                        halted = (
                            f"not run: the idle baseline did not recover after {cell_id} failed "
                            f"(kv_usage {after.get('kv_usage', float('nan')):.3f}, "
                            f"running {after.get('num_running', float('nan')):.0f})"
                        )
                        notes.append(halted)
        return MatrixOutcome(results, all_runs, baseline, warm_info, notes)
    finally:
        if records_out is not None:
            records_out.close()
        if progress_out is not None:
            progress_out.close()


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
