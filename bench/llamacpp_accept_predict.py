"""Predicted vs measured on llama.cpp: calibrate, then `kvbudget accept` with the profile.

Starts `llama-server` (tiny random model, CPU, ``-c 8192 -np 4 -t 1``), runs
``kvbudget calibrate`` against it (profile written), then the nine-cell acceptance plan of
``tests/integration/llamacpp/test_llamacpp_accept.py`` with ``target.profile`` set, and prints
the prediction table (measured figures: llama.cpp on this CPU; predicted: the slot engine with
the calibrated profile). Usage::

    .venv/bin/python bench/llamacpp_accept_predict.py --out /tmp/accept-predict

Results go to ``OUT/`` (profile.json, plan.yaml, accept/report.{json,md}, table.txt).
"""

from __future__ import annotations

import argparse
import importlib
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))  # bench/ is not a package
import llamacpp_server as launcher  # noqa: E402

SERVER_ARGS = launcher.CALIBRATE_SERVER_ARGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    sys.path.insert(0, str(REPO))  # the test module below imports tests.integration.engines
    plans = importlib.import_module("tests.integration.llamacpp.test_llamacpp_accept")
    llamacpp = launcher.find_llamacpp()
    model = llamacpp.model("llama")
    server = launcher.start_server(llamacpp, model, out / "llama-server.log", SERVER_ARGS)
    try:
        server.args = SERVER_ARGS
        profile = out / "profile.json"
        cal = [sys.executable, "-m", "kvbudget", "calibrate", "--base-url", server.base_url]
        cal += ["--model", str(model), "--engine-flags", " ".join(SERVER_ARGS)]
        cal += ["--out", str(profile)]
        subprocess.run(cal, check=True, timeout=900)
        plan = plans.small_plan(server, model.with_suffix(".config.json"))
        plan["target"]["profile"] = str(profile)
        plan_path = out / "plan.yaml"
        plan_path.write_text(yaml.safe_dump(plan, sort_keys=False))
        acc = [sys.executable, "-m", "kvbudget", "accept", str(plan_path)]
        subprocess.run([*acc, "--out", str(out / "accept"), "--quiet"], check=True, timeout=900)
    finally:
        server.stop()
    report = json.loads((out / "accept" / "report.json").read_text())
    lines = [
        f"engine: {report['provenance'].get('engine')} {report['provenance'].get('engine_version')}"
    ]
    for cell in report["cells"]:
        pred = cell.get("prediction") or {}
        if not pred:
            continue
        if len(lines) == 1:
            lines.append(f"prediction: {pred['model']}")
        q = pred["quantities"]
        row = [cell["cell_id"]]
        for key in ("ttft_p50_s", "tpot_p50_s", "ttft_p95_s", "tpot_p95_s", "peak_kv_usage"):
            err = q[key]["relative_error"]
            row.append(
                f"{key} {q[key]['measured']!s:.6} -> {q[key]['predicted']!s:.6} "
                f"({'n/a' if err is None else f'{err:+.0%}'})"
            )
        lines.append(" | ".join(row))
    text = "\n".join(lines)
    (out / "table.txt").write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
