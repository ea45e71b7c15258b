"""Peer: our architecture parameter count against transformers' own model (built on ``meta``)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

torch = importlib.import_module("torch")
transformers = importlib.import_module("transformers")

from kvbudget.capacity.weights import compute_weights  # noqa: E402
from kvbudget.spec.resolve import resolve_model  # noqa: E402

CATALOG = Path(__file__).resolve().parents[2] / "src" / "kvbudget" / "spec" / "catalog" / "models"


def transformers_model(model_id: str) -> object:
    cfg = json.loads((CATALOG / (model_id.replace("/", "--") + ".json")).read_text("utf-8"))
    fields = {k: v for k, v in cfg.items() if k != "model_type"}
    config = transformers.AutoConfig.for_model(cfg["model_type"], **fields)
    with torch.device("meta"):
        return transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)


def transformers_param_count(model_id: str, *, skip: tuple[str, ...] = ()) -> int:
    """transformers' parameter count (tied weights once), less the tensors named in ``skip``."""
    model = transformers_model(model_id)
    return int(
        sum(
            p.numel()
            for name, p in model.named_parameters()  # type: ignore[attr-defined]
            if not any(part in name for part in skip)
        )
    )


# Exact, no tolerance: kvbudget's count leaves out tensors too small to matter for memory, and
# each peer subtracts exactly those, by name, from transformers' own model: attention biases
# (Qwen2.5, gpt-oss, with gpt-oss's router/expert biases and attention sinks), q/k norms (Qwen3)
# and the extra feed-forward norms (Gemma-2).
@pytest.mark.parametrize(
    ("model_id", "skip"),
    [
        ("meta-llama/Llama-3.1-8B", ()),
        ("mistralai/Mistral-7B-v0.1", ()),
        ("Qwen/Qwen3-8B", ("q_norm", "k_norm")),
        ("Qwen/Qwen3-30B-A3B", ("q_norm", "k_norm")),
        ("Qwen/Qwen2.5-7B", ("bias",)),
        ("openai/gpt-oss-120b", ("bias", "sinks")),
        ("google/gemma-2-9b", ("pre_feedforward_layernorm", "post_feedforward_layernorm")),
    ],
)
def test_parameter_count_matches_transformers(model_id: str, skip: tuple[str, ...]) -> None:
    spec = resolve_model(model_id).spec
    assert spec is not None
    ours = compute_weights(spec).num_params
    assert ours == transformers_param_count(model_id, skip=skip)


def test_deepseek_v2_lite_plain_q_proj() -> None:
    """transformers builds a low-rank q path (q_a_proj, q_a_layernorm, q_b_proj: q_lora_rank
    falls back to 1536 when the config says null); the checkpoint has one plain q_proj of
    hidden x heads x (qk_nope + qk_rope), which kvbudget counts (15.71B; the model card: 15.7B).
    kvbudget also leaves out kv_a_layernorm. The expected count swaps the one for the other."""
    model_id = "deepseek-ai/DeepSeek-V2-Lite"
    spec = resolve_model(model_id).spec
    assert spec is not None
    cfg = json.loads((CATALOG / (model_id.replace("/", "--") + ".json")).read_text("utf-8"))
    head = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    q_proj = cfg["num_hidden_layers"] * cfg["hidden_size"] * cfg["num_attention_heads"] * head
    skip = ("q_a_proj", "q_a_layernorm", "q_b_proj", "kv_a_layernorm")
    expected = transformers_param_count(model_id, skip=skip) + q_proj
    assert compute_weights(spec).num_params == expected


def test_llama4_scout_expert_sizes() -> None:
    model_id = "meta-llama/Llama-4-Scout-17B-16E-Instruct"
    spec = resolve_model(model_id).spec
    assert spec is not None
    ours = compute_weights(spec).num_params
    assert ours is not None
    cfg = json.loads((CATALOG / (model_id.replace("/", "--") + ".json")).read_text("utf-8"))
    text = cfg.get("text_config", cfg)
    config = transformers.Llama4TextConfig(**{k: v for k, v in text.items() if k != "model_type"})
    with torch.device("meta"):
        model = transformers.Llama4ForCausalLM(config)
    expected = int(sum(p.numel() for p in model.parameters()))
    assert ours == expected


def test_falcon_h1_parallel_hybrid_counts_both_branches(tmp_path: Path) -> None:
    """Falcon-H1 (tiny variant of transformers' defaults): every decoder layer has attention and
    a Mamba-2 mixer. kvbudget counts both branches' projections; it leaves out the mixer's
    conv1d, A_log, D and dt_bias (as for every Mamba), which the expected count subtracts."""
    from tests.peer import tiny_configs

    raw = tiny_configs.config_dict("falcon_h1", tiny=True, architecture="FalconH1ForCausalLM")
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    config = tiny_configs.build_config("falcon_h1", tiny=True)
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    skip = ("conv1d", "A_log", "mamba.D", "dt_bias")
    expected = sum(
        p.numel() for name, p in model.named_parameters() if not any(s in name for s in skip)
    )
    assert compute_weights(spec).num_params == expected
