"""Simulated latency against real vLLM runs on H100/H200/B200: the silicon rows of
aiconfigurator-core.

aiconfigurator-core 0.12.0 ships ``systems/silicon_sample.csv``: real vLLM serving runs (one row:
model, GPU, engine version, TP/EP/DP, quantization, fixed input/output lengths, a closed-loop
concurrency, measured mean TTFT and mean TPOT). This replays every vLLM ``agg`` row with
kvbudget's simulator, in-process, closed loop at the row's concurrency and lengths, twice: with
the measured step-time model (``--timing-model measured``) and with the roofline. Beside them,
aiconfigurator-core's own static estimate of the same row (``AicEngine.run_static``: the batch
prefilled together, then decoded together; its TTFT and TPOT) on the same tables.

THE ROWS ARE A VALIDATION SET: nothing in kvbudget is fitted to them (no constant, factor or
per-model switch chosen by looking at them). A row kvbudget cannot simulate (a GPU outside its
catalog, data-parallel attention, a weight format it does not size, a model it cannot resolve
offline) is kept in the raw file with the reason. Expert-parallel rows run with vLLM's
``--enable-expert-parallel``.

The simulated client is the one that measured the row where its source names it
(:func:`client`): InferenceX's ``bench_serving`` draws each length uniformly from ``[int(0.8
L), L]``; rows whose source names no client run fixed lengths. Both send ``10 x concurrency``
requests. An InferenceX row also runs with the vLLM server flags its own InferenceX script set
when it was measured (:func:`server_flags`: ``--kv-cache-dtype``, ``--gpu-memory-utilization``,
``--max-num-seqs``, ``--max-num-batched-tokens``, ``--block-size``, ``--async-scheduling``, and
the image's vLLM version for a row that names none), read from InferenceX's history by
``scripts/inferencex_server_flags.py`` into ``bench/inferencex_server_flags.json``.

    python bench/gpu_accuracy.py                 # every row -> bench/results/gpu_accuracy.json
    python bench/gpu_accuracy.py --limit 20      # the first 20 rows (a quick look)
    python scripts/render_accuracy.py            # docs/accuracy.md's table from the raw file
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import json
import os
import platform
import sys
import time
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvbudget.capacity.model_dtype import QUANTIZATION_METHODS  # noqa: E402
from kvbudget.capacity.plan_types import PlanRequest  # noqa: E402
from kvbudget.errors import KvbudgetError  # noqa: E402
from kvbudget.sim.cluster import ClusterSpec, simulate  # noqa: E402
from kvbudget.sim.fromplan import build_replica  # noqa: E402
from kvbudget.sim.scenario import is_moe  # noqa: E402
from kvbudget.spec.resolve import resolve_model  # noqa: E402
from kvbudget.workload.spec import generate, workload_from_dict  # noqa: E402

OUT = ROOT / "bench" / "results" / "gpu_accuracy.json"
#: aiconfigurator-core system -> kvbudget GPU catalog id (rows on other systems: not simulated)
SYSTEMS = {"h100_sxm": "H100-SXM", "h200_sxm": "H200", "b200_sxm": "B200", "b300_sxm": "B300"}
#: the row's precision -> vLLM --quantization (None: the checkpoint's own quantization_config).
#: fp4 rows (gemm and MoE quant mode nvfp4) served NVFP4 checkpoints, which vLLM loads as
#: ``modelopt_fp4``; kvbudget sizes every linear layer of the architecture in NVFP4, as
#: aiconfigurator's own ``nvfp4`` quant mode prices every GEMM
#: int4 rows (gemm quant mode int4_wo) ran Kimi-K2.5's own checkpoint, whose text_config
#: carries its INT4 compressed-tensors quantization_config: read it as it is
PRECISIONS = {"fp8": "fp8", "": None, "bf16": None, "fp4": "modelopt_fp4", "int4": None}
#: where the NVFP4 stand-in configs are written (:func:`_nvfp4_standin`)
STANDIN_DIR = Path.home() / ".cache" / "kvbudget" / "aic-configs" / "nvfp4-standins"
#: closed loop: requests per concurrency slot. Both clients the rows' sources name send
#: ``10 x concurrency`` requests: InferenceX's ``run_benchmark_serving`` (``--num-prompts
#: $((CONC * 10))`` in every benchmarks/single_node script) and aiconfigurator's own eval runner
#: (``src/aiconfigurator/eval/benchmarks/genai_perf_runner.py``: ``--request-count v * 10``)
REQUESTS_PER_SLOT = 10
MIN_REQUESTS = 10
#: InferenceX (SemiAnalysis, ``.github/workflows/benchmark-tmpl.yml``): ``RANDOM_RANGE_RATIO: 0.8``
INFERENCEX_RANGE_RATIO = 0.8
CLIENTS = {
    "inferencex": (
        "InferenceX bench_serving (utils/bench_serving/benchmark_serving.py "
        "sample_random_requests: each input and output length an integer drawn uniformly from "
        "[int(L x 0.8), L], RANDOM_RANGE_RATIO 0.8; --request-rate inf --max-concurrency C "
        "--num-prompts 10 C --ignore-eos; its warm-up requests finish before the measured run)"
    ),
    "fixed": (
        "not named by the row's source: fixed lengths, every slot starting at once, 10 C "
        "requests (vllm bench serve's default --random-range-ratio 0.0; aiconfigurator's own "
        "genai-perf runner: stddev 0, --request-count 10 C)"
    ),
}


def silicon_rows() -> list[dict[str, str]]:
    """The vLLM agg rows of the wheel's silicon_sample.csv, in file order."""
    path = resources.files("aiconfigurator_core") / "systems" / "silicon_sample.csv"
    rows = list(csv.DictReader(io.StringIO(path.read_text(encoding="utf-8"), newline="")))
    return [r for r in rows if r["backend"] == "vllm" and r["mode"] == "agg"]


def _int(row: dict[str, str], key: str, default: int = 1) -> int:
    raw = row.get(key) or ""
    return int(float(raw)) if raw else default


def client(row: dict[str, str]) -> str:
    """Which benchmark client measured the row, read from its ``silicon_data_source``.

    InferenceX: the rows aiconfigurator took from InferenceX's database (``db-dump/...;
    config_id=...; workflow_run_id=...``: aiconfigurator's ``config_adapter/inferencex.py``
    reads such records) and its dated exports (``source_file=YYYY-MM-DD.csv; model=<InferenceX
    model alias>``). Every other row: its source does not name the client (``fixed``).
    """
    source = row["silicon_data_source"]
    head = source.split(";")[0].strip()
    if head.startswith("db-dump/"):
        return "inferencex"
    name = head.removeprefix("source_file=")
    dated = len(name) == 14 and name.endswith(".csv") and name[:4].isdigit()
    if dated and "; model=" in source:
        return "inferencex"
    return "fixed"


def _lengths(value: int, kind: str) -> dict[str, Any]:
    if kind == "inferencex":  # int(L * r) .. L inclusive (np.random.randint(lower, upper + 1))
        return {"kind": "uniform", "low": int(value * INFERENCEX_RANGE_RATIO), "high": value}
    return {"kind": "fixed", "value": value}


def not_simulable(row: dict[str, str]) -> str | None:
    """Why kvbudget cannot simulate this row with the flags it has, or None."""
    if row["system"] not in SYSTEMS:
        return f"GPU {row['system']}: not in kvbudget's GPU catalog"
    if _int(row, "pp_size") > 1:
        return f"pp {row['pp_size']}: the simulator times one pipeline stage"
    if row["precision"] not in PRECISIONS and not _own_quant(row):
        return (
            f"precision {row['precision']} ({row['gemm_quant_mode']}): kvbudget has no "
            "--quantization for it"
        )
    return None


def _own_quant(row: dict[str, str]) -> bool:
    """The checkpoint carries its quantization (gpt-oss mxfp4, *-FP8 checkpoints)."""
    return row["model_path"] == "openai/gpt-oss-120b" or row["model_path"].endswith("-FP8")


#: FP8 checkpoints whose config.json neither kvbudget's catalog nor the wheel holds offline: the
#: same architecture's bf16 config with ``--quantization fp8`` (NVIDIA's ModelOpt FP8
#: checkpoint of Llama-3.1-8B-Instruct: the Llama-3.1-8B architecture, fp8 weights and GEMMs)
SAME_ARCHITECTURE = {"nvidia/Llama-3.1-8B-Instruct-FP8": "meta-llama/Llama-3.1-8B"}


def _resolvable(model_id: str) -> bool:
    try:
        return resolve_model(model_id).spec is not None
    except KvbudgetError:
        return False  # not in kvbudget's catalog nor the local Hugging Face cache


def _model_ref(model_id: str) -> str:
    """kvbudget's own resolution first; else the wheel's copy of the same config.json; else
    the same architecture's config (:data:`SAME_ARCHITECTURE`)."""
    if _resolvable(model_id):
        return model_id
    bundled = resources.files("aiconfigurator_core") / "model_configs"
    path = Path(str(bundled)) / (model_id.replace("/", "--") + "_config.json")
    if path.is_file():
        return str(path)
    return SAME_ARCHITECTURE.get(model_id, model_id)


def _nvfp4_standin(model_ref: str) -> str:
    """The config of an NVFP4 export of ``model_ref``: the same config.json with its
    ``quantization_config`` (FP8 for MiniMax-M2.5, INT4 compressed-tensors in Kimi-K2.5's
    ``text_config``) replaced by ModelOpt's NVFP4 one, which vLLM would refuse to combine with
    ``--quantization modelopt_fp4``. A config without one is returned as it is."""
    resolved = resolve_model(model_ref)
    raw = dict(resolved.source.raw) if resolved.source is not None else {}
    text = dict(raw.get("text_config") or {})  # a VLM wrapper keeps it in its text config
    if not raw.get("quantization_config") and not text.get("quantization_config"):
        return model_ref
    nvfp4 = dict(QUANTIZATION_METHODS["modelopt_fp4"])
    if raw.get("quantization_config"):
        raw["quantization_config"] = nvfp4
    if text.get("quantization_config"):
        raw["text_config"] = {**text, "quantization_config": nvfp4}
    STANDIN_DIR.mkdir(parents=True, exist_ok=True)
    path = STANDIN_DIR / (Path(model_ref).name.removesuffix("_config.json") + "_config.json")
    path.write_text(json.dumps(raw, indent=1), encoding="utf-8")
    return str(path)


#: the vLLM server flags InferenceX's script set for each of its rows (read from InferenceX's
#: history by scripts/inferencex_server_flags.py; the rows' procedure, not their latencies)
SERVER_FLAGS = ROOT / "bench" / "inferencex_server_flags.json"


def server_flags(row: dict[str, str]) -> dict[str, Any]:
    """The PlanRequest fields the row's own ``vllm serve`` set (``{}``: none known), with
    InferenceX's formulas resolved for the row (``$CONC``, ``$((ISL * 2))``)."""
    known = _server_flags().get(row["id"]) or {}
    out: dict[str, Any] = {}
    for field, value in (known.get("flags") or {}).items():
        if value == "concurrency":
            value = int(row["batch_size"])
        elif isinstance(value, str) and value.endswith(" x isl"):
            value = int(value.split()[0]) * int(row["isl"])
        if isinstance(value, dict):  # a value the reader could not parse: not applied
            continue
        out[field] = value
    return out


def _server_flags() -> dict[str, Any]:
    """The rows of :data:`SERVER_FLAGS` (read once per path)."""
    return _read_flags(SERVER_FLAGS)


@functools.cache
def _read_flags(path: Path) -> dict[str, Any]:
    rows: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))["rows"]
    return rows


def _request(row: dict[str, str]) -> PlanRequest:
    quant = None if _own_quant(row) else PRECISIONS.get(row["precision"])
    model = _model_ref(row["model_path"])
    if model != row["model_path"] and row["model_path"] in SAME_ARCHITECTURE:
        quant = PRECISIONS.get(row["precision"])  # the bf16 config stands in: quantize it
    if quant == "modelopt_fp4":
        model = _nvfp4_standin(model)
    # a row that names no version: the vLLM image its InferenceX workflow named, where known
    version = row["backend_version"] or str(
        _server_flags().get(row["id"], {}).get("engine_version", "")
    )
    return PlanRequest(
        model=model,
        gpu=SYSTEMS[row["system"]],
        tp=_int(row, "tp_size"),
        data_parallel_size=_int(row, "attention_dp_size"),
        quantization=quant,
        engine_version=version if version[:1].isdigit() else None,
        max_model_len=int(row["isl"]) + int(row["osl"]),
        **server_flags(row),
    )


def _server_record(row: dict[str, str]) -> dict[str, Any]:
    """Where the row's server flags came from, and what was applied (``{}``: not an InferenceX
    row)."""
    known = _server_flags().get(row["id"])
    if known is None:
        return {}
    out: dict[str, Any] = {"applied": server_flags(row), "script": known.get("script")}
    if "commit" in known:
        out["commit"] = "+".join(c[:10] for c in known["commit"].split("+"))
    if "engine_version" in known:
        out["engine_version"] = known["engine_version"]
    out["not_applied"] = sorted(
        set(known.get("ambiguous", [])) | set(known.get("changed_during_day", []))
    )
    if known.get("reason"):  # no flags read: why
        out["reason"] = known["reason"]
    return out


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def simulate_row(row: dict[str, str], timing_model: str) -> dict[str, Any]:
    """One closed-loop run of the row with ``timing_model``; means in milliseconds."""
    expert_parallel = _int(row, "moe_ep_size") > 1  # vLLM --enable-expert-parallel
    built = build_replica(_request(row), timing_model=timing_model, expert_parallel=expert_parallel)
    c, isl, osl = int(row["batch_size"]), int(row["isl"]), int(row["osl"])
    num = max(REQUESTS_PER_SLOT * c, MIN_REQUESTS)
    kind = client(row)
    spec = workload_from_dict(
        {
            "num_requests": num,
            "arrivals": {"kind": "closed", "concurrency": c},
            "input_tokens": _lengths(isl, kind),
            "output_tokens": _lengths(osl, kind),
        }
    )
    import numpy as np

    requests = generate(spec, np.random.default_rng(0))
    # attention data parallel: the row's engines (vLLM --data-parallel-size), the client's
    # concurrency shared by them as vLLM's API server routes (fewest requests in flight); a MoE
    # model's engines step in lockstep, as `kvbudget sim --data-parallel-size` runs them
    dp = _int(row, "attention_dp_size")
    cluster = ClusterSpec(
        setups=[built.setup] * dp,
        concurrency=c,
        router="least_outstanding",
        lockstep_size=dp if dp > 1 and is_moe(built) else 1,
    )
    started = time.process_time()
    result = simulate(requests, cluster, seed=0)
    cpu_s = time.process_time() - started
    done = [r for r in result.requests if r.first_token_s is not None and r.finish_s is not None]
    ttft = [(r.first_token_s - r.arrival_s) * 1e3 for r in done]  # type: ignore[operator]
    tpot = [
        (r.finish_s - r.first_token_s) / (r.output_tokens - 1) * 1e3  # type: ignore[operator]
        for r in done
        if r.output_tokens > 1
    ]
    pool_tokens = built.config.num_gpu_blocks * built.config.block_size
    return {
        "timing_model": built.timing_name,
        "mean_ttft_ms": _mean(ttft),
        "mean_tpot_ms": _mean(tpot),
        "num_requests": num,
        "num_completed": len(done),
        "num_preemptions": sum(r.preemptions for r in result.requests),
        "pool_tokens": pool_tokens,
        "max_num_seqs": built.config.max_num_seqs,
        "max_num_batched_tokens": built.config.max_num_batched_tokens,
        "expert_parallel": expert_parallel,
        "sim_cpu_s": round(cpu_s, 3),
    }


def aic_static(row: dict[str, str]) -> dict[str, Any]:
    """aiconfigurator-core's own static estimate of the row (its quant modes and layout)."""
    from kvbudget.sim.aic import MeasuredCase, compile_measured

    model_id = row["model_path"]
    resolved = resolve_model(_model_ref(model_id))
    raw = resolved.source.raw if resolved.source is not None else {}
    case = MeasuredCase(
        model_id=model_id,
        config=raw,
        gpu=SYSTEMS[row["system"]],
        tp=_int(row, "tp_size"),
        gemm_quant_mode=row["gemm_quant_mode"] or None,
        moe_quant_mode=row["moe_quant_mode"] or None,
        moe_tp=_int(row, "moe_tp_size") or None,
        moe_ep=_int(row, "moe_ep_size") or None,
        attention_dp=_int(row, "attention_dp_size"),
    )
    timing = compile_measured(case, Path.home() / ".cache" / "kvbudget" / "aic-configs")
    c, isl, osl = int(row["batch_size"]), int(row["isl"]), int(row["osl"])
    engine: Any = timing.engine
    ctx_ms, gen_ms, _total = engine.run_static(batch_size=c, isl=isl, osl=osl)
    return {"mean_ttft_ms": ctx_ms, "mean_tpot_ms": gen_ms / max(osl - 1, 1)}


def run_row(row: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {
        "id": row["id"],
        "model": row["model_path"],
        "system": row["system"],
        "engine_version": row["backend_version"],
        "precision": row["precision"] or "bf16",
        "tp": _int(row, "tp_size"),
        "concurrency": int(row["batch_size"]),
        "isl": int(row["isl"]),
        "osl": int(row["osl"]),
        "client": client(row),
        "server": _server_record(row),
        "measured": {
            "mean_ttft_ms": float(row["silicon_ttft_ms"]),
            "mean_tpot_ms": float(row["silicon_tpot_ms"]),
        },
    }
    reason = not_simulable(row)
    if reason is not None:
        out["status"] = "not-simulated"
        out["reason"] = reason
        return out
    for key, model in (("kvbudget_measured", "measured"), ("kvbudget_roofline", "roofline")):
        try:
            out[key] = simulate_row(row, model)
        except KvbudgetError as exc:
            out[key] = {"error": exc.one_line()}
        except Exception as exc:  # an estimator miss at some step shape: kept, not hidden
            out[key] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    try:
        out["aic_static"] = aic_static(row)
    except Exception as exc:  # its estimator raises ValueError and its own errors
        out["aic_static"] = {"error": " ".join(str(exc).split())[:300]}
    sim = out["kvbudget_measured"]
    if "error" in sim and "error" in out["kvbudget_roofline"]:
        out["status"] = "not-simulated"
        out["reason"] = sim["error"]
        return out
    ok = sim if "error" not in sim else out["kvbudget_roofline"]
    out["data_parallel_size"] = _int(row, "attention_dp_size")
    out["regime"] = regime(
        out["concurrency"], out["isl"] + out["osl"], out["data_parallel_size"], ok["pool_tokens"]
    )
    out["status"] = "simulated"
    return out


def regime(concurrency: int, request_tokens: int, data_parallel_size: int, pool_tokens: int) -> str:
    """``kv-limited`` when one engine's share of the clients, each at the longest lengths drawn
    (``request_tokens``), does not fit that engine's pool, else ``below-knee``. With attention
    data parallel each of the dp engines has its own pool and vLLM's router spreads the clients
    evenly (fewest requests in flight), so an engine holds at most ``ceil(C / dp)`` of them."""
    share = -(-concurrency // data_parallel_size)
    return "kv-limited" if share * request_tokens > pool_tokens else "below-knee"


def _git_commit() -> str:
    """HEAD's short hash, with ``+dirty`` when the tree has uncommitted changes."""
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=False
        ).stdout.strip()

    head = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = git(
        "status", "--porcelain", "--untracked-files=no", "--", "src", "bench", ":!bench/results"
    )
    return head + ("+dirty" if dirty else "")


def _write(
    out: Path, results: list[dict[str, Any]], started: float, complete: bool, commit: str
) -> None:
    from kvbudget.sim.aic import AIC_VERSION
    from kvbudget.sim.native import build_label

    data = {
        "what": "mean TTFT / mean TPOT of real vLLM runs (aiconfigurator-core 0.12.0 "
        "systems/silicon_sample.csv, vLLM agg rows) against kvbudget sim (measured and "
        "roofline timing, closed loop at the row's concurrency) and aiconfigurator-core's "
        "static estimate; the rows are a validation set, nothing is fitted to them",
        "aiconfigurator_core": AIC_VERSION,
        "commit": commit,
        "complete": complete,
        "requests_per_slot": REQUESTS_PER_SLOT,
        "min_requests": MIN_REQUESTS,
        "clients": CLIENTS,
        "host": platform.node() or "unknown",
        "cpu_count": os.cpu_count(),
        "simulator_build": build_label(),
        "load_average": list(os.getloadavg()),
        "wall_s": round(time.time() - started, 1),
        "rows": results,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(data, indent=1, allow_nan=False) + "\n", encoding="utf-8")


def combine(parts: list[Path], out: Path) -> int:
    """One result file from runs that each did part of the rows (the same tables and code)."""
    docs = [json.loads(p.read_text(encoding="utf-8")) for p in parts]
    seen: set[str] = set()
    rows = []
    for doc in docs:
        for row in doc["rows"]:
            if row["id"] not in seen:
                seen.add(row["id"])
                rows.append({**row, "commit": row.get("commit", doc["commit"])})
    every = silicon_rows()
    wanted = [r["id"] for r in every]
    head = {k: v for k, v in docs[0].items() if k != "rows"}
    head["complete"] = seen == set(wanted) and all(r.get("status") != "not-run" for r in rows)
    for row in every:  # what no part reached is in the file too, said so
        if row["id"] not in seen:
            rows.append(
                {
                    "id": row["id"],
                    "model": row["model_path"],
                    "system": row["system"],
                    "status": "not-run",
                    "reason": "not reached: the benchmark's parts stopped before this row",
                }
            )
    order = {rid: i for i, rid in enumerate(wanted)}
    rows.sort(key=lambda r: order[r["id"]])
    head["commit"] = "+".join(dict.fromkeys(str(d["commit"]) for d in docs))
    head["wall_s"] = max(d["wall_s"] for d in docs)
    head["load_average"] = max((d["load_average"] for d in docs), key=lambda x: x[0])
    head["parts"] = [
        {**{k: v for k, v in d.items() if k != "rows"}, "num_rows": len(d["rows"]),
         "first_row": d["rows"][0]["id"] if d["rows"] else None}
        for d in docs
    ]  # fmt: skip
    out.write_text(json.dumps({**head, "rows": rows}, indent=1) + "\n", encoding="utf-8")
    print(f"{len(rows)} rows ({'complete' if head['complete'] else 'incomplete'}) -> {out}")
    return 0 if head["complete"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, help="only the first N rows")
    ap.add_argument("--ids", help="only these row ids (comma-separated)")
    ap.add_argument("--start", type=int, default=0, help="skip the first N rows (a second process)")
    ap.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        help="write --out from these partial files instead of running (rows in file order, "
        "the first file's row wins; each file's own fields kept under 'parts')",
    )
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.combine:
        return combine(args.combine, args.out)
    from kvbudget.sim.aic import AIC_VERSION, installed_version

    if installed_version() != AIC_VERSION:
        print(f"needs aiconfigurator-core {AIC_VERSION}: pip install -e '.[gpu-data]'")
        return 2
    rows = silicon_rows()
    if args.ids:
        wanted = set(args.ids.split(","))
        rows = [r for r in rows if r["id"] in wanted]
    rows = rows[args.start :][: args.limit]
    started = time.time()
    commit = _git_commit()  # the tree the run starts from
    results: list[dict[str, Any]] = []
    for i, row in enumerate(rows):
        results.append(run_row(row))
        if (i + 1) % 50 == 0:  # a partial file to look at while it runs
            _write(args.out, results, started, complete=False, commit=commit)
            print(f"{i + 1}/{len(rows)} rows, {time.time() - started:.0f} s", file=sys.stderr)
    _write(args.out, results, started, complete=True, commit=commit)
    simulated = sum(1 for r in results if r["status"] == "simulated")
    print(f"{simulated} of {len(results)} rows simulated -> {args.out}")
    return 0 if simulated else 1


if __name__ == "__main__":
    raise SystemExit(main())
