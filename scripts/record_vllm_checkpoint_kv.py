"""Record what vLLM's CPU engine does with ``--kv-cache-dtype auto`` on a ModelOpt checkpoint
whose ``hf_quant_config.json`` says ``kv_cache_quant_algo: FP8`` (the oracle of
``tests/peer/test_vllm_checkpoint_kv_oracle.py``).

Run with the Python of a vLLM CPU venv, under the vLLM lock::

    flock /tmp/vllm.lock VENV/bin/python scripts/record_vllm_checkpoint_kv.py \
        --out tests/peer/fixtures/vllm_checkpoint_kv_0.32.0.json

Two tiny Llama checkpoints (4 layers, 8 query / 2 KV heads of 32, bfloat16; no weights:
``load_format="dummy"``), each a ``config.json`` without ``quantization_config`` and an
``hf_quant_config.json`` from ModelOpt with ``quant_algo`` FP8 and ``kv_cache_quant_algo`` FP8:

* ``fp8_weights``: only ``lm_head`` excluded, as NVIDIA's exports;
* ``kv_only``: every linear layer excluded as well (``*proj*``), so the weights stay bfloat16
  and only the KV cache is quantized.

Each is started in a fresh process as ``vllm.LLM(model=DIR, load_format="dummy",
skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16", max_model_len=4096)`` with
``VLLM_CPU_KVCACHE_SPACE=1`` and no ``kv_cache_dtype`` (vLLM's default ``auto``). Stored: the
engine's "Using ... data type to store kv cache" line, its ``CPU KV cache size`` line, the final
``cache_config`` (``cache_dtype``, ``num_gpu_blocks``, ``block_size``), or the root-cause error.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 4,
    "vocab_size": 1024,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}


def _quant(exclude: list[str]) -> dict[str, Any]:
    return {
        "producer": {"name": "modelopt", "version": "0.23.0"},
        "quantization": {
            "quant_algo": "FP8",
            "kv_cache_quant_algo": "FP8",
            "exclude_modules": exclude,
        },
    }


CASES: dict[str, dict[str, Any]] = {
    "fp8_weights": _quant(["lm_head"]),
    "kv_only": _quant(["lm_head", "*proj*"]),
}

CHILD = """
import sys
from vllm import LLM
if __name__ == "__main__":
    llm = LLM(model=sys.argv[1], skip_tokenizer_init=True, load_format="dummy",
              enforce_eager=True, dtype="bfloat16", max_model_len=4096)
    cc = llm.llm_engine.vllm_config.cache_config
    print("RESULT", cc.cache_dtype, cc.num_gpu_blocks, cc.block_size, flush=True)
"""

_USING = re.compile(r"Using (\S+) data type to store kv cache")
_POOL = re.compile(
    r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
    r"request: ([\d.]+)x"
)
_RESULT = re.compile(r"^RESULT (\S+) (\d+) (\d+)$", re.M)
_ERROR = re.compile(r"^.*?(\w+Error: .*)$", re.M)


def record(name: str, quant: dict[str, Any]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(tmp) / name
        model.mkdir()
        (model / "config.json").write_text(json.dumps(CONFIG), "utf-8")
        (model / "hf_quant_config.json").write_text(json.dumps(quant), "utf-8")
        script = Path(tmp) / "child.py"
        script.write_text(CHILD, "utf-8")
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
        run = subprocess.run(
            [sys.executable, str(script), str(model)],
            capture_output=True,
            text=True,
            env=env,
            timeout=900,
            check=False,
        )
    log = run.stdout + run.stderr
    out: dict[str, Any] = {"config": CONFIG, "hf_quant_config": quant, "kv_cache_space_gib": 1}
    using = _USING.search(log)
    out["kv_cache_dtype_line"] = using.group(0) if using else None
    pool = _POOL.search(log)
    result = _RESULT.search(log)
    if pool and result:
        out["kv_cache_tokens"] = int(pool.group(1).replace(",", ""))
        out["max_model_len"] = int(pool.group(2).replace(",", ""))
        out["max_concurrency"] = float(pool.group(3))
        out["engine_final"] = {
            "cache_dtype": result.group(1),
            "num_gpu_blocks": int(result.group(2)),
            "block_size": int(result.group(3)),
        }
    else:
        errors = [m.group(1) for m in _ERROR.finditer(log)]
        root = next((e for e in errors if "static_scaled_fp8_quant" in e), None)
        out["error"] = root or (errors[0] if errors else f"exit {run.returncode}")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import vllm

    data = {
        "vllm_version": vllm.__version__,
        "recorded_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cases": {name: record(name, quant) for name, quant in CASES.items()},
    }
    args.out.write_text(json.dumps(data, indent=1) + "\n", "utf-8")


if __name__ == "__main__":
    main()
