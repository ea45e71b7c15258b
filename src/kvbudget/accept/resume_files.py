"""What ``kvbudget accept --resume`` reads back from OUT: the run's plan and target
(``accept-run.json``), finished repetitions and their records.

A write cut short (SIGKILL, or ENOSPC: ``os.write`` stops mid-line) leaves at most a torn
*last* line in ``records.jsonl`` or ``progress.jsonl``, and possibly ``report.json.tmp``.
Records are written before their repetition's progress line, so a torn last line always belongs
to a repetition that has no progress line yet and runs again: the resume drops it and says so
(a note in the report's verdict reasons). A damaged line anywhere else (a later write succeeded
after a failed one) means a finished repetition may have lost a record: the resume refuses in
one line rather than accept a repetition with records missing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.request_keys import RequestKey
from kvbudget.accept.targets.base import CellRun
from kvbudget.errors import ConfigError
from kvbudget.records import MetricSample, RequestRecord, read_jsonl_dicts

#: who reads OUT back, and the fix its refusals name
RESUME_READER = ("--resume", "start over without --resume or choose another --out")


def _refuse(path: Path, where: str, why: str, reader: tuple[str, str]) -> ConfigError:
    flag, fix = reader
    return ConfigError(
        f"{flag}: {path} {where} {why}, so a finished repetition may have lost records; {fix}",
        field=flag.removeprefix("--").replace("-", "_"),
    )


def _read(path: Path, notes: list[str], reader: tuple[str, str]) -> list[dict[str, Any]]:
    """The lines of one file; a torn last line is dropped with a note, any other bad line
    refused."""
    result = read_jsonl_dicts(path)
    torn = len(result.skipped_lines) if result.truncated_tail else 0
    inner = result.skipped_lines[: len(result.skipped_lines) - (1 if torn else 0)]
    if inner:
        raise _refuse(
            path,
            f"line {inner[0]}",
            "is not a complete JSON object (a write cut short?)",
            reader,
        )
    if result.truncated_tail:
        notes.append(
            f"resume: dropped the torn last line of {path.name} (a write cut short, e.g. by a "
            "full disk); it belonged to no finished repetition"
        )
    return result.items


def load_progress(
    out_dir: Path, *, reader: tuple[str, str] = RESUME_READER
) -> tuple[dict[tuple[str, int], CellRun], list[str]]:
    """Finished repetitions by (cell, repetition) with their records, and notes on repairs.

    ``reader``: the flag reading OUT back and the fix its refusals name; only ``--resume``
    repairs OUT (removes a stale ``report.json.tmp``), any other reader leaves it as it is.
    """
    notes: list[str] = []
    stale = out_dir / "report.json.tmp"
    if stale.exists() and reader == RESUME_READER:
        stale.unlink()
        notes.append("resume: removed report.json.tmp left by an interrupted write")
    progress_path, records_path = out_dir / "progress.jsonl", out_dir / "records.jsonl"
    progress = _read(progress_path, notes, reader)
    records = _read(records_path, notes, reader)
    by_run: dict[tuple[str, int], list[RequestRecord]] = {}
    for number, raw in enumerate(records, start=1):
        try:
            rec = RequestRecord.model_validate(raw)
            key = RequestKey.decode(rec.request_id) if rec.cell_id and not rec.warmup else None
        except (ValidationError, ValueError):
            raise _refuse(
                records_path, f"record {number}", "is not a request record", reader
            ) from None
        if key is not None and key.repetition is not None:
            by_run.setdefault((key.cell_id, key.repetition), []).append(rec)
    done: dict[tuple[str, int], CellRun] = {}
    for number, item in enumerate(progress, start=1):
        try:
            cell_id = str(item["cell_id"])
            rep = int(item["repetition"])
            done[(cell_id, rep)] = CellRun(
                records=by_run.get((cell_id, rep), []),
                duration_s=float(item["duration_s"]),
                samples=[MetricSample.model_validate(s) for s in item["samples"]],
                capacity_error=item["capacity_error"],
                counters={k: float(v) for k, v in item["counters"].items()},
                kv_usage_after_drain=item["kv_usage_after_drain"],
            )
        except (KeyError, TypeError, ValueError, AttributeError, ValidationError):
            raise _refuse(
                progress_path, f"record {number}", "is not a progress record", reader
            ) from None
    return done, notes


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


def write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
