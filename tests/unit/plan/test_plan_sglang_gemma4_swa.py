"""Gemma-4 in SGLang 0.5.23's hybrid SWA pool, and KV-shared layers in SGLang's pools, by hand.

google/gemma-4-26B-A4B (the catalog's config.json): 30 layers, 25 sliding (window 1024) and 5
full (every sixth); sliding layers 8 KV heads of ``head_dim`` 256, full layers
``num_global_key_value_heads`` 2 of ``global_head_dim`` 512 (``attention_k_eq_v`` true);
bfloat16. SGLang states the full layers as its base shape and the sliding ones as ``swa_*``
(``srt/utils/hf_transformers/config.py`` lines 115-147: ``head_dim`` 512, ``num_key_value_heads``
2, ``swa_head_dim`` = ``swa_v_head_dim`` 256, ``swa_num_key_value_heads`` 8, ``v_head_dim`` 512).
``HybridSWAPoolConfigurator`` (``model_executor/pool_configurator.py`` lines 700-712) prices a
token per layer as ``get_num_kv_heads(tp) x (head_dim + v_head_dim) x 2 B`` (full) and
``get_swa_num_kv_heads(tp) x (swa_head_dim + swa_v_head_dim) x 2 B`` (sliding), heads
``max(1, total // tp)`` (``configs/model_config.py`` lines 1700-1724):

* TP 1: F = 5 x 2 x 1024 x 2 = 20,480 B; S = 25 x 8 x 512 x 2 = 204,800 B
* TP 2: F = 5 x 1 x 1024 x 2 = 10,240 B; S = 25 x 4 x 512 x 2 = 102,400 B
* TP 4: F = 5 x max(1, 2 // 4) x 1024 x 2 = 10,240 B; S = 25 x 2 x 512 x 2 = 51,200 B

and sizes ``full = int(rest // (F + 0.8 x S))``, ``swa = int(full x 0.8)`` at one-token pages
(lines 786-803, 859-893). With ``rest = 10,000 x (F + 0.8 x S) + 1000``: 10,000 full tokens and
8,000 sliding ones. SGLang 0.5.23's own code prints the same
(``scripts/check_sglang_hybrid_swa_pool.py``, transformers 5.19.0: cell_size 184,320 / 92,160 /
51,200; full=10000 swa=8000 at each TP).

KV-shared layers: SGLang lists every layer in ``full_attention_layer_ids`` /
``swa_attention_layer_ids`` (``model_config.py`` lines 2764-2770) and the configurator counts
them all (``pool_configurator.py`` lines 666-667), though the last ``num_kv_shared_layers`` read
an earlier layer's rows (``models/gemma4_causal.py`` lines 397-433, 540): the same config with
``num_kv_shared_layers`` 10 gives the same pools (the script's "shared 10" lines). The default
pool counts ``num_effective_layers`` likewise (``pool_configurator.py`` lines 225-237): Gemma-3n
E4B (35 layers, 2 KV heads of 256, bfloat16, the last 15 shared) is 35 x 2 x 512 x 2 = 71,680 B a
token in SGLang, 20 x 2,048 = 40,960 B in vLLM, which gives shared layers no KV spec.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.plan_types import PlanRequest, PlanResult
from kvbudget.capacity.planner import make_plan
from kvbudget.spec.catalog import MODELS_DIR

MODEL = "google/gemma-4-26B-A4B"
#: TP -> (F, S): the full and sliding layers' bytes per token on one rank
PER_TOKEN = {
    1: (5 * 2 * 1024 * 2, 25 * 8 * 512 * 2),
    2: (5 * 1 * 1024 * 2, 25 * 4 * 512 * 2),
    4: (5 * 1 * 1024 * 2, 25 * 2 * 512 * 2),
}


def _plan(model: str, tp: int) -> PlanResult:
    full, swa = PER_TOKEN[tp]
    rest = 10_000 * (full + swa * 8 // 10) + 1000
    return make_plan(
        PlanRequest(
            model=model,
            engine="sglang",
            engine_version="0.5.23",
            gpu="H200",
            tp=tp,
            kv_cache_memory_bytes=rest,
            max_model_len=8192,
        )
    )


def _shared(tmp_path: Path, shared: int) -> str:
    raw = json.loads((MODELS_DIR / "google--gemma-4-26B-A4B.json").read_text("utf-8"))
    raw["text_config"] = dict(raw["text_config"], num_kv_shared_layers=shared)
    (tmp_path / "config.json").write_text(json.dumps(raw), "utf-8")
    return str(tmp_path)


@pytest.mark.parametrize("tp", [1, 2, 4])
def test_gemma4_sliding_and_global_layers_priced_by_their_own_heads(tp: int) -> None:
    plan = _plan(MODEL, tp)
    assert plan.sglang is not None
    assert plan.sglang.swa_full_tokens_ratio == 0.8  # SGLang's fallback for Gemma-4
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (10_000, 8_000)
    full, swa = PER_TOKEN[tp]
    assert plan.ranks[0].kv_pool_bytes == 10_000 * full + 8_000 * swa


@pytest.mark.parametrize("tp", [1, 4])
def test_kv_shared_gemma4_layers_still_hold_sglang_rows(tmp_path: Path, tp: int) -> None:
    plan = _plan(_shared(tmp_path, 10), tp)
    assert plan.sglang is not None
    assert (plan.sglang.full_tokens, plan.sglang.swa_tokens) == (10_000, 8_000)


@pytest.mark.parametrize(("engine", "token_bytes"), [("sglang", 71_680), ("vllm", 40_960)])
def test_gemma3n_shared_layers_cost_sglang_not_vllm(engine: str, token_bytes: int) -> None:
    result = calc_model("google/gemma-3n-E4B-text", engine=engine, tokens=1, seqs=1)
    assert result.bytes_per_token == token_bytes


@pytest.mark.parametrize(
    ("model", "token_bytes", "hybrid"),
    [
        # Gemma-4 26B-A4B: 5 x 2 x 1024 x 2 + 25 x 8 x 512 x 2 = 20,480 + 204,800 B
        (MODEL, 225_280, True),
        # Gemma-2-9B: 42 layers x 8 x (256 + 256) x 2 B; disable_hybrid_swa_memory
        # (model_overrides/gemma2_gemma3.py line 26)
        ("google/gemma-2-9b", 344_064, False),
    ],
)
def test_calc_counts_sliding_layers_at_full_length_and_says_which_pool(
    model: str, token_bytes: int, hybrid: bool
) -> None:
    """calc prices the default release's pool (0.5.4: every layer's row of every token); for a
    model 0.5.23 runs with its hybrid SWA pool it says that pool is plan's to size."""
    result = calc_model(model, engine="sglang", tokens=8192, seqs=1)
    assert result.bytes_per_token == token_bytes
    [line] = [n for n in result.notes if n.startswith("sliding layers counted at full length")]
    assert ("--engine-version 0.5.23" in line) is hybrid
    assert ("no hybrid SWA pool" in line) is not hybrid
