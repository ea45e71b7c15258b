"""``kvbudget sweep``: a what-if grid simulated in parallel on Ray (every figure *simulated*)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click


@click.command("sweep", context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("grid", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory for results.jsonl, results.csv, pareto.svg and summary.json.",
)
@click.option(
    "--workers",
    type=click.IntRange(1),
    default=None,
    help="Points simulated at once (a local Ray gets this many CPUs) "
    "[default: 1 locally, the cluster's CPUs with --ray-address].",
)
@click.option(
    "--ray-address",
    default=None,
    help="Join this Ray cluster (e.g. ray://HEAD:10001 or auto) instead of starting a local Ray.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="Continue the sweep in --out: simulate only the points not yet in results.jsonl.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def sweep(
    grid: str,
    out_dir: Path,
    workers: int | None,
    ray_address: str | None,
    resume: bool,
    as_json: bool,
) -> None:
    """Simulate every point of GRID (YAML: models x GPUs x TP x KV dtype x max length x prefix
    caching x router x replicas x arrival rate) on Ray and state the cheapest configuration
    meeting each SLO. Figures are *simulated* (each row names its timing model). See
    docs/commands/sweep.md.
    """
    from kvbudget.ray_support import import_ray
    from kvbudget.sweep.grid import expand, load_grid
    from kvbudget.sweep.run import run_sweep
    from kvbudget.sweep.table import cheapest_lines

    import_ray("kvbudget sweep")  # before anything else: the one-line install hint
    expand(load_grid(grid), origin=Path(grid).name)  # grid mistakes before Ray starts
    show = not as_json and sys.stderr.isatty()

    def progress(row: dict[str, Any], done: int, total: int) -> None:
        if show:
            click.echo(f"\r  {done}/{total} points ({row.get('status')})", err=True, nl=False)

    outcome = run_sweep(
        grid,
        out_dir,
        workers=workers,
        ray_address=ray_address,
        resume=resume,
        progress=progress,
    )
    if show:
        click.echo("", err=True)
    lines = cheapest_lines(outcome.cheapest)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "figures": "simulated",
                    "out": str(outcome.out_dir),
                    "num_points": outcome.num_points,
                    "num_skipped": outcome.num_skipped,
                    "num_simulated": outcome.num_simulated,
                    "num_workers": outcome.num_workers,
                    "wall_s": outcome.wall_s,
                    "ray_start_s": outcome.ray_start_s,
                    "simulate_s": outcome.simulate_s,
                    "files": outcome.files,
                    "cheapest": outcome.cheapest,
                },
                indent=2,
            )
        )
        return
    statuses: dict[str, int] = {}
    for r in outcome.rows:
        statuses[str(r.get("status"))] = statuses.get(str(r.get("status")), 0) + 1
    timing = sorted({str(r["timing_model"]) for r in outcome.rows if r.get("timing_model")})
    click.echo(
        f"kvbudget sweep  (figures: simulated, timing model: {', '.join(timing) or 'none'})\n"
        f"  points {outcome.num_points}: {outcome.num_simulated} simulated now on "
        f"{outcome.num_workers} worker(s), {outcome.num_skipped} already done; "
        + ", ".join(f"{k} {v}" for k, v in sorted(statuses.items()))
        + f"\n  wall {outcome.wall_s:.1f} s (Ray start {outcome.ray_start_s:.1f} s, "
        f"simulating {outcome.simulate_s:.1f} s)"
    )
    for line in lines:
        click.echo(f"  {line}")
    if not lines:
        click.echo("  (no SLOs in the grid: add slos: [{name: ..., ttft_s: {p99: ...}}])")
    click.echo(f"  files in {outcome.out_dir}: {', '.join(outcome.files)}")
