"""SGLang's mamba state pool for hybrid mamba / linear-attention models (issue #34).

Every expected number is worked by hand below from SGLang's own source and the published
configs in the catalog (``src/kvbudget/spec/catalog/models/``).

sglang 0.5.23 wheel (paths under ``sglang/srt/``):

* ``mem_cache/kv_cache_configurator.py`` line 3040: with a mamba-ish config the rest memory goes
  through ``_handle_max_mamba_cache`` (lines 3229-3409) before the token pool. Without
  speculative decoding, ``--max-mamba-cache-size`` or ``--disable-radix-cache``: lines 3352-3356
  ``mamba_budget = rest * r / (1 + r)`` (GiB), lines 3379-3386 ``max_mamba_cache_size =
  int((budget_bytes - per_req) // per_req)``, lines 3404-3409 ``rest - (size + 1) * per_req``
  (one padding slot). ``r = mamba_full_memory_ratio``, fallback 0.9
  (``arg_groups/fields/schedule.py`` lines 220-227).
* ``configs/mamba_utils.py`` lines 116-125 ``mamba_cache_per_req = (conv_numel * conv_itemsize +
  ssm_numel * temporal_itemsize) * len(layers)``; lines 46-105: conv bfloat16
  (``SGLANG_MAMBA_CONV_DTYPE``, ``environ.py`` line 1628), temporal float32 unless the config,
  ``SGLANG_MAMBA_SSM_DTYPE`` or ``--mamba-ssm-dtype`` says otherwise; lines 194-243
  ``Mamba2StateShape.create``: conv ``(intermediate + 2 * n_groups * state_size) / tp`` x
  ``conv_kernel - 1``, temporal ``(num_heads / tp, head_dim, state_size)``.
* ``configs/qwen3_next.py`` lines 298-309: intermediate = value heads x value head dim,
  n_groups = key heads, state_size = key head dim. ``configs/nemotron_h.py`` lines 425-439:
  intermediate = ``mamba_num_heads * mamba_head_dim``.
* ``kv_cache_configurator.py`` lines 227 and 3135-3150: ``max_running_requests`` is capped at
  ``max_mamba_cache_size // 3`` (radix cache on, no extra buffer).
* the token pool: ``int(rest * 2**30) // cell_size`` (reference §7, unchanged).

sglang 0.5.4 wheel (``model_executor/model_runner.py`` lines 1433-1480): ``max_mamba_cache_size
= int(budget * 2**30 // per_req)`` and the token pool gets ``rest - size * per_req`` (no padding
slot); only Falcon-H1, Nemotron-H and Qwen3-Next have the pool (lines 1482-1498).
"""

from __future__ import annotations

from click.testing import CliRunner

from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.cli.plan import plan
from kvbudget.units import GiB

REST = 10 * GiB  # 10,737,418,240 B given with --kv-cache-memory
RATIO = 0.9

# Qwen3-Next-80B-A3B: 48 layers, full_attention_interval 4 -> 12 attention + 36 gated delta net.
# GDN conv: (32*128 + 2*16*128) = 8,192 channels x (4 - 1) = 24,576 elements x 2 B = 49,152 B
# GDN temporal: 32 x 128 x 128 = 524,288 elements x 4 B = 2,097,152 B
QWEN3_NEXT_PER_REQ = 36 * (49_152 + 2_097_152)  # 36 x 2,146,304 = 77,266,944 B
# attention cell: 12 layers x 2 KV heads x (256 + 256) x 2 B = 24,576 B per token
QWEN3_NEXT_CELL = 12 * 2 * (256 + 256) * 2
# budget = 10 GiB x 0.9 / 1.9 = 5,086,145,482.1 B; / 77,266,944 = 65.83
# 0.5.23: (budget - per_req) // per_req = 64 slots + 1 padding = 65 slots
# 0.5.4: budget // per_req = 65 slots; either way 65 x 77,266,944 = 5,022,351,360 B
QWEN3_NEXT_POOL = 65 * QWEN3_NEXT_PER_REQ
# token pool: (10,737,418,240 - 5,022,351,360) // 24,576 = 5,715,066,880 // 24,576 = 232,546
QWEN3_NEXT_TOKENS = 232_546

# Nemotron-H-56B-Base-8K: hybrid_override_pattern has 54 'M' (mamba2) and 10 '*' (attention).
# conv: (256*64 + 2*8*256) = 20,480 channels x 3 = 61,440 elements x 2 B = 122,880 B
# temporal: 256 x 64 x 256 = 4,194,304 elements x 4 B = 16,777,216 B
NEMOTRON_PER_REQ = 54 * (122_880 + 16_777_216)  # 54 x 16,900,096 = 912,605,184 B
NEMOTRON_CELL = 10 * 8 * (128 + 128) * 2  # 40,960 B per token
# budget 5,086,145,482.1 / 912,605,184 = 5.57: 0.5.23 -> 4 slots + 1 = 5; 0.5.4 -> 5
# token pool: (10,737,418,240 - 5 x 912,605,184) // 40,960
#   = (10,737,418,240 - 4,563,025,920) // 40,960 = 6,174,392,320 // 40,960 = 150,742 (exact:
#   150,742 x 40,960 = 6,174,392,320)
NEMOTRON_TOKENS = 150_742


def _plan(model_id: str, version: str, **extra: object) -> PlanResult:
    return make_plan(
        PlanRequest(
            model=model_id,
            engine="sglang",
            engine_version=version,
            gpu="H200",
            kv_cache_memory_bytes=REST,
            max_model_len=8192,
            **extra,
        )
    )


def test_hand_figures_are_consistent() -> None:
    assert QWEN3_NEXT_PER_REQ == 77_266_944
    assert (REST - QWEN3_NEXT_POOL) // QWEN3_NEXT_CELL == QWEN3_NEXT_TOKENS
    assert NEMOTRON_PER_REQ == 912_605_184
    assert (REST - 5 * NEMOTRON_PER_REQ) // NEMOTRON_CELL == NEMOTRON_TOKENS


def test_qwen3_next_0523_state_pool_then_token_pool() -> None:
    plan = _plan("Qwen/Qwen3-Next-80B-A3B-Thinking", "0.5.23")
    sg = plan.sglang
    assert sg is not None
    assert sg.mamba_full_memory_ratio == RATIO
    assert sg.mamba_state_bytes_per_request == QWEN3_NEXT_PER_REQ
    assert sg.max_mamba_cache_size == 64  # + 1 padding slot
    assert sg.mamba_pool_bytes == QWEN3_NEXT_POOL
    assert sg.cell_size_bytes == QWEN3_NEXT_CELL
    assert sg.rest_memory_bytes == REST  # SGLang's total_rest_memory, before the state pool
    assert sg.max_total_num_tokens == QWEN3_NEXT_TOKENS
    assert plan.kv_cache_tokens == QWEN3_NEXT_TOKENS
    # 64 // 3 = 21 requests, below min(max(232,546 / 8,192 x 512, 2048), 4096) = 2048
    assert sg.max_running_requests == 21
    assert plan.max_num_seqs == 21
    # the engine pool on the GPU is both pools
    assert plan.ranks[0].kv_pool_bytes == QWEN3_NEXT_TOKENS * QWEN3_NEXT_CELL + QWEN3_NEXT_POOL
    d = sg.to_dict()
    assert d["max_mamba_cache_size"] == 64
    assert d["mamba_pool_bytes"] == QWEN3_NEXT_POOL


def test_qwen3_next_054_has_no_padding_slot() -> None:
    sg = _plan("Qwen/Qwen3-Next-80B-A3B-Thinking", "0.5.4").sglang
    assert sg is not None
    assert sg.max_mamba_cache_size == 65
    assert sg.mamba_pool_bytes == QWEN3_NEXT_POOL
    assert sg.max_total_num_tokens == QWEN3_NEXT_TOKENS
    assert sg.max_running_requests == 65 // 3  # 21


def test_nemotron_h_mamba2_state_pool() -> None:
    sg = _plan("nvidia/Nemotron-H-56B-Base-8K", "0.5.23").sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == NEMOTRON_PER_REQ
    assert sg.max_mamba_cache_size == 4
    assert sg.mamba_pool_bytes == 5 * NEMOTRON_PER_REQ
    assert sg.cell_size_bytes == NEMOTRON_CELL
    assert sg.max_total_num_tokens == NEMOTRON_TOKENS
    assert sg.max_running_requests == 4 // 3  # 1
    sg054 = _plan("nvidia/Nemotron-H-56B-Base-8K", "0.5.4").sglang
    assert sg054 is not None
    assert sg054.max_mamba_cache_size == 5
    assert sg054.max_total_num_tokens == NEMOTRON_TOKENS


def test_qwen3_next_tp2_halves_the_state() -> None:
    # TP 2: conv 8,192 / 2 x 3 x 2 B = 24,576 B; temporal 16 x 128 x 128 x 4 B = 1,048,576 B
    per_req = 36 * (24_576 + 1_048_576)  # 38,633,472 B
    assert per_req * 2 == QWEN3_NEXT_PER_REQ
    sg = _plan("Qwen/Qwen3-Next-80B-A3B-Thinking", "0.5.23", tp=2).sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == per_req
    # budget 5,086,145,482.1 / 38,633,472 = 131.65: 130 + 1 padding slot
    assert sg.max_mamba_cache_size == 130
    # cell on one rank: 12 x max(1, 2 // 2) x 512 x 2 = 12,288 B
    # (10,737,418,240 - 131 x 38,633,472) // 12,288 = 5,676,433,408 // 12,288 = 461,949
    assert (REST - 131 * per_req) // 12_288 == 461_949
    assert sg.max_total_num_tokens == 461_949


def test_text_output_shows_the_state_pool() -> None:
    result = CliRunner().invoke(
        plan,
        [
            "--model",
            "Qwen/Qwen3-Next-80B-A3B-Thinking",
            "--engine",
            "sglang",
            "--engine-version",
            "0.5.23",
            "--gpu",
            "H200",
            "--kv-cache-memory-bytes",
            "10GiB",
            "--max-model-len",
            "8192",
        ],
        env={"COLUMNS": "200"},
    )
    assert "mamba state pool" in result.output
    assert "65 slots (max_mamba_cache_size 64) x 77,266,944 B" in result.output


def test_bfloat16_ssm_state_halves_the_temporal_bytes() -> None:
    # --mamba-ssm-cache-dtype bfloat16 read as SGLang's --mamba-ssm-dtype (choices float32,
    # bfloat16, float16: arg_groups/fields/exec_.py lines 490-496): temporal 524,288 x 2 B
    per_req = 36 * (49_152 + 524_288 * 2)  # 36 x 1,097,728 = 39,518,208 B
    sg = _plan(
        "Qwen/Qwen3-Next-80B-A3B-Thinking", "0.5.23", mamba_ssm_cache_dtype="bfloat16"
    ).sglang
    assert sg is not None
    assert sg.mamba_state_bytes_per_request == per_req
    # budget 5,086,145,482.1 / 39,518,208 = 128.70: 127 + 1 padding slot
    assert sg.max_mamba_cache_size == 127
    # (10,737,418,240 - 128 x 39,518,208) // 24,576 = 5,679,087,616 // 24,576 = 231,082
    assert (REST - 128 * per_req) // QWEN3_NEXT_CELL == 231_082
    assert sg.max_total_num_tokens == 231_082
