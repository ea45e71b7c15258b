"""``kvbudget sweep``: a what-if grid simulated in parallel on Ray (every figure *simulated*)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kvbudget.cli.vocab import METRIC_PERCENTILES, METRIC_PERCENTILES_HELP


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
@click.option(
    "--slo",
    default=None,
    help="Also search each configuration's highest Poisson rate meeting this SLO, written as "
    "for kvbudget capacity ('ttft_p95<1s,tpot_p95<50ms', optionally goodput>=0.99), and the "
    "cheapest configuration reaching each --target-rate.",
)
@click.option(
    "--capacity-requests",
    type=click.IntRange(20),
    default=None,
    help="With --slo: requests per probe of each search (kvbudget capacity --num-requests) "
    "[default: 200].",
)
@click.option(
    "--target-rate",
    "target_rates",
    type=click.FloatRange(min=0, min_open=True),
    multiple=True,
    help="With --slo: a rate (requests/s) to find the cheapest configuration for; repeat it "
    "[default: the grid's rate_per_s values].",
)
@click.option(
    METRIC_PERCENTILES,
    "metric_percentiles",
    help=METRIC_PERCENTILES_HELP
    + " Per point, in results.jsonl/.csv; p50, p99 and the SLOs' own percentiles are added.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
def sweep(
    grid: str,
    out_dir: Path,
    workers: int | None,
    ray_address: str | None,
    resume: bool,
    slo: str | None,
    capacity_requests: int | None,
    target_rates: tuple[float, ...],
    metric_percentiles: str | None,
    as_json: bool,
) -> None:
    """Simulate every point of GRID (YAML: models x GPUs x TP x KV dtype x max length x prefix
    caching x router x replicas x arrival rate) on Ray and state the cheapest configuration
    meeting each SLO. With --slo, also each configuration's highest rate meeting it (kvbudget
    capacity's search) and the cheapest configuration for each --target-rate. Each point gives
    the mean, median and --metric-percentiles of TTFT, TPOT, ITL and E2E. Figures are
    *simulated* (each row names its timing model). See docs/commands/sweep.md.
    """
    from kvbudget.errors import ConfigError
    from kvbudget.maxload.slo import parse_slo
    from kvbudget.metrics.percentile_set import parse_metric_percentiles
    from kvbudget.ray_support import import_ray
    from kvbudget.sweep.capacity import capacity_lines
    from kvbudget.sweep.grid import expand, load_grid
    from kvbudget.sweep.run import run_sweep
    from kvbudget.sweep.table import cheapest_lines

    import_ray("kvbudget sweep")  # before anything else: the one-line install hint
    expand(load_grid(grid), origin=Path(grid).name)  # grid mistakes before Ray starts
    if slo is not None:
        parse_slo(slo)
    chosen = None if metric_percentiles is None else parse_metric_percentiles(metric_percentiles)
    for flag, value in (
        ("--capacity-requests", capacity_requests),
        ("--target-rate", target_rates),
    ):
        if value and slo is None:
            raise ConfigError(
                f"{flag} without --slo: it sets the SLO search; add --slo", field="slo"
            )
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
        slo=slo,
        capacity_requests=capacity_requests,
        target_rates=target_rates,
        metric_percentiles=chosen,
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
                    "metric_percentiles": outcome.metric_percentiles,
                    "cheapest": outcome.cheapest,
                    **(
                        {
                            "slo": outcome.slo,
                            "capacity": outcome.capacity,
                            "cheapest_for_rate": outcome.cheapest_for_rate,
                        }
                        if outcome.slo is not None
                        else {}
                    ),
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
    names = ", ".join(
        ["mean", "median", *(f"p{q:g}" for q in outcome.metric_percentiles if q != 50)]
    )
    click.echo(f"  per point (results.csv): {names} of TTFT, TPOT, ITL and E2E (seconds)")
    for line in lines:
        click.echo(f"  {line}")
    if not lines and outcome.slo is None:
        click.echo("  (no SLOs in the grid: add slos: [{name: ..., ttft_s: {p99: ...}}])")
    unstable = [r for r in outcome.rows if r.get("stable") is False]
    if unstable:
        rates = sorted({float(r["rate_per_s"]) for r in unstable})
        click.echo(
            f"  {len(unstable)} point(s) near or past saturation (the queue grew: arrivals outrun "
            f"the service; not sustainable, meet no SLO) at {', '.join(f'{x:g}' for x in rates)} "
            "req/s: column stable=false"
        )
    if outcome.slo is not None:
        for line in capacity_lines(outcome.slo, outcome.capacity, outcome.cheapest_for_rate):
            click.echo(f"  {line}")
    click.echo(f"  files in {outcome.out_dir}: {', '.join(outcome.files)}")
