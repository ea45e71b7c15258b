"""Model resolution: layer kinds from real configs, provenance, not-applicable, sources.

Expected layer layouts are worked from each architecture's published rule (in the comments),
not read back from the resolver.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.catalog import list_catalog
from kvbudget.spec.layers import MLA, KVShared, SlidingWindow
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import parse_overrides, resolve_model
from kvbudget.spec.state_layers import StateLayer

LLAMA_8B = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "num_hidden_layers": 32,
    "torch_dtype": "bfloat16",
}


def spec_of(model_id: str) -> ModelSpec:
    resolved = resolve_model(model_id)
    assert resolved.status == "resolved", resolved.reason
    assert resolved.spec is not None
    return resolved.spec


def test_catalog_ships_every_reference_config() -> None:
    ids = {e.model_id for e in list_catalog()}
    # 22 reference configs + 6 built from transformers defaults + 30 from aiconfigurator-core 0.12.0
    # (MiMo-V2-Flash, Step-3.7-Flash and six DeepSeek-V4 configs added for issue #34; the ModelOpt
    # FP8 checkpoint nvidia/Llama-3.1-70B-Instruct-FP8 with its hf_quant_config.json; Qwen3.5 x4,
    # Qwen3.6 x2, GLM-5.1 / 5.3, Nemotron-3-Super, Nemotron-3.5-Lightning and Gemma-4-31B, the
    # issue's families, each checked against transformers' cache by tests/peer/test_calc_hf_peer.py)
    assert len(ids) == 58
    assert "meta-llama/Llama-3.1-8B" in ids
    assert all(e.status != "unknown" for e in list_catalog())


def test_head_dim_derived_and_marked() -> None:
    spec = spec_of("meta-llama/Llama-3.1-8B")  # no head_dim key: 4096 / 32 = 128
    layer = spec.layers[0]
    assert (layer.kind, layer.num_kv_heads, layer.head_dim) == (
        "full",
        8,
        128,
    )
    entry = spec.ledger_entry("head_dim")
    assert entry is not None and entry.source == "derived"


def test_explicit_head_dim_wins_over_hidden_over_heads() -> None:
    spec = spec_of("Qwen/Qwen3-32B")  # head_dim 128 while 5120 / 64 = 80
    assert spec.layers[0].head_dim == 128
    entry = spec.ledger_entry("head_dim")
    assert entry is not None and entry.source == "catalog"


def test_kv_heads_never_query_heads() -> None:
    spec = spec_of("meta-llama/Llama-3.1-70B")  # 64 query heads, 8 KV heads
    assert {layer.num_kv_heads for layer in spec.layers} == {8}


def test_gemma3_default_pattern_is_architecture_default() -> None:
    # 62 layers, pattern 6: layer i full when (i+1) % 6 == 0 -> i = 5, 11, ..., 59 -> 10 full
    spec = spec_of("google/gemma-3-27b-it")
    assert spec.kind_counts() == {"sliding": 52, "full": 10}
    assert [layer.layer_index for layer in spec.layers if layer.kind == "full"] == list(
        range(5, 62, 6)
    )
    assert {
        getattr(layer, "sliding_window", None) for layer in spec.layers if layer.kind == "sliding"
    } == {1024}
    entry = spec.ledger_entry("sliding_window_pattern")
    assert entry is not None and entry.source == "architecture_default"
    mpe = spec.ledger_entry("max_position_embeddings")
    assert (
        spec.max_position_embeddings == 131072
        and mpe is not None
        and mpe.source == "architecture_default"
    )


def test_qwen25_window_present_but_disabled_is_a_conflict() -> None:
    spec = spec_of("Qwen/Qwen2.5-7B")
    assert spec.kind_counts() == {"full": 28}
    entry = spec.ledger_entry("sliding_window")
    assert entry is not None and entry.conflict and "use_sliding_window" in entry.conflict


def test_sliding_every_layer_mistral_and_phi3() -> None:
    assert spec_of("mistralai/Mistral-7B-v0.1").kind_counts() == {"sliding": 32}
    assert spec_of("mistralai/Mistral-7B-Instruct-v0.3").kind_counts() == {
        "full": 32
    }  # explicit null window
    phi = spec_of("microsoft/Phi-3-mini-4k-instruct")
    assert {layer.sliding_window for layer in phi.layers} == {2047}


def test_gpt_oss_alternates_from_layer_types() -> None:
    spec = spec_of("openai/gpt-oss-120b")
    assert spec.layers[0].kind == "sliding" and spec.layers[1].kind == "full"
    assert spec.kind_counts() == {"sliding": 18, "full": 18}
    assert isinstance(spec.layers[0], SlidingWindow) and spec.layers[0].sliding_window == 128


def test_llama4_chunked_every_fourth_full() -> None:
    # no_rope_layers default: int((i+1) % 4 != 0) -> layers 3, 7, ..., 47 are NoPE/full
    spec = spec_of("meta-llama/Llama-4-Scout-17B-16E-Instruct")
    assert spec.kind_counts() == {"chunked": 36, "full": 12}
    assert [layer.layer_index for layer in spec.layers if layer.kind == "full"] == list(
        range(3, 48, 4)
    )


def test_mla_latent() -> None:
    spec = spec_of("deepseek-ai/DeepSeek-V3")
    assert spec.kind_counts() == {"mla": 61}
    layer = spec.layers[0]
    assert isinstance(layer, MLA) and layer.latent_dim == 576
    assert layer.bytes_per_token(2) == 1152  # no factor 2, not x heads


def test_jamba_mamba_layers() -> None:
    # 32 layers, attention when i % 8 == 4 -> 4, 12, 20, 28
    spec = spec_of("ai21labs/AI21-Jamba-1.5-Mini")
    assert [layer.layer_index for layer in spec.layers if layer.kind == "full"] == [4, 12, 20, 28]
    state = spec.layers[0]
    assert isinstance(state, StateLayer) and state.intermediate_size == 2 * 4096


def test_qwen3_next_gdn_every_fourth_full() -> None:
    spec = spec_of("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert [layer.layer_index for layer in spec.layers if layer.kind == "full"] == list(
        range(3, 48, 4)
    )
    gdn = spec.layers[0]
    assert isinstance(gdn, StateLayer) and gdn.state_kind == "gdn"


def test_minimax_linear_attention() -> None:
    spec = spec_of("MiniMaxAI/MiniMax-Text-01")
    assert spec.kind_counts() == {"state": 70, "full": 10}


def test_gemma3n_kv_sharing() -> None:
    # 35 layers, last 15 reuse the last earlier layer of the same type (first shared = 20)
    spec = spec_of("google/gemma-3n-E4B-text")
    shared = [layer for layer in spec.layers if isinstance(layer, KVShared)]
    assert len(shared) == 15 and shared[0].layer_index == 20
    types = [layer.kind for layer in spec.layers[:20]]
    last_full = max(i for i, t in enumerate(types) if t == "full")
    last_sliding = max(i for i, t in enumerate(types) if t == "sliding")
    assert {s.source_layer_index for s in shared} == {last_full, last_sliding}


def test_config_path_and_snapshot_dir(tmp_path: Path) -> None:
    snap = tmp_path / "models--acme--tiny" / "snapshots" / "0123456789abcdef"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_8B), encoding="utf-8")
    by_dir = resolve_model(str(snap))
    by_file = resolve_model(str(snap / "config.json"))
    for resolved in (by_dir, by_file):
        assert resolved.status == "resolved"
        assert resolved.model_id == "acme/tiny"
        entry = resolved.ledger[0]
        assert (
            entry.revision == "0123456789abcdef"
            and entry.config_sha256
            and len(entry.config_sha256) == 64
        )


def test_repo_id_from_local_hf_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import huggingface_hub.constants

    repo = tmp_path / "models--acme--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abcdef0123456789", encoding="utf-8")
    snap = repo / "snapshots" / "abcdef0123456789"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps(LLAMA_8B), encoding="utf-8")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    resolved = resolve_model("acme/cached")
    assert resolved.status == "resolved" and resolved.source is not None
    assert resolved.source.origin == "hf_cache"
    with pytest.raises(SpecError, match="--download"):
        resolve_model("acme/not-cached")


def test_unknown_architecture_with_known_vocabulary_is_unverified(tmp_path: Path) -> None:
    """A model_type without a rule, llama-style fields only: read generically, marked unverified."""
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({**LLAMA_8B, "model_type": "mystery", "architectures": ["MysteryLM"]}),
        encoding="utf-8",
    )
    resolved = resolve_model(str(path))
    assert resolved.status == "resolved" and resolved.spec is not None
    assert resolved.spec.rules_verified is False
    assert resolved.spec.kind_counts() == {"full": 32}
    rules = resolved.spec.ledger_entry("architecture_rules")
    assert rules is not None and "UNVERIFIED" in rules.note


def test_unknown_architecture_with_unknown_structure_lists_fields(tmp_path: Path) -> None:
    cfg = {**LLAMA_8B, "model_type": "mystery", "kv_lora_rank": 512, "sliding_window": 4096}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.status == "not_applicable" and resolved.spec is None
    assert resolved.missing == ("kv_lora_rank", "layer_types")
    assert "--set layer_types" in resolved.reason


def test_missing_kv_heads_lists_field_and_set_supplies_it(tmp_path: Path) -> None:
    cfg = {k: v for k, v in LLAMA_8B.items() if k != "num_key_value_heads"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.status == "not_applicable"
    assert resolved.missing == ("num_key_value_heads",)
    fixed = resolve_model(str(path), overrides=parse_overrides(["num_key_value_heads=4"]))
    assert fixed.spec is not None and fixed.spec.layers[0].num_kv_heads == 4
    entry = fixed.spec.ledger_entry("num_key_value_heads")
    assert entry is not None and entry.source == "user"


def test_set_conflicting_with_config_is_flagged_and_unused_set_refused() -> None:
    resolved = resolve_model("meta-llama/Llama-3.1-8B", overrides={"num_key_value_heads": 4})
    assert resolved.spec is not None
    entry = resolved.spec.ledger_entry("num_key_value_heads")
    assert entry is not None and entry.conflict and "--set wins" in entry.conflict
    with pytest.raises(ConfigError, match="not_a_key"):
        resolve_model("meta-llama/Llama-3.1-8B", overrides={"not_a_key": 1})


def test_bad_inputs_are_spec_errors(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json", encoding="utf-8")
    with pytest.raises(SpecError, match="not valid JSON"):
        resolve_model(str(bad))
    with pytest.raises(SpecError, match="kvbudget models"):
        resolve_model("no such thing at all")
    bad.write_text(json.dumps({**LLAMA_8B, "num_key_value_heads": "eight"}), encoding="utf-8")
    with pytest.raises(SpecError, match="num_key_value_heads"):
        resolve_model(str(bad))


def test_kv_heads_must_divide_query_heads() -> None:
    # 32 query heads cannot be split into groups over 3 KV heads (32 % 3 = 2): the model cannot run
    with pytest.raises(SpecError, match="num_key_value_heads: 3 does not divide") as err:
        resolve_model("meta-llama/Llama-3.1-8B", overrides={"num_key_value_heads": 3})
    assert err.value.field == "num_key_value_heads"
    assert "\n" not in str(err.value)
    # 32 % 4 == 0 is fine (8 query heads per KV head)
    assert resolve_model("meta-llama/Llama-3.1-8B", overrides={"num_key_value_heads": 4}).spec


def test_gpt_bigcode_multi_query_wins_and_a_stray_kv_heads_is_flagged(tmp_path: Path) -> None:
    """GPTBigCodeConfig derives num_key_value_heads from multi_query (1 when true) and the
    modeling code caches ``1 if multi_query else n_head`` heads (transformers 5,
    models/gpt_bigcode); a config that also says 2 is inconsistent and the ledger says so."""
    config = {
        "architectures": ["GPTBigCodeForCausalLM"],
        "model_type": "gpt_bigcode",
        "n_embd": 256,
        "n_head": 4,
        "n_layer": 8,
        "multi_query": True,
        "torch_dtype": "bfloat16",
    }
    path = tmp_path / "config.json"
    for stray, conflict in ((None, False), (1, False), (2, True)):
        raw = config if stray is None else {**config, "num_key_value_heads": stray}
        path.write_text(json.dumps(raw), encoding="utf-8")
        resolved = resolve_model(str(path))
        assert resolved.spec is not None and resolved.spec.num_kv_heads() == 1
        entry = resolved.spec.ledger_entry("num_key_value_heads")
        flagged = entry is not None and "num_key_value_heads=2" in (entry.conflict or "")
        assert flagged == conflict, stray
