"""Simulator speed: simulated requests per second of host CPU / wall time.

Workload of the issue: Llama-3.1-8B on one H100-SXM replica (pool from ``make_plan``), 1,024
input and 128 output tokens, Poisson arrivals at ``LOAD`` x the replica's saturation throughput
(measured first with an all-at-once burst in the same simulator). Reports, on one core:

* requests per CPU-second (``time.process_time``: robust to other processes on a shared
  machine) and per wall-second, with prefix caching on and off;
* scaling with the number of requests and of replicas (rate scaled with replicas);
* the lazy-decode fast path against explicit stepping (``EngineCore.step`` every step);
* Vidur (``vidur`` 0.0.26 in a separate venv, offline profile cache from
  ``/work/shared/peers/vidur-offline``) on the same shape in the same run, if it can run, and
  the ratio; otherwise why not.

Run: ``.venv/bin/python bench/sim_speed.py [--quick] [--vidur-python /tmp/vidur-venv/bin/python]
[--out result.json]``. Figures are measurements of *simulator speed* on this machine; the
simulated latencies inside are roofline estimates, not measurements of an engine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.sim.cluster import ClusterSpec, simulate
from kvbudget.sim.fromplan import plan_replica
from kvbudget.sim.replica import ReplicaSetup
from kvbudget.sim.request import EngineRequest

LOAD = 0.9
VIDUR_CACHE = Path("/work/shared/peers/vidur-offline/profiling_data")
#: Vidur keeps its trained predictors in ``./.vidur_cache`` of its working directory: a fixed
#: one in the user cache dir (outside the repo), so only the first run ever trains
VIDUR_WORK = (
    Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvbudget" / "vidur-0.0.26"
) / "work"
#: Vidur's first run trains its random-forest predictors (minutes on one core; much longer on a
#: loaded host): a generous limit
VIDUR_TIMEOUT_S = 3 * 3600


def make_requests(n: int, rate: float | None, seed: int) -> list[EngineRequest]:
    rng = np.random.default_rng(seed)
    arrivals = np.zeros(n) if rate is None else np.cumsum(rng.exponential(1.0 / rate, size=n))
    tokens = rng.integers(0, 32000, size=(n, 1024))
    return [
        EngineRequest(f"r{i}", tuple(tokens[i].tolist()), 128, arrival_s=float(arrivals[i]))
        for i in range(n)
    ]


REPEATS = 3


def timed(requests: list[EngineRequest], spec: ClusterSpec) -> dict[str, Any]:
    """Best (least CPU) of ``REPEATS`` runs; the shared machine only ever adds time."""
    cpus, walls = [], []
    for _ in range(REPEATS):
        c0, w0 = time.process_time(), time.perf_counter()
        res = simulate(requests, spec, seed=0)
        cpus.append(time.process_time() - c0)
        walls.append(time.perf_counter() - w0)
    cpu, wall = min(cpus), min(walls)
    s = res.summary()
    n = len(requests)
    return {
        "requests": n,
        "repeats": REPEATS,
        "cpu_s": round(cpu, 3),
        "cpu_s_median": round(float(np.median(cpus)), 3),
        "wall_s": round(wall, 3),
        "requests_per_cpu_s": round(n / cpu),
        "requests_per_cpu_s_median": round(n / float(np.median(cpus))),
        "requests_per_wall_s": round(n / wall),
        "simulated_s": round(s["simulated_s"], 2),
        "ttft_p50_s": s["ttft_p50_s"],
        "num_steps": s["num_steps"],
        "num_preemptions": s["num_preemptions"],
    }


def vidur_predictors_cached() -> bool:
    """Whether Vidur's trained predictors are in :data:`VIDUR_WORK` (no training needed)."""
    pred = VIDUR_WORK / ".vidur_cache" / "predictors"
    return pred.is_dir() and any(pred.rglob("*.pkl"))


def vidur_prepare() -> Path:
    """Vidur's working directory with the offline profile in place (copied once)."""
    work = VIDUR_WORK
    if not (work / ".vidur_cache" / "profiling_data").is_dir():
        shutil.copytree(VIDUR_CACHE, work / ".vidur_cache" / "profiling_data")
    return work


def vidur_env() -> dict[str, str]:
    """Vidur's environment: no hub, no wandb."""
    return dict(os.environ, HF_HUB_OFFLINE="1", WANDB_MODE="disabled")


def vidur_args(python: str, n: int, qps: float, out_dir: Path) -> list[str]:
    """The README's Vidur command for ``n`` requests at ``qps``."""
    return [
        python, "-m", "vidur.main",
        "--replica_config_device", "a100", "--replica_config_network_device", "a100_dgx",
        "--replica_config_model_name", "meta-llama/Llama-3-8B",
        "--replica_config_num_pipeline_stages", "1", "--replica_config_tensor_parallel_size", "1",
        "--cluster_config_num_replicas", "1", "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", "128",
        "--vllm_scheduler_config_max_tokens_in_batch", "4096",
        "--request_generator_config_type", "synthetic",
        "--synthetic_request_generator_config_num_requests", str(n),
        "--length_generator_config_type", "fixed",
        "--fixed_request_length_generator_config_prefill_tokens", "1024",
        "--fixed_request_length_generator_config_decode_tokens", "128",
        "--interval_generator_config_type", "poisson",
        "--poisson_request_interval_generator_config_qps", str(qps),
        "--execution_time_predictor_config_type", "random_forrest",
        "--random_forrest_execution_time_predictor_config_model_profiling_dataset",
        "local/llama-3-8b-a100-synthattn",
        "--random_forrest_execution_time_predictor_config_network_profiling_dataset",
        "local/a100-dgx",
        "--random_forrest_execution_time_predictor_config_prediction_max_tokens_per_request", "4096",
        "--random_forrest_execution_time_predictor_config_prediction_max_prefill_chunk_size", "4096",
        "--random_forrest_execution_time_predictor_config_num_estimators", "500",
        "--random_forrest_execution_time_predictor_config_max_depth", "32",
        "--random_forrest_execution_time_predictor_config_min_samples_split", "2",
        "--no-metrics_config_enable_chrome_trace", "--no-metrics_config_store_plots",
        "--metrics_config_output_dir", str(out_dir),
    ]  # fmt: skip


def run_vidur(python: str, n: int, qps: float) -> dict[str, Any]:
    """Vidur on the README's command; returns wall seconds or the reason it did not run.

    ``trained`` says whether this run had to train the predictors first (its time then
    includes the training, recorded as such).
    """
    if not Path(python).exists():
        return {"ran": False, "reason": f"no Vidur interpreter at {python} (pip install vidur)"}
    if not VIDUR_CACHE.is_dir():
        return {"ran": False, "reason": f"offline profile cache {VIDUR_CACHE} missing"}
    work = vidur_prepare()
    out_dir = Path(tempfile.mkdtemp(prefix="vidur-out-"))
    args = vidur_args(python, n, qps, out_dir)
    trained = not vidur_predictors_cached()
    t0 = time.perf_counter()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        proc = subprocess.run(
            args,
            cwd=work,
            env=vidur_env(),
            capture_output=True,
            text=True,
            check=False,
            timeout=VIDUR_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        shutil.rmtree(out_dir, ignore_errors=True)
        return {
            "ran": False,
            "trained": trained,
            "reason": f"vidur ran past {VIDUR_TIMEOUT_S} s (trained: {trained})",
        }
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    shutil.rmtree(out_dir, ignore_errors=True)
    if proc.returncode != 0:
        tail = " ".join((proc.stderr or proc.stdout).split()[-40:])
        return {"ran": False, "reason": f"vidur exited {proc.returncode}: {tail}"}
    return {
        "ran": True,
        "requests": n,
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "trained": trained,
        "cache_dir": str(work / ".vidur_cache"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="smaller sizes")
    ap.add_argument("--vidur-python", default="/tmp/vidur-venv/bin/python")
    ap.add_argument("--vidur-requests", type=int, default=10_000)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--repeats", type=int, default=REPEATS, help="runs per row (best reported)")
    opts = ap.parse_args()
    globals()["REPEATS"] = max(1, opts.repeats)
    sizes = [1000, 5000] if opts.quick else [1000, 10_000, 30_000]

    plan, cfg, roofline = plan_replica(PlanRequest(model="meta-llama/Llama-3.1-8B", gpu="H100-SXM"))
    setup = ReplicaSetup(cfg, roofline)
    out: dict[str, Any] = {
        "what": "simulator speed (measured host time); simulated latencies are roofline estimates",
        "host": {"python": sys.version.split()[0], "machine": platform.machine(),
                 "cpus": os.cpu_count(), "loadavg_at_start": os.getloadavg()},
        "replica": {"model": plan.model_id, "gpu": plan.gpu.id, "num_gpu_blocks": cfg.num_gpu_blocks,
                    "max_num_seqs": cfg.max_num_seqs,
                    "max_num_batched_tokens": cfg.max_num_batched_tokens},
    }  # fmt: skip
    burst = simulate(make_requests(2000, None, 1), ClusterSpec([setup]), seed=0)
    saturation = 2000 / burst.summary()["simulated_s"]
    rate = LOAD * saturation
    out["saturation_requests_per_s"] = round(saturation, 2)
    out["rate_requests_per_s"] = round(rate, 2)

    rows = []
    for caching in (True, False):
        s = ReplicaSetup(cfg.model_copy(update={"enable_prefix_caching": caching}), roofline)
        for n in sizes:
            row = timed(make_requests(n, rate, 2), ClusterSpec([s]))
            rows.append({"prefix_caching": caching, "replicas": 1, **row})
            print(json.dumps(rows[-1]), flush=True)
    # vLLM's exported-hash default (sha256 of pickle) instead of Python's hash (see prefix.py)
    s = ReplicaSetup(cfg.model_copy(update={"hash_algo": "sha256"}), roofline)
    row = timed(make_requests(sizes[1], rate, 2), ClusterSpec([s]))
    rows.append({"prefix_caching": True, "hash_algo": "sha256", "replicas": 1, **row})
    print(json.dumps(rows[-1]), flush=True)
    for replicas in (2, 4, 8):
        n = sizes[1]
        row = timed(make_requests(n, rate * replicas, 3), ClusterSpec([setup] * replicas))
        rows.append({"prefix_caching": True, "replicas": replicas, "router": "round_robin", **row})
        print(json.dumps(rows[-1]), flush=True)
        if replicas == 4:
            row = timed(
                make_requests(n, rate * replicas, 3),
                ClusterSpec([setup] * replicas, router="cost"),
            )
            rows.append({"prefix_caching": True, "replicas": replicas, "router": "cost", **row})
            print(json.dumps(rows[-1]), flush=True)
    out["runs"] = rows

    n = sizes[0]
    explicit = timed(
        make_requests(n, rate, 4), ClusterSpec([ReplicaSetup(cfg, roofline, fast_path=False)])
    )
    fast = timed(make_requests(n, rate, 4), ClusterSpec([setup]))
    out["fast_path_vs_explicit"] = {
        "requests": n,
        "fast_cpu_s": fast["cpu_s"],
        "explicit_cpu_s": explicit["cpu_s"],
        "speedup": round(explicit["cpu_s"] / fast["cpu_s"], 2),
    }
    print(json.dumps(out["fast_path_vs_explicit"]), flush=True)

    # Vidur: start-up (N=10) and the measured run, same shape, its own A100 profile
    vidur_n = opts.vidur_requests
    startup = run_vidur(opts.vidur_python, 10, 8.0)
    vidur: dict[str, Any] = {"startup": startup}
    if startup.get("ran"):
        main_run = run_vidur(opts.vidur_python, vidur_n, 8.0)
        vidur["run"] = main_run
        if main_run.get("ran"):
            net_wall = max(1e-9, main_run["wall_s"] - startup["wall_s"])
            net_cpu = max(1e-9, main_run["cpu_s"] - startup["cpu_s"])
            vidur["requests_per_wall_s"] = round(vidur_n / net_wall)
            vidur["requests_per_cpu_s"] = round(vidur_n / net_cpu)
            ours = timed(make_requests(vidur_n, rate, 5), ClusterSpec([setup]))
            vidur["kvbudget_same_run"] = ours
            vidur["ratio_kvbudget_over_vidur_wall"] = round(
                ours["requests_per_wall_s"] / vidur["requests_per_wall_s"], 2
            )
            vidur["ratio_kvbudget_over_vidur_cpu"] = round(
                ours["requests_per_cpu_s"] / vidur["requests_per_cpu_s"], 2
            )
            # Vidur runs once; the median of our repeats is the like-for-like figure
            vidur["ratio_kvbudget_median_over_vidur_cpu"] = round(
                ours["requests_per_cpu_s_median"] / vidur["requests_per_cpu_s"], 2
            )
    out["vidur"] = vidur
    print(json.dumps(vidur), flush=True)
    if opts.out:
        opts.out.write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
