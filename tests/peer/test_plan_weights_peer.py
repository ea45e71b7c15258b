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


def _wrapper_config(model_id: str) -> dict[str, object]:
    cfg: dict[str, object] = json.loads(
        (CATALOG / (model_id.replace("/", "--") + ".json")).read_text("utf-8")
    )
    return cfg


def test_gemma3_vision_tower_matches_transformers() -> None:
    """Gemma-3-27B's SigLIP tower and projector: transformers' own modules on ``meta``."""
    from kvbudget.capacity.vision import vision_tower

    cfg = _wrapper_config("google/gemma-3-27b-it")
    config = transformers.Gemma3Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    gemma3 = importlib.import_module("transformers.models.gemma3.modeling_gemma3")
    with torch.device("meta"):
        tower = transformers.AutoModel.from_config(config.vision_config)
        projector = gemma3.Gemma3MultiModalProjector(config)
    expected = sum(p.numel() for p in tower.parameters()) + sum(
        p.numel() for p in projector.parameters()
    )
    ours = vision_tower(cfg, text_hidden=config.text_config.hidden_size, tp=1)
    assert ours is not None and ours.num_params == expected


def test_llama4_scout_vision_tower_matches_transformers() -> None:
    from kvbudget.capacity.vision import vision_tower

    cfg = _wrapper_config("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    config = transformers.Llama4Config(**{k: v for k, v in cfg.items() if k != "model_type"})
    llama4 = importlib.import_module("transformers.models.llama4.modeling_llama4")
    with torch.device("meta"):
        tower = llama4.Llama4VisionModel(config.vision_config)
        projector = llama4.Llama4MultiModalProjector(config)
    expected = sum(p.numel() for p in tower.parameters()) + sum(
        p.numel() for p in projector.parameters()
    )
    ours = vision_tower(cfg, text_hidden=config.text_config.hidden_size, tp=1)
    assert ours is not None and ours.num_params == expected


def test_qwen2_5_vl_vision_tower_matches_transformers() -> None:
    """A Qwen2.5-VL-7B-shaped tower (depth 32, hidden 1280, intermediate 3420, 16 heads, patch
    14, merge 2, out 3584); the oracle builds transformers' tower from the same sizes."""
    from kvbudget.capacity.vision import vision_tower

    vision = {
        "model_type": "qwen2_5_vl_vision",
        **{"depth": 32, "hidden_size": 1280, "intermediate_size": 3420, "num_heads": 16},
        **{"in_channels": 3, "patch_size": 14, "spatial_merge_size": 2},
        **{"temporal_patch_size": 2, "out_hidden_size": 3584, "hidden_act": "silu"},
    }
    config = transformers.Qwen2_5_VLConfig(vision_config=vision)
    qwen = importlib.import_module("transformers.models.qwen2_5_vl.modeling_qwen2_5_vl")
    with torch.device("meta"):
        tower = qwen.Qwen2_5_VisionTransformerPretrainedModel._from_config(config.vision_config)
    expected = sum(p.numel() for p in tower.parameters())
    ours = vision_tower(
        {"model_type": "qwen2_5_vl", "vision_config": vision}, text_hidden=3584, tp=1
    )
    assert ours is not None and ours.num_params == expected
