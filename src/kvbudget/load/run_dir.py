"""A load run's output directory: the file names, ``run.json`` written at the start and checked by
``--resume`` (options and input-file hashes), and the records read back once each."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from kvbudget.errors import ConfigError
from kvbudget.load.config import RunConfig
from kvbudget.load.datasets import dataset_sha256
from kvbudget.records import RequestRecord, read_jsonl
from kvbudget.safety.redact import redact_text

REQUESTS_FILE = "requests.jsonl"


METRICS_FILE = "metrics.jsonl"


RUN_FILE = "run.json"


SUMMARY_FILE = "summary.json"


def unique_records(records: Sequence[RequestRecord]) -> tuple[list[RequestRecord], int]:
    """The first record of each request id, and how many later duplicates were dropped."""
    seen: set[str] = set()
    kept: list[RequestRecord] = []
    for rec in records:
        if rec.request_id in seen:
            continue
        seen.add(rec.request_id)
        kept.append(rec)
    return kept, len(records) - len(kept)


def prepare_run_dir(cfg: RunConfig, out_dir: Path, resume: bool) -> tuple[int, set[str]]:
    """Check/record run.json; return (segment, ids already recorded)."""
    run_file = out_dir / RUN_FILE
    req_file = out_dir / REQUESTS_FILE
    if resume:
        if not run_file.exists():
            raise ConfigError(
                f"--resume: {run_file} does not exist; there is no run to continue in "
                f"{out_dir} (start one without --resume)",
                field="resume",
            )
        try:
            old = RunConfig.model_validate(
                json.loads(run_file.read_text(encoding="utf-8"))["config"]
            )
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            raise ConfigError(
                f"--resume: {run_file} is not a run file kvbudget wrote (unreadable, not JSON or "
                "no valid 'config'); start over without --resume or choose another --out",
                field="resume",
            ) from None
        diff = cfg.same_run(old)
        if diff:
            raise ConfigError(
                f"--resume: the options differ from the recorded run in {out_dir} on "
                f"{', '.join(diff)}; resume with the same options",
                field="resume",
            )
        _same_files(cfg, old, out_dir)
        if old.duration_s is not None and old.num_requests is None:
            raise ConfigError(
                "--resume needs a run with --num-requests (a duration-only run has no fixed "
                "set of requests to complete)",
                field="resume",
            )
        done = read_jsonl(req_file, RequestRecord).items
        segment = 1 + max((r.run_segment for r in done), default=-1)
        return segment, {r.request_id for r in done}
    if req_file.exists() and req_file.stat().st_size > 0:
        raise ConfigError(
            f"--out {out_dir} already holds a run ({req_file}); use --resume to continue it "
            "or choose another --out",
            field="out",
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    # stored without URL credentials or registered secrets; --resume compares the
    # redacted spellings (RunConfig.same_run)
    config = cfg.model_dump(mode="json")
    run_file.write_text(
        redact_text(json.dumps({"config": config, "created_unix_s": time.time()}, indent=2))
    )
    return 0, set()


#: the input files a run hashes when it starts and ``--resume`` re-reads: (path field, hash
#: field, flag) of :class:`~kvbudget.load.config.BenchWorkload`
HASHED_FILES = (
    ("dataset_path", "dataset_sha256", "--dataset-path"),
    ("trace_path", "trace_sha256", "--trace"),
)


def with_file_hashes(cfg: RunConfig) -> RunConfig:
    """``cfg`` with the sha256 of each input file's bytes as the run starts (run.json keeps them;
    ``--resume`` checks them: :func:`_same_files`)."""
    w = cfg.workload
    update: dict[str, str] = {}
    for path_field, sha_field, flag in HASHED_FILES:
        path = getattr(w, path_field)
        if path is not None and (path_field != "dataset_path" or w.dataset):
            update[sha_field] = dataset_sha256(path, flag, path_field)
    if not update:
        return cfg
    return cfg.model_copy(update={"workload": w.model_copy(update=update)})


def _same_files(cfg: RunConfig, old: RunConfig, out_dir: Path) -> None:
    """Refuse a resume whose dataset or trace file is not the one the run started with."""
    for path_field, sha_field, flag in HASHED_FILES:
        was, now = getattr(old.workload, sha_field), getattr(cfg.workload, sha_field)
        if was == now:
            continue
        path = getattr(cfg.workload, path_field)
        if was is None:
            raise ConfigError(
                f"--resume: the run in {out_dir} recorded no {sha_field} for {flag} "
                f"{path} (started by an older kvbudget), so the file cannot be checked; start a "
                "new run with another --out",
                field=path_field,
            )
        raise ConfigError(
            f"--resume: {flag} {path} is not the file the run in {out_dir} started with "
            f"({sha_field} {was} recorded, {now} now); put the original file back, or start a "
            "new run with another --out",
            field=path_field,
        )
