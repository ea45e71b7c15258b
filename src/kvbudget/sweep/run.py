"""Run a sweep on Ray: every point a Ray task, rows appended as they finish, resumable.

Files in ``--out DIR``:

* ``grid.json`` - the grid as read (the record of what was asked);
* ``results.jsonl`` - one raw row per simulated point, appended (one ``write()``) the moment
  the point finishes, so an interrupted sweep keeps every finished point; ``--resume`` skips
  the points whose key is already there;
* ``results.csv`` (and ``results.parquet`` when pyarrow is installed) - the table of this
  grid's points with cost and SLO columns;
* ``pareto.svg`` - cost or GPUs against TTFT/TPOT p99 (with ``--slo``: at its percentiles, its
  ceilings drawn);
* ``summary.json`` - the cheapest configuration meeting each SLO at each arrival rate;
* ``capacity.jsonl`` (with ``--slo``) - per configuration, the highest rate meeting that SLO
  (:mod:`kvbudget.sweep.capacity`), appended as each search finishes and skipped on ``--resume``;
  ``summary.json`` then also holds them and the cheapest configuration per target rate.

At most ``workers`` points run at once (a local Ray gets exactly that many CPUs; on a
cluster the default is the cluster's CPUs). A point whose task fails outright (a bug, a lost
node after Ray's own retries) is a row with ``status: error`` and the reason, and the sweep
goes on; it is simulated again on ``--resume``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.ray_support import cluster_cpus, ensure_ray
from kvbudget.records import JsonlWriter
from kvbudget.sweep.capacity import (
    CAPACITY_FILE,
    DEFAULT_CAPACITY_REQUESTS,
    capacity_row,
    cheapest_for_rates,
    configurations,
    price_rows,
)
from kvbudget.sweep.grid import GridFile, SweepPoint, expand, load_grid
from kvbudget.sweep.pareto import write_pareto
from kvbudget.sweep.point import run_point, warm_worker
from kvbudget.sweep.table import (
    cheapest,
    columns,
    derive,
    has_figures,
    parquet_available,
    point_percentiles,
    write_csv,
    write_parquet,
    write_summary,
)

RESULTS_FILE = "results.jsonl"
ProgressFn = Callable[[dict[str, Any], int, int], None]


@dataclass
class SweepOutcome:
    """What a sweep produced (paths under ``out_dir``) and how it went."""

    out_dir: Path
    num_points: int
    num_skipped: int
    num_simulated: int
    rows: list[dict[str, Any]]
    cheapest: list[dict[str, Any]]
    files: list[str] = field(default_factory=list)
    num_workers: int = 1
    wall_s: float = 0.0
    #: seconds to start or join Ray, and to simulate the points once it was up
    ray_start_s: float = 0.0
    simulate_s: float = 0.0
    #: the percentiles each point's latency figures are given at (--metric-percentiles, p50,
    #: p99 and the SLOs' own)
    metric_percentiles: list[float] = field(default_factory=list)
    #: with --slo: the SLO, each configuration's highest rate, the cheapest per target rate
    slo: str | None = None
    capacity: list[dict[str, Any]] = field(default_factory=list)
    cheapest_for_rate: list[dict[str, Any]] = field(default_factory=list)


def read_rows(path: Path) -> dict[str, dict[str, Any]]:
    """Rows already in results.jsonl by key (the last one wins; a cut last line is skipped)."""
    rows: dict[str, dict[str, Any]] = {}
    if not path.exists():
        return rows
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("key"), str):
            rows[row["key"]] = row
    return rows


def _final(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    # an errored point is simulated again; simulated and not-run points are final
    return {k: r for k, r in rows.items() if r.get("status") in ("simulated", "not-run")}


def _prepare(out_dir: Path, resume: bool) -> dict[str, dict[str, Any]]:
    results = out_dir / RESULTS_FILE
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out {out_dir}: is a file; give a directory", field="out")
    if not resume and results.exists() and results.stat().st_size > 0:
        raise ConfigError(
            f"--out {out_dir} already holds a sweep ({results}); use --resume to continue it "
            "or choose another --out",
            field="out",
        )
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(
            f"--out {out_dir}: cannot create it ({exc.strerror}); give a writable directory",
            field="out",
        ) from None
    return _final(read_rows(results)) if resume else {}


def _run_on_ray(
    todo: list[SweepPoint],
    writer: JsonlWriter,
    *,
    workers: int | None,
    ray_address: str | None,
    progress: ProgressFn | None,
    total: int,
    done_count: int,
    timings: dict[str, float],
    task: Callable[..., dict[str, Any]] = run_point,
    args: tuple[Any, ...] = (),
) -> tuple[list[dict[str, Any]], int]:
    start = time.perf_counter()
    ray = ensure_ray("kvbudget sweep", address=ray_address, num_cpus=workers or 1)
    limit = workers or (cluster_cpus(ray) if ray_address else 1)
    # every worker imports the simulator once before the first point (counted in Ray's start)
    warm = ray.remote(num_cpus=1)(warm_worker)
    ray.get([warm.remote() for _ in range(min(limit, len(todo)))])
    timings["ray_start_s"] = time.perf_counter() - start
    start = time.perf_counter()
    remote = ray.remote(num_cpus=1, max_retries=2)(task)
    rows: list[dict[str, Any]] = []
    pending: dict[Any, SweepPoint] = {}
    queue = list(todo)
    while queue or pending:
        while queue and len(pending) < limit:
            point = queue.pop(0)
            pending[remote.remote(point, *args)] = point
        ready, _ = ray.wait(list(pending), num_returns=1)
        for ref in ready:
            point = pending.pop(ref)
            try:
                row = ray.get(ref)
            except Exception as exc:  # a failed task is a row, the sweep goes on
                row = _error_row(point, exc)
            writer.write(row)
            rows.append(row)
            done_count += 1
            if progress is not None:
                progress(row, done_count, total)
    timings["simulate_s"] = time.perf_counter() - start
    return rows, limit


def _error_row(point: SweepPoint, exc: BaseException) -> dict[str, Any]:
    text = " ".join(str(exc).split())
    return {
        "key": point.key,
        "status": "error",
        "figures": "simulated",
        **point.axes,
        "num_gpus": int(point.axes["tp"]) * int(point.axes["replicas"]),
        "reason": f"{type(exc).__name__}: {text[-300:]}",
        "timing_model": None,
    }


def run_sweep(
    grid_path: str | Path,
    out_dir: Path,
    *,
    workers: int | None = None,
    ray_address: str | None = None,
    resume: bool = False,
    progress: ProgressFn | None = None,
    slo: str | None = None,
    capacity_requests: int | None = None,
    target_rates: Sequence[float] = (),
    metric_percentiles: Sequence[float] | None = None,
) -> SweepOutcome:
    """Simulate every point of the grid not yet in ``out_dir`` and write the outputs.

    ``metric_percentiles`` (``--metric-percentiles``; default 50,90,95,99): the percentiles of
    TTFT, TPOT, ITL and E2E each row gives beside the mean and median, with p50, p99 and the
    SLOs' own percentiles added (:func:`kvbudget.sweep.table.point_percentiles`).

    ``slo`` (``kvbudget capacity``'s syntax): also search each configuration's highest rate
    meeting it (probes of ``capacity_requests``), and the cheapest configuration reaching each
    of ``target_rates`` (default: the grid's ``rate_per_s`` values).
    """
    if workers is not None and workers < 1:
        raise ConfigError(f"--workers {workers}: must be >= 1", field="workers")
    wall0 = time.perf_counter()
    grid_file = Path(grid_path)
    grid = load_grid(grid_file)
    points = expand(grid, origin=grid_file.name)
    percentiles = _percentiles(grid, metric_percentiles, slo)
    done = {k: r for k, r in _prepare(out_dir, resume).items() if has_figures(r, percentiles)}
    (out_dir / "grid.json").write_text(
        json.dumps(grid.model_dump(mode="json"), indent=2) + "\n", encoding="utf-8"
    )
    keys = {p.key for p in points}
    todo = [p for p in points if p.key not in done]
    num_workers = workers or 1
    timings: dict[str, float] = {}
    if todo:
        with JsonlWriter(out_dir / RESULTS_FILE) as writer:
            new_rows, num_workers = _run_on_ray(
                todo,
                writer,
                workers=workers,
                ray_address=ray_address,
                progress=progress,
                total=len(points),
                done_count=len(points) - len(todo),
                timings=timings,
                args=(percentiles,),
            )
        for row in new_rows:
            done[row["key"]] = row
    rows = [done[p.key] for p in points if p.key in done]
    caps: list[dict[str, Any]] = []
    if slo is not None:
        num = capacity_requests or DEFAULT_CAPACITY_REQUESTS
        caps = _capacity(out_dir, points, slo, num, resume, workers, ray_address, progress, timings)
    rates = list(target_rates) or sorted(
        {float(p.axes["rate_per_s"]) for p in points if p.axes.get("rate_per_s")}
    )
    outcome = write_outputs(
        out_dir,
        rows,
        grid,
        slo=slo,
        capacity=caps,
        target_rates=rates,
        metric_percentiles=percentiles,
    )
    outcome.num_points = len(points)
    outcome.num_skipped = len(points) - len(todo)
    outcome.num_simulated = len(todo)
    outcome.num_workers = num_workers
    outcome.wall_s = time.perf_counter() - wall0
    outcome.ray_start_s = timings.get("ray_start_s", 0.0)
    outcome.simulate_s = timings.get("simulate_s", 0.0)
    extra = sorted(set(read_rows(out_dir / RESULTS_FILE)) - keys)
    if extra:
        outcome.files.append(f"({len(extra)} older row(s) in {RESULTS_FILE} are not in this grid)")
    return outcome


def _percentiles(
    grid: GridFile, chosen: Sequence[float] | None, slo: str | None
) -> tuple[float, ...]:
    """The points' percentiles: ``chosen`` (default 50,90,95,99) and the SLOs' own."""
    from kvbudget.maxload.slo import parse_slo
    from kvbudget.metrics.percentile_set import DEFAULT_METRIC_PERCENTILES

    extra: list[float] = []
    if slo is not None:
        for term in parse_slo(slo).statistic_terms:
            if term.statistic is not None and term.statistic.startswith("p"):
                q = float(term.statistic[1:])
                if q < 100:  # p100 is the maximum: capacity's search quotes it, not a column
                    extra.append(q)
    base = DEFAULT_METRIC_PERCENTILES if chosen is None else chosen
    return point_percentiles(grid, base, extra)


def _capacity(
    out_dir: Path,
    points: list[SweepPoint],
    slo: str,
    num_requests: int,
    resume: bool,
    workers: int | None,
    ray_address: str | None,
    progress: ProgressFn | None,
    timings: dict[str, float],
) -> list[dict[str, Any]]:
    """Each configuration's capacity row: those in capacity.jsonl, the rest searched now."""
    from kvbudget.maxload.slo import parse_slo

    parse_slo(slo)  # a malformed SLO before Ray starts (the CLI checks it first too)
    configs = configurations(points, slo, num_requests)
    path = out_dir / CAPACITY_FILE
    if not resume and path.exists():
        path.unlink()  # a fresh sweep (results.jsonl was refused above if it held one)
    done = _final(read_rows(path)) if resume else {}
    todo = [c for c in configs if c.key not in done]
    if todo:
        sub: dict[str, float] = {}
        with JsonlWriter(path) as writer:
            new_rows, _ = _run_on_ray(
                todo,
                writer,
                workers=workers,
                ray_address=ray_address,
                progress=progress,
                total=len(configs),
                done_count=len(configs) - len(todo),
                timings=sub,
                task=capacity_row,
                args=(slo, num_requests),
            )
        timings["simulate_s"] = timings.get("simulate_s", 0.0) + sub.get("simulate_s", 0.0)
        for row in new_rows:
            done[row["key"]] = row
    return [done[c.key] for c in configs if c.key in done]


def write_outputs(
    out_dir: Path,
    raw_rows: list[dict[str, Any]],
    grid: GridFile,
    *,
    slo: str | None = None,
    capacity: Sequence[dict[str, Any]] = (),
    target_rates: Sequence[float] = (),
    metric_percentiles: Sequence[float] | None = None,
) -> SweepOutcome:
    """results.csv (+ .parquet), pareto.svg and summary.json from the rows of this grid."""
    percentiles = tuple(metric_percentiles or point_percentiles(grid))
    rows = derive(raw_rows, grid)
    cols = columns(grid, percentiles)
    write_csv(out_dir / "results.csv", rows, cols)
    files = [RESULTS_FILE, "results.csv"]
    if parquet_available():
        write_parquet(out_dir / "results.parquet", rows, cols)
        files.append("results.parquet")
    write_pareto(out_dir / "pareto.svg", rows, grid, slo=slo)
    answers = cheapest(rows, grid)
    statuses: dict[str, int] = {}
    for r in rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    timing = sorted({str(r["timing_model"]) for r in rows if r.get("timing_model")})
    extra: dict[str, Any] = {
        "timing_models": timing,
        "num_rows": len(rows),
        "rows_by_status": statuses,
        "metric_percentiles": list(percentiles),
    }
    caps = price_rows(capacity, grid)
    by_rate: list[dict[str, Any]] = []
    if slo is not None:
        by_rate = cheapest_for_rates(caps, target_rates, priced=bool(grid.gpu_hour_usd))
        extra.update(slo=slo, capacity=caps, cheapest_for_rate=by_rate)
        files.append(CAPACITY_FILE)
    write_summary(out_dir / "summary.json", answers, extra)
    files += ["pareto.svg", "summary.json"]
    return SweepOutcome(
        out_dir=out_dir,
        num_points=len(rows),
        num_skipped=0,
        num_simulated=0,
        rows=rows,
        cheapest=answers,
        files=files,
        slo=slo,
        capacity=caps,
        cheapest_for_rate=by_rate,
        metric_percentiles=list(percentiles),
    )
