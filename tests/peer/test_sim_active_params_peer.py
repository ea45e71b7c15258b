"""Peer: the parameters each token runs (MoE active parameters) against transformers' model.

transformers builds each MoE family on ``meta``; its routed experts are the fused
``*.experts.gate_up_proj`` / ``*.experts.down_proj`` tensors (shared experts are named
``shared_expert(s)``, biases ``*_bias``). Of ``E`` routed experts a token runs ``k``, so the
parameters a token leaves idle are ``routed * (1 - k / E)``, with ``k`` and ``E`` read from the
config file here, not from kvbudget.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path
from typing import Any

import pytest

torch = importlib.import_module("torch")
transformers = importlib.import_module("transformers")

from kvbudget.capacity.plan_types import PlanRequest  # noqa: E402
from kvbudget.capacity.planner import make_plan  # noqa: E402
from kvbudget.capacity.weights import compute_weights  # noqa: E402
from kvbudget.sim.fromplan import model_cost  # noqa: E402
from kvbudget.spec.resolve import resolve_model  # noqa: E402

CATALOG = Path(__file__).resolve().parents[2] / "src" / "kvbudget" / "spec" / "catalog" / "models"
ROUTED = re.compile(r"\.experts\.(gate_up_proj|down_proj)$")


def _config(model_id: str) -> dict[str, Any]:
    cfg: dict[str, Any] = json.loads(
        (CATALOG / (model_id.replace("/", "--") + ".json")).read_text("utf-8")
    )
    return cfg


def _counts(config: Any, skip: tuple[str, ...] = ()) -> tuple[int, int]:
    """(all parameters less ``skip``, routed-expert parameters) of transformers' model."""
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    total = routed = 0
    for name, p in model.named_parameters():
        if ROUTED.search(name):
            routed += p.numel()
        if not any(part in name for part in skip):
            total += p.numel()
    return int(total), int(routed)


def _from_catalog(model_id: str) -> Any:
    cfg = _config(model_id)
    fields = {k: v for k, v in cfg.items() if k not in ("model_type", "_note")}
    return transformers.AutoConfig.for_model(cfg["model_type"], **fields)


def _experts(cfg: dict[str, Any]) -> tuple[int, int]:
    text = cfg.get("text_config", cfg)
    num = text.get("num_local_experts") or text.get("n_routed_experts") or text["num_experts"]
    return int(num), int(text["num_experts_per_tok"])


def _idle(model_id: str, plan_gpu: str = "H200", tp: int = 8) -> float:
    spec = resolve_model(model_id).spec
    assert spec is not None
    plan = make_plan(PlanRequest(model=model_id, gpu=plan_gpu, tp=tp, max_model_len=4096), spec)
    assert plan.weights.num_params is not None
    return plan.weights.num_params - model_cost(spec, plan).num_active_params


@pytest.mark.parametrize(
    "model_id",
    [
        "openai/gpt-oss-120b",  # num_local_experts, intermediate_size per expert
        "Qwen/Qwen3-30B-A3B",  # num_experts, moe_intermediate_size
        "deepseek-ai/DeepSeek-V2-Lite",  # n_routed_experts, first_k_dense_replace, shared
        "deepseek-ai/DeepSeek-V3",
        "MiniMaxAI/MiniMax-Text-01",  # num_local_experts, intermediate_size per expert
        "ai21labs/AI21-Jamba-1.5-Mini",  # num_experts, expert_layer_period
    ],
)
def test_routed_expert_parameters_match_transformers(model_id: str) -> None:
    _, routed = _counts(_from_catalog(model_id))
    num_experts, per_tok = _experts(_config(model_id))
    spec = resolve_model(model_id).spec
    assert spec is not None
    assert compute_weights(spec).num_expert_params == routed
    assert _idle(model_id) == pytest.approx(routed * (1 - per_tok / num_experts), rel=1e-12)


def test_mixtral_defaults_active_parameters(tmp_path: Path) -> None:
    """Mixtral-8x7B (transformers' MixtralConfig defaults: 8 experts, 2 per token)."""
    config = transformers.MixtralConfig()
    raw = {**config.to_dict(), "architectures": ["MixtralForCausalLM"]}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    total, routed = _counts(config)
    spec = resolve_model(str(path)).spec
    assert spec is not None
    plan = make_plan(PlanRequest(model=str(path), gpu="H100", tp=2, max_model_len=4096), spec)
    active = model_cost(spec, plan).num_active_params
    assert active == pytest.approx(total - routed * (1 - 2 / 8), rel=1e-12)
    # Mistral's announcement: "12.9B active parameters" of 46.7B
    assert active == pytest.approx(12.9e9, rel=0.01)


@pytest.mark.parametrize(
    ("model_id", "skip", "published_active", "without_embedding"),
    [
        # OpenAI's gpt-oss model card (arXiv 2508.10925, table 1): 116.83B total, 5.13B active,
        # the active count leaving out the input embedding (the unembedding counted)
        ("openai/gpt-oss-120b", ("bias", "sinks"), 5.13e9, True),
        # Qwen's model card: 30.5B in total, 3.3B activated
        ("Qwen/Qwen3-30B-A3B", ("q_norm", "k_norm"), 3.3e9, False),
    ],
)
def test_active_parameters_match_transformers(
    model_id: str, skip: tuple[str, ...], published_active: float, without_embedding: bool
) -> None:
    total, routed = _counts(_from_catalog(model_id), skip)
    num_experts, per_tok = _experts(_config(model_id))
    spec = resolve_model(model_id).spec
    assert spec is not None
    plan = make_plan(PlanRequest(model=model_id, gpu="H200", max_model_len=4096), spec)
    active = model_cost(spec, plan).num_active_params
    assert active == pytest.approx(total - routed * (1 - per_tok / num_experts), rel=1e-12)
    cfg = _config(model_id)
    embedding = cfg["vocab_size"] * cfg["hidden_size"] if without_embedding else 0
    assert active - embedding == pytest.approx(published_active, rel=0.02)
