"""``--kv-cache-dtype auto`` on a ModelOpt checkpoint that quantizes its KV cache, worked by hand.

vLLM reads a ModelOpt checkpoint's ``hf_quant_config.json`` as its ``quantization_config`` when
config.json has none (0.32.0 ``transformers_utils/config.py`` lines 889-900) and, from 0.14.0,
resolves ``auto`` before building its CacheConfig (``engine/arg_utils.py`` line 2256 in 0.32.0,
1398 in 0.14.0; 0.13.0 passes ``cache_dtype=self.kv_cache_dtype``, line 1364):
``resolve_kv_cache_dtype_string`` / ``get_kv_cache_quant_algo_string`` (0.32.0
``utils/torch_utils.py`` lines 457-530) map ``kv_cache_quant_algo`` ``FP8`` to ``fp8_e4m3`` (and,
from 0.20.0, ``NVFP4`` to ``nvfp4``); an unknown value is logged and ``auto`` kept; an explicit
``--kv-cache-dtype`` is returned as given. SGLang (0.5.4 ``model_executor/model_runner.py`` lines
1610-1622; 0.5.23 ``mem_cache/kv_cache_dtype.py`` ``configure_kv_cache_dtype``) turns ``auto``
into ``float8_e4m3fn`` when the ModelOpt config's ``kv_cache_quant_algo`` is ``FP8``, else keeps
the model dtype.

nvidia/Llama-3.1-70B-Instruct-FP8 (the aiconfigurator-core 0.12.0 copies of its config.json and
hf_quant_config.json: 80 layers, 8 KV heads of 128, bfloat16, ``kv_cache_quant_algo`` FP8). With
vLLM's block of 16 tokens, one full-attention page is ``2 (K, V) x 16 x 8 x 128 x dtype bytes``:
32,768 B in fp8, 65,536 B in bfloat16; one block of the single group is 80 pages: 2,621,440 B /
5,242,880 B. ``--kv-cache-memory`` 10 GiB = 10,737,418,240 B is exactly 4,096 fp8 blocks (65,536
tokens) or 2,048 bf16 blocks (32,768 tokens). A token: 80 x 8 x 128 x 2 x 1 B = 163,840 B in fp8,
327,680 B in bfloat16; per rank at TP 2, 81,920 B (4 KV heads a rank).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.model_dtype import vllm_quant_name
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import GiB

MODEL = "nvidia/Llama-3.1-70B-Instruct-FP8"
CONFIG = MODELS_DIR / "nvidia--Llama-3.1-70B-Instruct-FP8.json"
HF_QUANT = MODELS_DIR / "hf_quant_config" / "nvidia--Llama-3.1-70B-Instruct-FP8.json"
FP8_TOKEN_BYTES = 80 * 8 * 128 * 2 * 1  # 163,840
BF16_TOKEN_BYTES = 80 * 8 * 128 * 2 * 2  # 327,680
FIELD = "hf_quant_config.json quantization.kv_cache_quant_algo"


def _vllm(version: str, model: str = MODEL, **extra: object) -> PlanResult:
    return make_plan(
        PlanRequest(
            model=model,
            engine="vllm",
            engine_version=version,
            kv_cache_memory_bytes=10 * GiB,
            max_model_len=8192,
            **extra,
        )
    )


def _snapshot(tmp_path: Path, kv_algo: object) -> str:
    """A snapshot directory: the real config.json and an hf_quant_config.json whose
    ``kv_cache_quant_algo`` is ``kv_algo`` (the rest as the real one)."""
    shutil.copy(CONFIG, tmp_path / "config.json")
    quant = json.loads(HF_QUANT.read_text("utf-8"))
    quant["quantization"]["kv_cache_quant_algo"] = kv_algo
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant), "utf-8")
    return str(tmp_path)


def test_the_catalog_copy_reads_its_hf_quant_config() -> None:
    resolved = resolve_model(MODEL)
    assert resolved.spec is not None
    assert resolved.spec.quantization_file == "hf_quant_config.json"
    assert vllm_quant_name(resolved.spec.quantization_config) == "modelopt"  # FP8 weights
    entry = next(e for e in resolved.ledger if e.field == "quantization_config")
    assert entry.location == f"catalog:hf_quant_config/{HF_QUANT.name}"


def test_vllm_0_32_sizes_the_pool_in_the_checkpoints_fp8() -> None:
    plan = _vllm("0.32.0")
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.num_blocks == 4_096 and plan.kv_cache_tokens == 65_536
    assert plan.kv_bytes_per_token_replica == FP8_TOKEN_BYTES
    said = plan.defaults_applied["kv_dtype"]
    assert f"{FIELD} = FP8" in said and "--kv-cache-dtype auto" in said


def test_fp8_holds_twice_the_tokens_of_an_explicit_bfloat16() -> None:
    bf16 = _vllm("0.32.0", kv_dtype="bfloat16")  # an explicit dtype wins, as in vLLM
    assert bf16.kv_dtype == "bfloat16" and "kv_dtype" not in bf16.defaults_applied
    assert bf16.num_blocks == 2_048 and bf16.kv_cache_tokens == 32_768
    assert bf16.kv_bytes_per_token_replica == BF16_TOKEN_BYTES
    assert _vllm("0.32.0").kv_cache_tokens == 2 * bf16.kv_cache_tokens


def test_tensor_parallel_splits_the_fp8_token() -> None:
    plan = _vllm("0.32.0", tp=2)
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.kv_bytes_per_token_per_rank == FP8_TOKEN_BYTES // 2 == 81_920


def test_a_draft_model_shares_the_targets_resolved_kv_dtype() -> None:
    """A separate draft model shares the target's CacheConfig, whose cache_dtype vLLM resolved
    from the target checkpoint (arg_utils.py line 2256), so ``auto`` prices the draft's layers in
    fp8 too. Llama-3.2-1B-Instruct: 16 layers, 8 KV heads of 64. Per rank at TP 4 (2 KV heads a
    rank), one fp8 token: target 80 x 2 x 2 x 128 x 1 = 40,960 B + draft 16 x 2 x 2 x 64 x 1 =
    4,096 B = 45,056 B; a 16-token block 720,896 B; 10 GiB / 720,896 = 14,894 blocks (in
    bfloat16 the draft's half would make it 13,653)."""
    draft = '{"method": "draft_model", "model": "meta-llama/Llama-3.2-1B-Instruct", "num_speculative_tokens": 3}'
    auto = _vllm("0.32.0", tp=4, speculative_config=draft)
    fp8 = _vllm("0.32.0", tp=4, speculative_config=draft, kv_dtype="fp8_e4m3")
    assert auto.num_blocks == fp8.num_blocks == 10 * GiB // (16 * (40_960 + 4_096))  # 14,894


def test_vllm_0_13_keeps_the_model_dtype_and_says_why() -> None:
    plan = _vllm("0.13.0")
    assert plan.kv_dtype == "bfloat16"
    assert plan.num_blocks == 2_048 and plan.kv_cache_tokens == 32_768
    assert any(f"vLLM 0.13.0 does not read the checkpoint's {FIELD}" in n for n in plan.notes)


def test_vllm_0_14_is_the_first_to_resolve_auto() -> None:
    assert _vllm("0.14.0").kv_dtype == "fp8_e4m3"
    assert _vllm("0.14.0", kv_dtype="auto").num_blocks == 4_096


def test_an_unknown_kv_algo_keeps_auto_in_one_line(tmp_path: Path) -> None:
    plan = _vllm("0.32.0", model=_snapshot(tmp_path, "INT8"))
    assert plan.kv_dtype == "bfloat16" and plan.num_blocks == 2_048
    [line] = [n for n in plan.notes if "kv_cache_quant_algo" in n]
    assert f"does not map the checkpoint's {FIELD} = INT8" in line
    assert "Unknown kv_cache_quant_algo" in line


def test_nvfp4_kv_from_0_20(tmp_path: Path) -> None:
    model = _snapshot(tmp_path, "NVFP4")
    plan = _vllm("0.32.0", model=model)
    assert plan.kv_dtype == "nvfp4"
    # nvfp4: head_dim // 2 packed e2m1 bytes + head_dim // 16 fp8 scales a head row
    assert plan.kv_bytes_per_token_replica == 80 * 8 * 2 * (128 // 2 + 128 // 16) == 92_160
    old = _vllm("0.19.0", model=model)
    assert old.kv_dtype == "bfloat16"
    assert any("vLLM 0.19.0 does not map" in n and "NVFP4" in n for n in old.notes)


def test_a_checkpoint_kv_dtype_kvbudget_cannot_size_is_said_as_the_checkpoints(
    tmp_path: Path,
) -> None:
    """DeepSeek-V3 (MLA) with an hf_quant_config.json whose kv_cache_quant_algo is NVFP4: vLLM
    0.32 turns ``auto`` into nvfp4, which kvbudget does not size for MLA layers; the one line
    says the user's ``auto`` became nvfp4 because of the checkpoint's field, and the fix."""
    config = json.loads((MODELS_DIR / "deepseek-ai--DeepSeek-V3.json").read_text("utf-8"))
    del config["quantization_config"]  # the hf_quant_config.json is read only without one
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    quant = {
        "producer": {"name": "modelopt"},
        "quantization": {"quant_algo": "FP8", "kv_cache_quant_algo": "NVFP4"},
    }
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(quant), "utf-8")
    with pytest.raises(ConfigError) as caught:
        _vllm("0.32.0", model=str(tmp_path), tp=8)
    line = caught.value.one_line()
    assert line.startswith("ConfigError: kv_dtype: auto on this checkpoint is nvfp4 (")
    assert "kv_cache_quant_algo" in line and "pass --kv-cache-dtype bfloat16 or fp8" in line
    assert caught.value.field == "kv_dtype"


def test_a_snapshot_directory_reads_the_file_beside_config_json(tmp_path: Path) -> None:
    plan = _vllm("0.32.0", model=_snapshot(tmp_path, "FP8"))
    assert plan.kv_dtype == "fp8_e4m3" and plan.num_blocks == 4_096


def test_config_json_quantization_config_wins_over_the_file(tmp_path: Path) -> None:
    """vLLM reads hf_quant_config.json only when config.json has no quantization_config."""
    model = _snapshot(tmp_path, "FP8")
    config = json.loads(CONFIG.read_text("utf-8"))
    config["quantization_config"] = {"quant_method": "fp8"}
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    plan = _vllm("0.32.0", model=model)
    assert plan.kv_dtype == "bfloat16" and plan.num_blocks == 2_048


def test_a_flat_kv_cache_scheme_of_static_fp8(tmp_path: Path) -> None:
    """ModelOpt 0.31+ writes a flat quantization_config into config.json; vLLM maps a
    ``kv_cache_scheme`` of ``{dynamic: false, num_bits: 8, type: float}`` to fp8."""
    config = json.loads(CONFIG.read_text("utf-8"))
    config["quantization_config"] = {
        "quant_method": "modelopt",
        "quant_algo": "FP8",
        "kv_cache_scheme": {"dynamic": False, "num_bits": 8, "type": "float"},
    }
    (tmp_path / "config.json").write_text(json.dumps(config), "utf-8")
    plan = _vllm("0.32.0", model=str(tmp_path))
    assert plan.kv_dtype == "fp8_e4m3" and plan.num_blocks == 4_096
    assert "config.json kv_cache_scheme" in plan.defaults_applied["kv_dtype"]


def _sglang(version: str, model: str = MODEL, **extra: object) -> PlanResult:
    """SGLang's rest of 3,000 fp8 tokens (``--kv-cache-memory``), one-token pages."""
    return make_plan(
        PlanRequest(
            model=model,
            engine="sglang",
            engine_version=version,
            gpu="H200",
            kv_cache_memory_bytes=3_000 * FP8_TOKEN_BYTES,
            max_model_len=2048,
            **extra,
        )
    )


@pytest.mark.parametrize("version", ["0.5.4", "0.5.23"])
def test_sglang_auto_takes_fp8_too(version: str) -> None:
    plan = _sglang(version)
    assert plan.sglang is not None
    assert plan.kv_dtype == "fp8_e4m3"
    assert plan.sglang.cell_size_bytes == FP8_TOKEN_BYTES
    assert plan.sglang.max_total_num_tokens == 3_000
    assert f"{FIELD} = FP8" in plan.defaults_applied["kv_dtype"]
    bf16 = _sglang(version, kv_dtype="bfloat16")
    assert bf16.sglang is not None and bf16.sglang.cell_size_bytes == BF16_TOKEN_BYTES
    assert bf16.sglang.max_total_num_tokens == 1_500


def test_sglang_takes_only_fp8(tmp_path: Path) -> None:
    plan = _sglang("0.5.23", model=_snapshot(tmp_path, "NVFP4"))
    assert plan.sglang is not None and plan.kv_dtype == "bfloat16"
    assert plan.sglang.cell_size_bytes == BF16_TOKEN_BYTES
    assert any(
        f"SGLang 0.5.23 takes only FP8 from the checkpoint's {FIELD}" in n for n in plan.notes
    )


@pytest.mark.parametrize(
    ("engine", "token_bytes", "source"),
    [
        ("vllm", FP8_TOKEN_BYTES, "config"),
        ("sglang", FP8_TOKEN_BYTES, "config"),
        ("hf", BF16_TOKEN_BYTES, "default"),  # transformers' cache: the model dtype
    ],
)
def test_calc_layouts(engine: str, token_bytes: int, source: str) -> None:
    result = calc_model(MODEL, engine=engine, tokens=4096, seqs=1)
    assert result.bytes_per_token == token_bytes
    entry = next(e for e in result.ledger if e.field == "kv_dtype")
    assert entry.source == source
    if source == "config":
        assert entry.value == "fp8_e4m3" and f"{FIELD} = FP8" in entry.note


def test_a_malformed_hf_quant_config_is_one_line_naming_the_file(tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path / "config.json")
    (tmp_path / "hf_quant_config.json").write_text("{not json", "utf-8")
    with pytest.raises(SpecError) as caught:
        _vllm("0.32.0", model=str(tmp_path))
    line = caught.value.one_line()
    assert "hf_quant_config.json is not valid JSON (line 1" in line
    assert line.endswith("fix or remove it (vLLM reads it as the quantization config)")
