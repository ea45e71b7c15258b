"""Trace scale: the whole ``kvbudget sim`` process at growing request counts, beside Vidur.

Workload of issue 18: Llama-3.1-8B on one H100-SXM (pool from ``make_plan``), 1,024 input and
128 output tokens, Poisson 20 req/s, prefix caching on. Each size runs ``kvbudget sim --json``
as a child process; ``os.wait4`` gives that child's own CPU seconds (user + system), peak RSS
(``ru_maxrss``) and the wall seconds, so children running at the same time are measured apart.

Vidur 0.0.26 (its own venv; offline profile cache from ``/work/shared/peers/vidur-offline``,
trained predictors kept in the user cache dir, see ``bench/sim_speed.py``) runs in the same
benchmark run, first and alone (its own child processes): a start-up run (N=10) and the measured
run; its start-up is subtracted, as that README says. ``--concurrent-vidur`` runs it alongside
the kvbudget sizes instead (the earlier method): on this two-vCPU host one process's CPU
seconds move with what the other vCPU runs, and the overlap is uneven (kvbudget's runs end while
Vidur's still goes), so that ratio moves from run to run. Vidur has only an A100 profile of
Llama-3-8B, so it runs the README's shape (1,024 / 128 tokens, Poisson 8 req/s, about 87% of
that replica's saturation); kvbudget also runs Vidur's request count on its own workload, and
the ratio is requests per CPU second at that same count.

Both simulator builds run in the same benchmark run (``--builds``, default ``compiled,pure``):
``compiled`` is the mypyc build the install made (a wheel's own, or the user cache's of an
editable install; a run that finds none is reported as not run, never as pure figures under the
compiled name) and ``pure`` the same process with ``KVBUDGET_PURE_PYTHON=1``. Each row says
which build ran; the ratio to Vidur and the compiled-over-pure speed-up are given per build.

Run: ``.venv/bin/python bench/sim_scale.py --sizes 100000,1000000 --vidur-requests 100000
--out bench/results/sim_scale.json`` (``--repeats N``: each size and build N times in turn, every
run a row); ``scripts/render_benchmarks.py`` renders the table in
docs/benchmarks.md. Figures are measurements of simulator speed and memory on the host named in
the file; the simulated latencies inside are roofline estimates.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sim_speed import vidur_args, vidur_env, vidur_predictors_cached, vidur_prepare

RATE = 20.0
VIDUR_QPS = 8.0
VIDUR_TIMEOUT_S = 3 * 3600


def run_child(
    cmd: list[str], *, cwd: Path | None = None, env: dict[str, str] | None = None, timeout_s: float
) -> dict[str, Any]:
    """Run ``cmd``; its exit status, output, wall, own CPU seconds and peak RSS."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=err)
        timer = threading.Timer(timeout_s, lambda: os.kill(proc.pid, signal.SIGKILL))
        timer.start()
        try:
            _pid, status, ru = os.wait4(proc.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        return {
            "rc": proc.returncode,
            "timed_out": proc.returncode == -signal.SIGKILL,
            "stdout": out.read().decode(errors="replace"),
            "stderr": err.read().decode(errors="replace"),
            "wall_s": wall,
            "cpu_s": ru.ru_utime + ru.ru_stime,
            "peak_rss_bytes": ru.ru_maxrss * 1024,
        }


def tree_commit(root: Path) -> str:
    """The commit the measured tree is at (a ``git archive`` snapshot: its ``COMMIT`` file)."""
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=False
    ).stdout.strip()
    if not commit and (root / "COMMIT").is_file():
        commit = (root / "COMMIT").read_text().strip()
    return commit


def compile_bytecode(src: Path) -> str:
    """Write kvbudget's bytecode caches before the runs, as installing a wheel does: without
    them (an editable install under ``PYTHONDONTWRITEBYTECODE``) every run compiles its
    interpreted modules from source first, a start-up cost no installed copy pays."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cmd = [sys.executable, "-m", "compileall", "-q", str(src / "kvbudget")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return f"not compiled (compileall exit {done.returncode}: {done.stdout[-200:]})"
    return "compiled before the runs (python -m compileall src/kvbudget)"


#: the simulator builds a run can measure, and the environment each one runs with
BUILDS = ("compiled", "pure")
PURE_ENV = "KVBUDGET_PURE_PYTHON"


def build_env(build: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != PURE_ENV}
    if build == "pure":
        env[PURE_ENV] = "1"
    return env


def run_kvbudget(n: int, *, build: str = "compiled", records: bool = False) -> dict[str, Any]:
    """One whole ``kvbudget sim`` process on ``build``; its own measures."""
    cmd = [
        sys.executable, "-m", "kvbudget", "sim", "--model", "meta-llama/Llama-3.1-8B",
        "--gpu", "H100-SXM", "--input-tokens", "1024", "--output-tokens", "128",
        "--rate", f"{RATE:g}", "--requests", str(n), "--json",
    ]  # fmt: skip
    records_path = Path(tempfile.gettempdir()) / f"kvbudget-sim-scale-records-{os.getpid()}.jsonl"
    if records:
        cmd += ["--records-out", str(records_path)]
    load_before = os.getloadavg()
    r = run_child(cmd, env=build_env(build), timeout_s=4 * 3600)
    row: dict[str, Any] = {
        "requests": n,
        "build": build,
        "records_out": records,
        # the host's 1-minute load average before and after this process (shared host)
        "loadavg_1min_before_after": [round(load_before[0], 2), round(os.getloadavg()[0], 2)],
    }
    if r["rc"] != 0:
        row.update(ran=False, reason=r["stderr"].strip()[-300:] or f"exit {r['rc']}")
        return row
    if records:
        row["records_bytes"] = records_path.stat().st_size
        records_path.unlink()
    summary = json.loads(r["stdout"])
    if build == "compiled" and not summary["simulator_build"].startswith("compiled with mypyc"):
        row.update(ran=False, reason=f"no compiled build ran: {summary['simulator_build']}")
        return row
    cpu, wall = r["cpu_s"], r["wall_s"]
    row.update(
        ran=True,
        cpu_s=round(cpu, 2),
        wall_s=round(wall, 2),
        peak_rss_bytes=r["peak_rss_bytes"],
        requests_per_cpu_s=round(n / cpu),
        requests_per_wall_s=round(n / wall),
        requests_completed=summary["requests_completed"],
        simulated_s=round(summary["simulated_s"], 2),
        ttft_p50_s=summary["ttft_p50_s"],
        tpot_p50_s=summary["tpot_p50_s"],
        timing_model=summary["timing_model"],
        # which build ran: compiled with mypyc (and which modules) or pure Python
        simulator_build=summary["simulator_build"],
    )
    return row


def run_vidur(python: str, n: int) -> dict[str, Any]:
    """One Vidur process on the README's command (``n`` requests); its own measures."""
    if not Path(python).exists():
        return {"ran": False, "requests": n, "reason": f"no Vidur interpreter at {python}"}
    trained = not vidur_predictors_cached()
    work = vidur_prepare()
    with tempfile.TemporaryDirectory(prefix="vidur-out-") as out_dir:
        r = run_child(
            vidur_args(python, n, VIDUR_QPS, Path(out_dir)),
            cwd=work,
            env=vidur_env(),
            timeout_s=VIDUR_TIMEOUT_S,
        )
    row: dict[str, Any] = {"requests": n, "trained_predictors": trained}
    if r["rc"] != 0:
        tail = " ".join((r["stderr"] or r["stdout"]).split()[-40:])
        why = f"ran past {VIDUR_TIMEOUT_S} s" if r["timed_out"] else f"exited {r['rc']}: {tail}"
        row.update(ran=False, reason=f"vidur {why}", wall_s=round(r["wall_s"], 1))
        return row
    row.update(
        ran=True,
        wall_s=round(r["wall_s"], 2),
        cpu_s=round(r["cpu_s"], 2),
        peak_rss_bytes=r["peak_rss_bytes"],
    )
    return row


def vidur_block(python: str, n: int) -> dict[str, Any]:
    """Vidur's start-up run, then its measured run, with the net rates."""
    block: dict[str, Any] = {"qps": VIDUR_QPS, "cache_dir": str(vidur_prepare() / ".vidur_cache")}
    t0 = time.perf_counter()
    startup = run_vidur(python, 10)
    block["startup"] = startup
    if startup.get("trained_predictors"):
        # this run trained and cached the predictors: how long that took, and a second
        # start-up (predictors loaded from the cache) to subtract
        block["training_wall_s"] = round(time.perf_counter() - t0, 1)
        startup = run_vidur(python, 10)
        block["startup"] = startup
    if not startup.get("ran"):
        return block
    main_run = run_vidur(python, n)
    block["run"] = main_run
    if main_run.get("ran"):
        block["requests_per_cpu_s"] = round(n / max(1e-9, main_run["cpu_s"] - startup["cpu_s"]))
        block["requests_per_wall_s"] = round(n / max(1e-9, main_run["wall_s"] - startup["wall_s"]))
    return block


def rss_flatness(runs: list[dict[str, Any]], build: str) -> dict[str, Any] | None:
    """Peak RSS growth per added request between the smallest and largest plain run of
    ``build`` (0: flat)."""
    plain = sorted(
        (
            r
            for r in runs
            if r.get("ran") and not r["records_out"] and r.get("build", build) == build
        ),
        key=lambda r: r["requests"],
    )
    if len(plain) < 2 or plain[0]["requests"] == plain[-1]["requests"]:
        return None
    small, large = plain[0], plain[-1]
    growth = (large["peak_rss_bytes"] - small["peak_rss_bytes"]) / (
        large["requests"] - small["requests"]
    )
    return {
        "from_requests": small["requests"],
        "to_requests": large["requests"],
        "peak_rss_growth_bytes_per_request": round(growth, 2),
    }


def plain_run(runs: list[dict[str, Any]], n: int, build: str) -> dict[str, Any] | None:
    """The run of ``build`` at ``n`` requests without ``--records-out``, when it ran."""
    return next(
        (
            r
            for r in runs
            if r["requests"] == n
            and not r["records_out"]
            and r.get("build") == build
            and r.get("ran")
        ),
        None,
    )


def speedups(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Compiled over pure requests per CPU (and wall) second at each size both ran."""
    out = []
    for n in sorted({r["requests"] for r in runs}):
        compiled, pure = plain_run(runs, n, "compiled"), plain_run(runs, n, "pure")
        if compiled is None or pure is None:
            continue
        out.append(
            {
                "requests": n,
                "cpu": round(compiled["requests_per_cpu_s"] / pure["requests_per_cpu_s"], 2),
                "wall": round(compiled["requests_per_wall_s"] / pure["requests_per_wall_s"], 2),
            }
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100000,1000000")
    ap.add_argument("--records-size", type=int, default=100_000, help="0: no --records-out run")
    ap.add_argument("--vidur-python", default="/tmp/vidur-venv/bin/python")
    ap.add_argument("--vidur-requests", type=int, default=100_000)
    ap.add_argument(
        "--concurrent-vidur",
        action="store_true",
        help="run Vidur alongside kvbudget's runs (the method before 2026-12-01 22:55 UTC); by "
        "default it runs first, alone, so neither side's CPU time moves with the other's load",
    )
    ap.add_argument(
        "--builds",
        default=",".join(BUILDS),
        help="simulator builds to run at each size, in order: compiled (the install's mypyc "
        "build), pure (KVBUDGET_PURE_PYTHON=1); the records run and the memory flatness use the "
        "first",
    )
    ap.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each size and build this many times in turn (how much one host's figure moves "
        "from one process to the next; every run is a row)",
    )
    ap.add_argument("--out", type=Path)
    opts = ap.parse_args()
    builds = [b for b in opts.builds.split(",") if b]
    if not builds or set(builds) - set(BUILDS):
        ap.error(f"--builds {opts.builds!r}: use a comma-separated list of {', '.join(BUILDS)}")
    root = Path(__file__).resolve().parents[1]
    commit = tree_commit(root)
    out: dict[str, Any] = {
        "what": "whole-process simulator speed and peak RSS (measured host CPU, wall and memory); "
        "simulated latencies are estimates of the timing model each run names",
        "workload": {"model": "meta-llama/Llama-3.1-8B", "gpu": "H100-SXM", "input_tokens": 1024,
                     "output_tokens": 128, "arrivals": f"poisson {RATE:g} req/s"},
        "host": {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg(),
                 "note": "shared host: other work may run at the same time (the load averages say how much)"},
        "commit": commit,
        "started_utc": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "runs": [],
    }  # fmt: skip
    out["bytecode"] = compile_bytecode(root / "src")
    vidur: dict[str, Any] = {}
    thread = threading.Thread(
        target=lambda: vidur.update(vidur_block(opts.vidur_python, opts.vidur_requests))
    )
    if opts.concurrent_vidur:
        out["vidur_schedule"] = "alongside kvbudget's runs (a thread; its own processes)"
        thread.start()
    else:
        out["vidur_schedule"] = "before kvbudget's runs, alone"
        thread.run()  # in this thread: Vidur's runs end before kvbudget's begin
    sizes = sorted({int(x) for x in opts.sizes.split(",")} | {opts.vidur_requests})
    out["builds"] = builds
    out["repeats"] = opts.repeats
    for n in sizes:
        for _ in range(opts.repeats):
            for build in builds:
                row = run_kvbudget(n, build=build)
                out["runs"].append(row)
                print(json.dumps(row), flush=True)
    if opts.records_size:
        row = run_kvbudget(opts.records_size, build=builds[0], records=True)
        out["runs"].append(row)
        print(json.dumps(row), flush=True)
    out["rss_flatness"] = rss_flatness(out["runs"], builds[0])
    out["compiled_over_pure"] = speedups(out["runs"])
    if opts.concurrent_vidur:
        thread.join()
    if "requests_per_cpu_s" in vidur:
        vidur["ratios_by_build"] = {}
        for build in builds:
            ours = plain_run(out["runs"], opts.vidur_requests, build)
            if ours is None:
                continue
            ratio = {
                "cpu": round(ours["requests_per_cpu_s"] / vidur["requests_per_cpu_s"], 1),
                "wall": round(ours["requests_per_wall_s"] / vidur["requests_per_wall_s"], 1),
            }
            vidur["ratios_by_build"][build] = ratio
            if build == builds[0]:  # the headline figure: the first build (compiled by default)
                vidur["ratio_kvbudget_over_vidur_cpu"] = ratio["cpu"]
                vidur["ratio_kvbudget_over_vidur_wall"] = ratio["wall"]
                vidur["ratio_build"] = build
    out["vidur"] = vidur
    out["loadavg_at_end"] = os.getloadavg()
    print(json.dumps(vidur), flush=True)
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2) + "\n")
    failed = [
        f"kvbudget at {r['requests']:,}: {r.get('reason', '?')}"
        for r in out["runs"]
        if not r.get("ran")
    ]
    if "requests_per_cpu_s" not in vidur:
        failed.append(f"Vidur: {vidur.get('run', vidur.get('startup', {})).get('reason', '?')}")
    if failed:
        raise SystemExit(
            "sim_scale: not every run ran (the result file keeps them): " + "; ".join(failed)
        )


if __name__ == "__main__":
    main()
