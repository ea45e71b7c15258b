#!/usr/bin/env python3
"""Measure a real engine: llama.cpp `llama-server` on this CPU, with the tiny random model.

What it records (all ``measured``; engine, version and hardware in the output):

* prompt cache: TTFT of a long prompt sent cold, then again warm (served from llama.cpp's prompt
  cache), for a few different prompts; the server's own ``prompt_ms`` alongside the client's TTFT;
* throughput: ``kvbudget bench`` (closed loop) at a few concurrencies against the same server:
  requests/s, output tokens/s, TTFT/TPOT/ITL percentiles, and the ``llamacpp:*`` counters.

Usage::

    .venv/bin/python bench/llamacpp_measure.py [--out bench/results/llamacpp.json] [--update-docs]

``--update-docs`` rewrites the "llama.cpp (measured)" section of docs/benchmarks.md (between the
``<!-- llamacpp:begin -->`` / ``<!-- llamacpp:end -->`` markers). Needs the cached binary
(`bash scripts/llama-server.sh`). Wall-clock figures on a shared 2-core machine are noisy; the
robust result is the ratio (warm TTFT / cold TTFT) and the counters.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs" / "benchmarks.md"
BEGIN, END = "<!-- llamacpp:begin -->", "<!-- llamacpp:end -->"
SERVER_ARGS = ["-c", "8192", "-np", "4", "-t", "2", "-ctk", "f16", "-ctv", "f16"]


def _launcher() -> ModuleType:
    name = "kvbudget_bench_llamacpp_server"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).with_name("llamacpp_server.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


LAUNCHER = _launcher()


def hardware() -> str:
    model = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f", {kb / 1024 / 1024:.0f} GiB RAM"
    except (OSError, ValueError, IndexError):
        pass
    load = os.getloadavg()[0]
    return (
        f"{model}, {os.cpu_count()} vCPU{mem}, {platform.system()} (load avg {load:.1f} at start)"
    )


def stream_ttft(server: Any, prompt: list[int]) -> dict[str, Any]:
    out = LAUNCHER.stream_completion(server.port, prompt, timeout_s=600.0)
    usage, timings = out["usage"], out["timings"]
    return {
        "ttft_s": out["ttft_s"],
        "prompt_tokens": usage.get("prompt_tokens"),
        "cached_tokens": (usage.get("prompt_tokens_details") or {}).get("cached_tokens"),
        "prompt_ms": timings.get("prompt_ms"),
        "prompt_n": timings.get("prompt_n"),
    }


def measure_prefix(server: Any, num_prompts: int, prompt_tokens: int) -> dict[str, Any]:
    pairs = []
    for i in range(num_prompts):
        prompt = LAUNCHER.random_token_ids(100 + i, prompt_tokens)
        cold = stream_ttft(server, prompt)
        warm = stream_ttft(server, prompt)
        pairs.append(
            {"cold": cold, "warm": warm, "warm_over_cold": warm["ttft_s"] / cold["ttft_s"]}
        )
    ratios = [p["warm_over_cold"] for p in pairs]
    return {
        "prompt_tokens": prompt_tokens,
        "pairs": pairs,
        "ttft_cold_median_s": statistics.median(p["cold"]["ttft_s"] for p in pairs),
        "ttft_warm_median_s": statistics.median(p["warm"]["ttft_s"] for p in pairs),
        "warm_over_cold_median": statistics.median(ratios),
    }


def run_kvbudget_bench(
    server: Any, concurrency: int, num_requests: int, out_dir: Path, seed: int
) -> dict[str, Any]:
    """`kvbudget bench` (closed loop) against the server; its --json document."""
    kvbudget = Path(sys.executable).with_name("kvbudget")
    cmd = [
        str(kvbudget),
        "bench",
        "--base-url",
        server.base_url,
        "--model",
        "tiny-llama",
        "--metrics-url",
        server.base_url + "/metrics",
        "--concurrency",
        str(concurrency),
        "--num-requests",
        str(num_requests),
        "--prompt-tokens",
        "128",
        "--output-tokens",
        "32",
        "--seed",
        str(seed),
        "--out",
        str(out_dir),
        "--json",
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"kvbudget bench failed ({done.returncode}): {done.stderr[-1500:]}")
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def pick(doc: dict[str, Any], key: str) -> Any:
    """A summary figure wherever the bench document keeps it (top level or under summary)."""
    if key in doc:
        return doc[key]
    return (doc.get("summary") or {}).get(key)


def engine_prompt(doc: dict[str, Any]) -> str:
    """Prompt tokens as the engine counted them over the run, and how many came from its cache."""
    sm = doc.get("server_metrics") or {}
    evaluated = (sm.get("prompt_tokens") or {}).get("delta")
    cached = (sm.get("prefix_cache_hits_tokens") or {}).get("delta")
    if evaluated is None or cached is None:
        return "n/a"
    return f"{evaluated + cached:.0f} ({cached:.0f})"


def render_markdown(result: dict[str, Any]) -> str:
    p = result["prefix_cache"]
    lines = [
        "## llama.cpp (measured)",
        "",
        f"Measured by `bench/llamacpp_measure.py` on {result['created']}. Engine: llama.cpp "
        f"`llama-server` {result['engine_version']} (built from the llama-cpp-python "
        f"{result['llamacpp_python']} sdist by `scripts/llama-server.sh`, CPU only). Hardware: "
        f"{result['hardware']}. Model: the tiny random-weight GGUF of `scripts/tiny_gguf.py` "
        "(llama, 4 layers, GQA 8/2 heads, head_dim 32, Llama-3 tokenizer, f16 weights). "
        f"Server flags: `{' '.join(result['server_args'])}`. Every figure below is **measured**; "
        "the machine is shared, so absolute times are noisy (x2-3) and the ratios are what carries.",
        "",
        f"### Prompt cache: TTFT of a {p['prompt_tokens']}-token prompt, cold vs repeated",
        "",
        "| prompt | TTFT cold (s) | TTFT warm (s) | warm/cold | server prompt_ms cold -> warm | prompt tokens evaluated cold -> warm | cached tokens (warm) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, pair in enumerate(p["pairs"]):
        c, w = pair["cold"], pair["warm"]
        lines.append(
            f"| {i + 1} | {c['ttft_s']:.3f} | {w['ttft_s']:.3f} | {pair['warm_over_cold']:.3f} | "
            f"{c['prompt_ms']:.1f} -> {w['prompt_ms']:.1f} | {c['prompt_n']} -> {w['prompt_n']} | "
            f"{w['cached_tokens']} |"
        )
    lines += [
        "",
        f"Median warm/cold TTFT ratio: **{p['warm_over_cold_median']:.3f}** (the warm request "
        "evaluates one prompt token instead of all of them).",
    ]
    if all((pair["warm"]["prompt_n"] or 0) <= 2 for pair in p["pairs"]):
        lines += [
            "",
            "Every warm request evaluated at most 2 prompt tokens, so a warm TTFT well above the "
            "others is not prompt evaluation; whether it is the shared CPU or llama.cpp moving "
            "the slot's state (its RAM prompt cache) was not isolated here.",
        ]
    lines += [
        "",
        "### Throughput with `kvbudget bench` (closed loop, 128 prompt + 32 output tokens)",
        "",
        "Prompt lengths are kvbudget's synthetic tokenizer's; the last column is what llama.cpp "
        "counted (its Llama-3 BPE splits the synthetic words into more tokens) and how many of them "
        "it served from its prompt cache. Each level sends different prompts (its own seed).",
        "",
        "| concurrency | requests ok/total | requests/s | output tokens/s | TTFT p50 (s) | TTFT p99 (s) | TPOT p50 (s) | ITL p99 (s) | engine prompt tokens (from cache) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def fmt(v: Any) -> str:
        return "n/a" if v is None else f"{v:.3f}" if isinstance(v, float) else str(v)

    for row in result["throughput"]:
        d = row["bench"]
        lines.append(
            f"| {row['concurrency']} | {fmt(pick(d, 'requests_ok'))}/{fmt(pick(d, 'requests_total'))} | "
            f"{fmt(pick(d, 'requests_per_s'))} | {fmt(pick(d, 'output_tokens_per_s'))} | "
            f"{fmt(pick(d, 'ttft_p50_s'))} | {fmt(pick(d, 'ttft_p99_s'))} | "
            f"{fmt(pick(d, 'tpot_p50_s'))} | {fmt(pick(d, 'itl_p99_s'))} | {engine_prompt(d)} |"
        )
    end_load = result.get("load_avg_at_end")
    if end_load is not None:
        lines += [
            "",
            f"Load average when the run ended: {end_load:.1f} (2 vCPUs shared with other work).",
        ]
    lines += ["", f"Raw results: `{result['results_file']}`.", ""]
    return "\n".join(lines)


def update_docs(markdown: str) -> None:
    text = DOCS.read_text() if DOCS.is_file() else "# Benchmarks\n"
    block = f"{BEGIN}\n{markdown}\n{END}"
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        _, tail = rest.split(END, 1)
        text = head + block + tail
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    DOCS.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Measure llama.cpp llama-server on this CPU.")
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT / "bench" / "results" / "llamacpp.json"
    )
    parser.add_argument(
        "--update-docs", action="store_true", help="rewrite docs/benchmarks.md section"
    )
    parser.add_argument("--prompts", type=int, default=3, help="cold/warm prompt pairs (default 3)")
    parser.add_argument("--prompt-tokens", type=int, default=1024)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--requests", type=int, default=16, help="requests per concurrency level")
    parser.add_argument(
        "--from-json", type=Path, default=None, help="render an earlier result file (no new run)"
    )
    args = parser.parse_args(argv)
    if args.from_json is not None:
        markdown = render_markdown(json.loads(args.from_json.read_text()))
        print(markdown)
        if args.update_docs:
            update_docs(markdown)
        return 0

    launcher = LAUNCHER
    try:
        build = launcher.find_llamacpp()
    except launcher.NotBuiltError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    result: dict[str, Any] = {
        "kind": "llamacpp-measure",
        "source": "measured",
        "created": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "engine": "llama.cpp llama-server",
        "engine_version": build.version,
        "llamacpp_python": launcher.LLAMACPP_PY_VERSION,
        "hardware": hardware(),
        "server_args": SERVER_ARGS,
        "results_file": str(
            args.out.relative_to(REPO_ROOT) if args.out.is_relative_to(REPO_ROOT) else args.out
        ),
    }
    with tempfile.TemporaryDirectory(prefix="kvbudget-llamacpp-") as tmp:
        server = launcher.start_server(
            build, build.model("llama"), Path(tmp) / "server.log", SERVER_ARGS
        )
        try:
            result["prefix_cache"] = measure_prefix(server, args.prompts, args.prompt_tokens)
            result["throughput"] = [
                {
                    "concurrency": c,
                    # a different seed per level: other prompts, so no level is served from
                    # the prompt cache an earlier level filled
                    "bench": run_kvbudget_bench(
                        server, c, args.requests, Path(tmp) / f"bench-c{c}", seed=1000 + c
                    ),
                }
                for c in args.concurrency
            ]
            result["metrics_after"] = server.metrics()
            result["load_avg_at_end"] = os.getloadavg()[0]
        finally:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    markdown = render_markdown(result)
    print(markdown)
    if args.update_docs:
        update_docs(markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
