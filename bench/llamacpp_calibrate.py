"""Predicted vs measured on llama.cpp: ``kvbudget calibrate --validate`` against a live server.

Starts the cached ``llama-server`` (``scripts/llama-server.sh``) on the tiny random GGUF of the
test suite with the flags of ``tests/integration/llamacpp/test_llamacpp_calibrate.py`` (4 slots of
2048 cells, one thread), runs ``kvbudget calibrate --validate`` (llama.cpp's own per-request
``timings``; predictions on the llama.cpp slot engine) and writes the raw result with the same
fields as ``bench/vllm_calibrate.py`` (whose ``run`` it uses). Usage::

    .venv/bin/python bench/llamacpp_calibrate.py --out bench/results/llamacpp_calibrate.json
    .venv/bin/python scripts/render_benchmarks.py   # rewrite the table in docs/benchmarks.md
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/ is not a package
import llamacpp_server as launcher
import vllm_calibrate as shared

SERVER_ARGS = launcher.CALIBRATE_SERVER_ARGS


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output-tokens", type=int, default=32)
    args = parser.parse_args()
    llamacpp = launcher.find_llamacpp()
    with tempfile.TemporaryDirectory() as tmp:
        server = launcher.start_server(
            llamacpp, llamacpp.model("llama"), Path(tmp) / "llama.log", SERVER_ARGS
        )
        try:
            raw = shared.run(
                server.base_url,
                "tiny-llama",  # the --alias the launcher starts the server with
                args.repeats,
                args.output_tokens,
                Path(tmp),
                engine_flags=SERVER_ARGS,
                metrics=False,
                label=(
                    f"measured (llama.cpp {llamacpp.version}, CPU, this host); predicted: "
                    "simulated (calibrated step-time model, llama.cpp slot engine)"
                ),
                kind="kvbudget.bench.llamacpp-calibrate",
            )
        finally:
            server.stop()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(raw, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
