"""How much faster vLLM 0.24.0's measured MoE kernels are than vLLM 0.19.0's, on the same GPU.

aiconfigurator-core 0.12.0 prices every vLLM step on H100, H200 and B200 with its vLLM 0.24.0
kernel tables, while the silicon rows ran vLLM 0.10-0.19. On H200 and B200 the wheel also ships
MoE tables measured with vLLM 0.19.0 (``systems/data/<gpu>/moe/vllm/0.19.0/moe_perf.parquet``),
so the gap can be read from NVIDIA's own measurements, with no silicon row involved: for each
MoE shape of the rows' models (gpt-oss-120b, MiniMax-M2.5, Kimi-K2.5, Qwen3-235B), the same
dtype, expert split, token-routing distribution and token count in both tables, this writes the
ratio ``latency(0.19.0) / latency(0.24.0)`` (above 1: 0.24.0's kernel is faster), split into
decode-sized (at most 256 tokens a step) and prefill-sized (at least 1,024) batches.

It explains; it changes no model and fits nothing (the silicon rows are not read).

    python bench/aic_version_gap.py     # -> bench/results/aic_version_gap.json
    python scripts/render_accuracy.py   # docs/accuracy.md's table from it
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from importlib import resources
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "results" / "aic_version_gap.json"
OLD, NEW = "0.19.0", "0.24.0"
#: the MoE layers of the silicon rows' MoE models (their config.json): hidden size, expert
#: intermediate size, experts, experts per token, and the tables' dtype name for each checkpoint
SHAPES = {
    "openai/gpt-oss-120b": (2880, 2880, 128, 4, "w4a16_mxfp4"),
    "MiniMaxAI/MiniMax-M2.5": (3072, 1536, 256, 8, "fp8_block"),
    "moonshotai/Kimi-K2.5": (7168, 2048, 384, 8, "int4_wo"),
    "Qwen/Qwen3-235B-A22B-FP8": (4096, 1536, 128, 8, "fp8_block"),
}
KEYS = ["moe_dtype", "hidden_size", "inter_size", "num_experts", "topk"]
KEYS += ["moe_tp_size", "moe_ep_size", "distribution", "num_tokens"]
DECODE_MAX_TOKENS = 256
PREFILL_MIN_TOKENS = 1024


def _table(system: str, version: str) -> Any:
    import pandas as pd

    root = Path(str(resources.files("aiconfigurator_core"))) / "systems" / "data"
    return pd.read_parquet(root / system / "moe" / "vllm" / version / "moe_perf.parquet")


def _quantiles(values: list[float]) -> dict[str, float]:
    """Median, p10 and p90, each interpolated between the two nearest ranks (position ``(n - 1)
    q``), as docs/accuracy.md's other tables compute them (``render_accuracy._quantile``)."""
    if len(values) == 1:
        return {
            "median": round(values[0], 3),
            "p10": round(values[0], 3),
            "p90": round(values[0], 3),
        }
    deciles = statistics.quantiles(values, n=10, method="inclusive")
    return {
        "median": round(statistics.median(values), 3),
        "p10": round(deciles[0], 3),
        "p90": round(deciles[8], 3),
    }


def gap(system: str) -> list[dict[str, Any]]:
    """One entry per model shape that both tables measured on ``system``."""
    old, new = _table(system, OLD), _table(system, NEW)
    # one latency per key: the fastest kernel a table holds for it (vLLM picks one backend)
    old = old.groupby(KEYS, as_index=False)["latency"].min()
    new = new.groupby(KEYS, as_index=False)["latency"].min()
    both = old.merge(new, on=KEYS, suffixes=("_old", "_new"))
    out = []
    for model, (hidden, inter, experts, topk, dtype) in SHAPES.items():
        rows = both[
            (both.moe_dtype == dtype)
            & (both.hidden_size == hidden)
            & (both.inter_size == inter)
            & (both.num_experts == experts)
            & (both.topk == topk)
        ]
        if rows.empty:
            continue
        ratio = (rows.latency_old / rows.latency_new).tolist()
        tokens = rows.num_tokens.tolist()
        entry: dict[str, Any] = {"model": model, "system": system, "moe_dtype": dtype}
        entry["num_points"] = len(ratio)
        for name, keep in (
            ("decode", [r for r, t in zip(ratio, tokens, strict=True) if t <= DECODE_MAX_TOKENS]),
            ("prefill", [r for r, t in zip(ratio, tokens, strict=True) if t >= PREFILL_MIN_TOKENS]),
        ):
            entry[name] = {"num_points": len(keep), **(_quantiles(keep) if keep else {})}
        out.append(entry)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from kvbudget.sim.aic import AIC_VERSION, installed_version

    if installed_version() != AIC_VERSION:
        print(f"needs aiconfigurator-core {AIC_VERSION}: pip install -e '.[gpu-data]'")
        return 2
    rows = [entry for system in ("h200_sxm", "b200_sxm") for entry in gap(system)]
    doc = {
        "what": f"latency of aiconfigurator-core {AIC_VERSION}'s vLLM {OLD} MoE kernel tables over "
        f"its vLLM {NEW} ones, same GPU and shape (measured by NVIDIA on silicon; the fastest "
        "kernel of each table per shape; no silicon_sample row read)",
        "aiconfigurator_core": AIC_VERSION,
        "decode_max_tokens": DECODE_MAX_TOKENS,
        "prefill_min_tokens": PREFILL_MIN_TOKENS,
        "rows": rows,
    }
    args.out.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    print(f"{len(rows)} model shapes -> {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
