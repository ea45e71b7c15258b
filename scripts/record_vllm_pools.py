"""Record vLLM's own KV-cache pool for tiny configs of each architecture (the ``vllm`` oracle).

Run with the Python of a vLLM CPU venv (issue 13's ``scripts/vllm-cpu.sh`` builds one under
``~/.cache/kvbudget/vllm-cpu/<version>/``)::

    VENV/bin/python scripts/record_vllm_pools.py --out tests/peer/fixtures/vllm_pools_0.32.0.json \
        [--only llama_gqa,qwen3_next] [--registry tests/peer/fixtures/vllm_0.32.0_architectures.json]

For every case a tiny config is built from transformers' own config class
(``tests/peer/tiny_configs.py``), or, for the ``CHECKPOINT_CASES`` vLLM reads only in the
checkpoint's own format (DeepSeek-V4), from a published config in kvbudget's catalog with its
sizes shrunk; it is written to a temporary directory and started in a fresh
process as ``vllm.LLM(model=DIR, load_format="dummy", skip_tokenizer_init=True,
enforce_eager=True, dtype="bfloat16", ...)`` with ``VLLM_CPU_KVCACHE_SPACE`` GiB of KV cache.
The log's ``CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: Xx``,
``kv cache group sizes``, the block-size raise / mamba padding lines and the engine's final
``cache_config`` (``num_gpu_blocks``, ``block_size``, mamba dtypes and mode) are stored with
vLLM's and transformers' versions. A case vLLM refuses keeps its root-cause error line (the
worker's exception, not the parent's wrapper) and the traceback leading to it
(``root_cause_context``); ``--logs DIR`` also keeps every case's full engine log. Existing results in
``--out`` are kept; cases are merged in (so the recorder can run in batches).
Cases transformers' causal-LM mapping cannot build (``HAND_BUILT``: MiniMax-M3, served by vLLM from
its own config classes) carry their config.json here, and any import stub their engine run needs.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "peer"))

import tiny_configs  # noqa: E402  (transformers only; loaded from vLLM's venv)

KV_SPACE_GIB = 1

#: name -> (model_type, config overrides on top of the tiny variant, engine kwargs)
CASES: dict[str, tuple[str, dict[str, Any], dict[str, Any]]] = {
    "llama_gqa": ("llama", {}, {}),
    "llama_mqa": ("llama", {"num_key_value_heads": 1}, {}),
    "llama_fp8": ("llama", {}, {"kv_cache_dtype": "fp8"}),
    "llama_override": ("llama", {}, {"num_gpu_blocks_override": 64, "max_model_len": 2048}),
    "llama_block32": ("llama", {}, {"block_size": 32}),
    "mistral_sliding": ("mistral", {"sliding_window": 256}, {}),
    "phi3_sliding": ("phi3", {"sliding_window": 256}, {}),
    # vLLM 0.32 reads config.head_dim (models/glm4_moe.py: head_dim=config.head_dim); GLM-4.5's
    # config.json carries it (128), transformers 5.19's Glm4MoeConfig default has none
    "glm4_moe": ("glm4_moe", {"head_dim": 64}, {}),
    # vLLM 0.32 sizes the short-conv state from config.conv_dim and the blocks from
    # config.block_dim (models/lfm2.py); LFM2's config.json carries both = hidden_size,
    # transformers' Lfm2Config has neither
    "lfm2": ("lfm2", {"conv_dim": 256, "block_dim": 256}, {}),
    "lfm2_moe": ("lfm2_moe", {"conv_dim": 256}, {}),
    # the default Nemotron-H (Nemotron-3 Nano) has non-gated relu2 MoE layers, which vLLM CPU
    # refuses (fused_moe/config.py: is_act_and_mul=False only on CUDA, XPU, ROCm); the dense
    # Nemotron-H layout (mamba, mlp and attention layers) starts
    "nemotron_h_dense": (
        "nemotron_h",
        {"layers_block_type": ["linear_attention", "mlp", "full_attention", "mlp"] * 2},
        {},
    ),
}

#: cases whose config transformers' causal-LM mapping cannot build: name -> (model_type,
#: config.json, engine kwargs, extra PYTHONPATH for the engine). MiniMax-M3: vLLM 0.32 serves it
#: as ``MiniMaxM3SparseForCausalLM`` from its own config classes (model_type ``minimax_m3_vl``
#: with a ``minimax_m3_text`` text_config, ``vllm/transformers_utils/configs/minimax_m3.py``);
#: head_dim and sparse_index_dim 128 (the sparse and indexer backends' only head size),
#: moe_layer_freq all 0 (dense MLPs: vLLM CPU has no unquantized MoE backend for swigluoai, "No
#: Unquantized MoE backend supports the deployment configuration"; the MLP kind does not change
#: the KV cache), and the torchvision import stub its image processor needs
#: (scripts/vllm_cpu_stubs/torchvision).
STUBS = str(ROOT / "scripts" / "vllm_cpu_stubs")


def minimax_m3_config(layers: int, kv_heads: int, sparse: list[int]) -> dict[str, Any]:
    text = {
        "model_type": "minimax_m3_text",
        "vocab_size": 1024,
        "hidden_size": 256,
        "intermediate_size": 128,
        "dense_intermediate_size": 512,
        "shared_intermediate_size": 128,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": kv_heads,
        "head_dim": 128,
        "max_position_embeddings": 4096,
        "rms_norm_eps": 1e-6,
        "rope_theta": 5000000,
        "rotary_dim": 64,
        "partial_rotary_factor": 0.5,
        "hidden_act": "swigluoai",
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "n_shared_experts": 1,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "routed_scaling_factor": 2.0,
        "num_mtp_modules": 1,
        "moe_layer_freq": [0] * layers,
        "sparse_attention_config": {
            "use_sparse_attention": True,
            "sparse_index_dim": 128,
            "sparse_num_index_heads": kv_heads,
            "sparse_topk_blocks": 16,
            "sparse_block_size": 128,
            "sparse_disable_index_value": sparse,
            "sparse_score_type": "max",
            "sparse_init_block": 0,
            "sparse_local_block": 1,
            "sparse_attention_freq": sparse,
        },
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
    }
    return {
        "model_type": "minimax_m3_vl",
        "architectures": ["MiniMaxM3SparseForCausalLM"],
        "text_config": text,
        "torch_dtype": "bfloat16",
    }


HAND_BUILT: dict[str, tuple[str, dict[str, Any], dict[str, Any], str]] = {
    "minimax_m3": ("minimax_m3_vl", minimax_m3_config(4, 2, [0, 1, 1, 1]), {}, STUBS),
    "minimax_m3_fp8": (
        "minimax_m3_vl",
        minimax_m3_config(6, 1, [0, 0, 1, 1, 1, 1]),
        {"kv_cache_dtype": "fp8", "max_model_len": 2048},
        STUBS,
    ),
}

#: cases vLLM reads only in the checkpoint's own config format: name -> (model_type, catalog file
#: under src/kvbudget/spec/catalog/models/, keys dropped, overrides, engine kwargs). DeepSeek-V4:
#: vLLM 0.32 registers its own DeepseekV4Config (transformers_utils/configs/deepseek_v4.py, a plain
#: PreTrainedConfig) and reads config.compress_ratios[layer_id] (models/deepseek_v4/attention.py
#: line 233); transformers' own DeepseekV4Config.to_dict() writes mlp_layer_types = hash_moe / moe,
#: which that plain config's validator refuses ("entries must be in ('sparse', 'dense')")
_DSV4_TINY: dict[str, Any] = {
    "hidden_size": 512,
    "num_attention_heads": 16,
    "moe_intermediate_size": 256,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "q_lora_rank": 256,
    "o_lora_rank": 256,
    "o_groups": 8,
    "vocab_size": 1024,
    "max_position_embeddings": 65536,
    "num_hash_layers": 1,
    "rope_scaling": {
        "beta_fast": 32,
        "beta_slow": 1,
        "factor": 16,
        "original_max_position_embeddings": 4096,
        "type": "yarn",
    },
}
CHECKPOINT_CASES: dict[str, tuple[str, str, tuple[str, ...], dict[str, Any], dict[str, Any]]] = {
    # 6 layers: 2 sliding only, then CSA (ratio 4) / HCA (ratio 128) alternating; the 7th ratio
    # belongs to the MTP layer (built only with --speculative-config)
    "deepseek_v4": (
        "deepseek_v4",
        "deepseek-ai--DeepSeek-V4-Flash.json",
        ("quantization_config", "expert_dtype"),
        {**_DSV4_TINY, "num_hidden_layers": 6, "compress_ratios": [0, 0, 4, 128, 4, 128, 0]},
        {},
    ),
    # another mix: 4 CSA, 2 HCA, 1 sliding-only layer, a 256-token window
    "deepseek_v4_mix": (
        "deepseek_v4",
        "deepseek-ai--DeepSeek-V4-Flash.json",
        ("quantization_config", "expert_dtype"),
        {
            **_DSV4_TINY,
            "num_hidden_layers": 7,
            "compress_ratios": [4, 128, 4, 4, 0, 128, 4, 0],
            "sliding_window": 256,
        },
        {},
    ),
}
CATALOG = ROOT / "src" / "kvbudget" / "spec" / "catalog" / "models"


def inkling_og_format(config: dict[str, Any]) -> dict[str, Any]:
    """transformers' tiny InklingTextConfig rewritten in vLLM's own Inkling format.

    vLLM 0.32 reads Inkling only through its InklingModelConfig (model_type ``inkling_model``,
    ``vllm/models/inkling/configs.py``): transformers' ``inkling_text`` config loads as
    transformers' class, which lacks ``padded_vocab_size`` (AttributeError in the worker).
    ``local_layer_ids`` lists the ``hybrid_sliding`` layers; ``sconv_kernel_size`` is HF's
    ``conv_kernel_size`` (configs.py lines 83-100).
    """
    out = dict(config)
    types = out.pop("layer_types")
    out.pop("mlp_layer_types", None)
    out["local_layer_ids"] = [i for i, t in enumerate(types) if t == "hybrid_sliding"]
    out["model_type"] = "inkling_model"
    out["sconv_kernel_size"] = out.get("conv_kernel_size") or 4
    return out


#: cases whose transformers tiny config vLLM reads only after a rewrite: name -> (model_type of
#: the transformers config, rewrite, engine kwargs). Inkling: tokenizer_mode "hf", since vLLM
#: defaults Inkling to its own renderer, which needs a tokenizer (skip_tokenizer_init refused)
CONVERTED_CASES: dict[str, tuple[str, Any, dict[str, Any], dict[str, Any]]] = {
    "inkling_og_format": ("inkling_text", inkling_og_format, {}, {"tokenizer_mode": "hf"}),
    # another mix: 3 full layers, narrower sliding heads over a 256-token window (the conv pages of
    # both kinds then share one spec after page unification, and groups are padded)
    "inkling_og_format_mix": (
        "inkling_text",
        inkling_og_format,
        {
            "local_layer_ids": [1, 2, 4, 5, 7],
            "swa_num_key_value_heads": 4,
            "swa_head_dim": 64,
            "sliding_window_size": 256,
        },
        {"tokenizer_mode": "hf"},
    ),
}

WORKER = r"""
import json, sys
if __name__ == "__main__":
    args = json.loads(sys.argv[1])
    from vllm import LLM
    llm = LLM(model=args["dir"], load_format="dummy", skip_tokenizer_init=True,
              enforce_eager=True, dtype="bfloat16", **args["engine"])
    cc = llm.llm_engine.vllm_config.cache_config
    out = {k: getattr(cc, k, None) for k in ("num_gpu_blocks", "block_size", "cache_dtype",
           "mamba_cache_mode", "mamba_cache_dtype", "mamba_ssm_cache_dtype",
           "enable_prefix_caching", "kv_cache_size_tokens", "kv_cache_max_concurrency",
           "mamba_page_size_padded")}
    vc = llm.llm_engine.vllm_config
    out["max_model_len"] = vc.model_config.max_model_len
    out["max_num_batched_tokens"] = vc.scheduler_config.max_num_batched_tokens
    out["max_num_seqs"] = vc.scheduler_config.max_num_seqs
    print("KVB_RESULT " + json.dumps(out, default=str), flush=True)
"""

PATTERNS = {
    "pool": re.compile(
        r"(\w+) KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per "
        r"request: ([\d.]+)x"
    ),
    "groups": re.compile(r"kv cache group sizes \(([^)]*)\)"),
    "override": re.compile(r"Overriding num_gpu_blocks=(\d+) with num_gpu_blocks_override=(\d+)"),
    "raise": re.compile(r"Setting attention block size to (\d+) tokens"),
    "padding": re.compile(r"Padding mamba page size by ([\d.]+)%"),
    "ssm_reset": re.compile(r"Reset SSM cache type to (\w+)"),
    "mamba_mode": re.compile(r"Mamba cache mode is set to '(\w+)'"),
}


def all_cases(registry: set[str]) -> dict[str, tuple[str, dict[str, Any], dict[str, Any]]]:
    """The named cases plus one default case per model type transformers and vLLM both serve."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    cases = dict(CASES)
    cases.update({name: (m, {}, {}) for name, (m, _config, _engine, _path) in HAND_BUILT.items()})
    cases.update({name: (c[0], c[3], c[4]) for name, c in CHECKPOINT_CASES.items()})
    cases.update({name: (c[0], c[2], c[3]) for name, c in CONVERTED_CASES.items()})
    for model_type, arch in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items():
        if arch in registry and model_type not in cases:
            cases[model_type] = (model_type, {}, {})
    return cases


def parse_log(text: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, pattern in PATTERNS.items():
        found = pattern.findall(text)
        if not found:
            continue
        last = found[-1]
        if name == "pool":
            device, tokens, length, conc = last
            out.update(
                device=device,
                kv_cache_tokens=int(tokens.replace(",", "")),
                max_model_len_logged=int(length.replace(",", "")),
                max_concurrency=float(conc),
            )
        elif name == "groups":
            out["group_block_sizes"] = [int(x) for x in last.replace(" ", "").split(",") if x]
        elif name == "override":
            out["num_gpu_blocks_before_override"] = int(last[0])
        elif name == "raise":
            out["attention_block_raised_to"] = int(last)
        elif name == "padding":
            out["mamba_padding_pct"] = float(last)
        elif name == "ssm_reset":
            out["ssm_cache_dtype_reset_to"] = last
        elif name == "mamba_mode":
            out["mamba_cache_mode_set"] = last
    lines = [
        line.split("] ", 1)[-1]
        for line in text.splitlines()
        if any(p.search(line) for p in PATTERNS.values())
    ]
    out["log_lines"] = lines
    return out


#: generic wrapper exceptions that only point at the root cause printed before them
WRAPPER_ERRORS = (
    "Engine core initialization failed",
    "WorkerProc initialization failed",
    "For further information visit",
)


#: a worker's line prefix (``(EngineCore_DP0 pid=12) ``) and vLLM's log prefix (``ERROR 12-01 ...] ``)
LINE_PREFIX = re.compile(r"^\s*(\(\w+ pid=\d+\)\s*)?(\w+ \d\d-\d\d [\d:.]+ \[[^\]]*\]\s*)?")


def error_line(text: str) -> str:
    """The engine's own root-cause exception line (``ValueError: ...``), else the last error line.

    Worker processes print the root cause before the parent's wrapper exceptions; their lines
    carry a ``(Name pid=N)`` prefix and often vLLM's ``ERROR date [file:line]`` prefix.
    """
    stripped = [LINE_PREFIX.sub("", line).strip() for line in text.splitlines()]
    raised = [
        line
        for line in stripped
        if re.match(r"^[\w.]*(Error|Exception): \S", line)
        and not any(wrapper in line for wrapper in WRAPPER_ERRORS)
    ]
    if raised:
        return raised[0][:500]
    candidates = [
        line
        for line in stripped
        if re.search(r"(Error|error|not supported|Unsupported|NotImplemented)", line)
        and "Traceback" not in line
    ]
    return candidates[-1][:500] if candidates else text.strip().splitlines()[-1][:500]


def root_cause_context(text: str, line: str, before: int = 25) -> list[str]:
    """The log lines leading to the root-cause line (its traceback), prefixes stripped."""
    stripped = [LINE_PREFIX.sub("", raw).rstrip() for raw in text.splitlines()]
    for index, candidate in enumerate(stripped):
        if candidate.strip()[:500] == line:
            return stripped[max(0, index - before) : index + 1]
    return []


def run_case(
    name: str,
    model_type: str,
    overrides: dict[str, Any],
    engine: dict[str, Any],
    timeout_s: int,
    logs: Path | None = None,
) -> dict[str, Any]:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    extra_path = ""
    if name in HAND_BUILT:
        model_type, config, engine, extra_path = HAND_BUILT[name]
        config = json.loads(json.dumps(config))
        arch = config["architectures"][0]
        record: dict[str, Any] = {"name": name, "model_type": model_type, "architecture": arch}
    elif name in CHECKPOINT_CASES:
        arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
        record = {"name": name, "model_type": model_type, "architecture": arch}
        _, catalog_file, dropped, _, _ = CHECKPOINT_CASES[name]
        config = json.loads((CATALOG / catalog_file).read_text(encoding="utf-8"))
        for key in dropped:
            config.pop(key, None)
        record["config_source"] = f"src/kvbudget/spec/catalog/models/{catalog_file}, shrunk"
    else:
        arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
        record = {"name": name, "model_type": model_type, "architecture": arch}
        try:
            config = tiny_configs.config_dict(model_type, tiny=True, architecture=arch)
        except Exception as exc:  # transformers cannot build the tiny config
            record["error"] = f"config: {type(exc).__name__}: {exc}"[:500]
            return record
        if name in CONVERTED_CASES:
            config = CONVERTED_CASES[name][1](config)
            record["config_source"] = f"transformers' tiny {model_type} config, rewritten"
    config.update(overrides)
    if extra_path:
        record["import_stubs"] = str(Path(extra_path).relative_to(ROOT))
    limit = config.get("max_position_embeddings") or config.get("n_positions") or 4096
    engine = {"max_model_len": min(4096, int(limit)), **engine}
    record.update(config=config, engine_args=engine, kv_cache_space_gib=KV_SPACE_GIB)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "config.json").write_text(json.dumps(config, default=str), encoding="utf-8")
        env = {
            **os.environ,
            "VLLM_CPU_KVCACHE_SPACE": str(KV_SPACE_GIB),
            "VLLM_LOGGING_LEVEL": "INFO",
            "TOKENIZERS_PARALLELISM": "false",
        }
        if extra_path:
            env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, env.get("PYTHONPATH")) if p)
        try:
            proc = subprocess.run(
                [sys.executable, "-c", WORKER, json.dumps({"dir": tmp, "engine": engine})],
                capture_output=True,
                text=True,
                timeout=timeout_s,
                env=env,
                check=False,
            )
            text = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            record["error"] = f"timeout after {timeout_s} s"
            text = str(exc.stdout or "") + str(exc.stderr or "")
            record.update(parse_log(text))
            return record
    record.update(parse_log(text))
    for line in text.splitlines():
        if line.startswith("KVB_RESULT "):
            record["engine_final"] = json.loads(line.removeprefix("KVB_RESULT "))
    if "engine_final" not in record:
        record["error"] = error_line(text)
        record["root_cause_context"] = root_cause_context(text, record["error"])
        record["log_tail"] = text.strip().splitlines()[-40:]
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        (logs / f"{name}.log").write_text(text, encoding="utf-8")
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--only", default="", help="comma-separated case names")
    parser.add_argument("--registry", type=Path, help="also write vLLM's architecture list here")
    parser.add_argument("--timeout", type=int, default=900)
    parser.add_argument("--logs", type=Path, help="also keep each case's full engine log here")
    parser.add_argument("--skip-done", action="store_true", help="skip cases already recorded")
    args = parser.parse_args()
    import transformers
    import vllm
    from vllm.model_executor.models.registry import _VLLM_MODELS

    registry = set(_VLLM_MODELS)
    if args.registry:
        args.registry.write_text(
            json.dumps(
                {
                    "vllm_version": vllm.__version__,
                    "source": "vllm.model_executor.models.registry._VLLM_MODELS",
                    "architectures": sorted(registry),
                },
                indent=1,
            )
            + "\n",
            encoding="utf-8",
        )
    cases = all_cases(registry)
    only = [c for c in args.only.split(",") if c]
    data: dict[str, Any] = {"cases": {}}
    if args.out.exists():
        data = json.loads(args.out.read_text(encoding="utf-8"))
    data.update(
        vllm_version=vllm.__version__,
        transformers_version=transformers.__version__,
        figure="measured: vLLM CPU engine log and cache_config (load_format=dummy)",
        kv_cache_space_gib=KV_SPACE_GIB,
    )
    unknown = [name for name in only if name not in cases]
    if unknown:
        parser.error(f"--only: unknown case(s) {', '.join(unknown)} (not served by both)")
    for name in only or list(cases):
        if args.skip_done and name in data["cases"]:
            continue
        model_type, overrides, engine = cases[name]
        record = run_case(name, model_type, overrides, engine, args.timeout, args.logs)
        record["recorded_at"] = datetime.now(UTC).isoformat(timespec="seconds")
        data["cases"][name] = record
        status = record.get("error") or f"{record.get('kv_cache_tokens')} tokens"
        print(f"{name}: {status}", flush=True)
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
