"""``calc --from-transformers``: the layer structure read from transformers itself.

Configs are tiny variants of transformers' own defaults (``tiny_configs.py``). Expected bytes are
worked by hand from those configs' fields (below, per case), and the table path (without the
flag) must give the same bytes for every engine layout the model allows.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.peer import tiny_configs
from tests.unit.calc.helpers_calc import run_main

#: model_type -> (tokens, hf bytes for 1 sequence, worked by hand)
HAND: dict[str, tuple[int, int]] = {
    # dense: 8 layers x 2 KV heads x (64 + 64) x 2 bytes = 4,096 B/token; x 48 tokens
    "llama": (48, 196_608),
    # sliding hybrid: Gemma-2 layer_types alternate sliding (window 128) and full; 2 KV heads,
    # head_dim 64, bf16 = 512 B per layer-token. transformers keeps window - 1 = 127 tokens:
    # 4 x 512 x 300 + 4 x 512 x 127 = 614,400 + 260,096
    "gemma2": (300, 874_496),
    # MLA: transformers caches the latent (kv_lora_rank 512) and the rotary key (64):
    # 8 layers x 576 x 2 bytes x 48 tokens
    "deepseek_v2": (48, 442_368),
    # mamba hybrid: Jamba, 1 attention layer (period 8, offset 4) and 7 Mamba layers.
    # attention: 2 KV heads x (64 + 64) x 2 B = 512 B/token x 48 = 24,576;
    # Mamba: intermediate 2 x 256 = 512; conv 512 x d_conv 4 x 2 B = 4,096, ssm 512 x d_state
    # 16 x 4 B (float32) = 32,768; 7 x 36,864 = 258,048
    "jamba": (48, 282_624),
    # lightning attention: MiniMax layer_types alternate full and linear_attention. full: 4 x 2 KV
    # heads x 128 x 2 B = 2,048 B/token x 48 = 98,304; linear state (MiniMaxCache.linear_cache,
    # outside cache.layers) 4 heads x 64 x 64 x 2 B = 32,768 per layer, x 4 = 131,072
    "minimax": (48, 229_376),
    # parallel hybrid: every Falcon-H1 layer holds attention and a Mamba-2 state
    # (LinearAttentionAndFullAttentionLayer). attention: 2 KV heads x (64 + 64) x 2 B x 48 tokens
    # = 24,576; conv (d_ssm 1024 + 2 x 1 group x d_state 256) = 1,536 channels x d_conv 4 x 2 B
    # = 12,288; ssm 128 heads x d_head 8 x d_state 256 x 4 B (float32) = 1,048,576.
    # 8 x 1,085,440
    "falcon_h1": (48, 8_683_520),
    # DSA (issue #34): every indexed_attention layer keeps the MLA latent (512 + 64) and the
    # indexer's key (DynamicIndexedLayer.indexer_keys, index_head_dim 128); before, only the
    # latent was counted (18 % short): 8 x (576 + 128) x 2 B x 48 tokens
    "deepseek_v32": (48, 540_672),
    # Dots3-Note (issue #34): indexed layers 0, 1, 5 keep the latent (512 + 64) in bf16 and the
    # indexer key (128) in float32 (modeling_dots3_note.py lines 746-752, 262-266); sliding
    # layers 2, 3, 4, 6, 7 their per_layer_config latent (1024 + 64) in bf16 for window - 1 =
    # 127 tokens: 3 x 144 x (1,152 + 512) + 5 x 127 x 2,176 = 718,848 + 1,381,760
    "dots3_note_text": (144, 2_100_608),
}

#: layouts that apply to each case at tp=pp=1 (llama.cpp has no MLA or Mamba-hybrid layout here)
ENGINES: dict[str, tuple[str, ...]] = {
    "llama": ("hf", "vllm", "sglang", "llamacpp"),
    "gemma2": ("hf", "vllm", "sglang", "llamacpp"),
    "deepseek_v2": ("hf", "vllm", "sglang"),
    "jamba": ("hf", "vllm"),
    "minimax": ("hf", "vllm"),
    "falcon_h1": ("hf", "vllm", "sglang", "llamacpp"),
    "deepseek_v32": ("hf", "vllm", "llamacpp"),  # sglang refuses a tiny DSA (index_head_dim != 128)
    "dots3_note_text": ("hf",),  # the engine layouts refuse its sliding MLA layers
}


def write_config(model_type: str, tmp_path: Path) -> Path:
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    arch = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES[model_type]
    raw = tiny_configs.config_dict(model_type, tiny=True, architecture=arch)
    path = tmp_path / f"{model_type}.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    return path


def calc(path: Path, tokens: int, engine: str, *extra: str) -> dict[str, Any]:
    argv = ["calc", "--model", str(path), "--tokens", str(tokens), "--engine", engine, "--json"]
    code, out, err = run_main([*argv, *extra])
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(HAND))
def test_from_transformers_matches_hand_bytes_and_the_table(
    model_type: str, tmp_path: Path
) -> None:
    path = write_config(model_type, tmp_path)
    tokens, hand_bytes = HAND[model_type]
    read = calc(path, tokens, "hf", "--from-transformers")
    assert read["bytes_per_sequence"] == hand_bytes
    entry = next(e for e in read["ledger"] if e["field"] == "layer_structure")
    assert "transformers" in entry["location"] and "meta device" in entry["location"]
    assert "equal kvbudget's table" in entry["note"]
    for engine in ENGINES[model_type]:
        table = calc(path, tokens, engine)
        ours = calc(path, tokens, engine, "--from-transformers")
        for key in ("bytes_per_token", "bytes_per_sequence", "total_bytes", "status"):
            assert ours[key] == table[key], f"{model_type} {engine} {key}"


@pytest.mark.slow
def test_unread_cache_tensors_refuse_rather_than_give_a_partial_sum(tmp_path: Path) -> None:
    """DeepSeek-V4: transformers' DeepseekV4HCACache / CSACache hold, beside the window's keys
    and values, the compressor's ``buffer_kv`` / ``buffer_gate`` / ``compressed_kv`` dicts of
    tensors: before issue #34 --from-transformers summed keys and values only (260,096 B where the
    cache holds 287,872 B at 300 tokens); it refuses, naming the tensor. The table models these
    layers (tests/unit/spec/test_deepseek_v4.py) and gives the number transformers holds."""
    path = write_config("deepseek_v4", tmp_path)
    code, out, _ = run_main(["calc", "--model", str(path), "--tokens", "300", "--engine", "hf"])
    assert code == 0, out  # the table alone: exact
    assert "287,872" in out or "287872" in out, out
    code, out, err = run_main(
        ["calc", "--model", str(path), "--tokens", "300", "--engine", "hf", "--from-transformers"]
    )
    assert code == 3, out
    assert "buffer_kv" in out + err and "partial" in out + err


def test_without_transformers_one_line_saying_how_to_install(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps(
            {
                "model_type": "llama",
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 2,
                "num_key_value_heads": 1,
                "torch_dtype": "bfloat16",
            }
        ),
        encoding="utf-8",
    )
    code = (
        "import sys; sys.modules['transformers'] = None; sys.modules['torch'] = None\n"
        "from kvbudget.cli.main import main\n"
        f"main(['calc', '--model', {str(path)!r}, '--tokens', '8', '--from-transformers'])"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=300
    )
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(lines) == 1 and "pip install transformers torch" in lines[0], proc.stderr


def test_explicit_mode_refuses_from_transformers() -> None:
    argv = ["calc", "--layers", "2", "--kv-heads", "1", "--head-dim", "8", "--dtype-bytes", "2"]
    code, out, err = run_main([*argv, "--tokens", "8", "--from-transformers"])
    assert code == 2 and out == "" and "--from-transformers" in err


def test_a_cache_tensor_kvbudget_does_not_read_is_named() -> None:
    """A floating tensor beside K/V that is not understood: no partial sum (issue #34)."""
    import torch

    from kvbudget.spec.from_transformers import read_layers

    class Layer:
        def __init__(self, **tensors: Any) -> None:
            self.__dict__.update(tensors)

    class Cache:
        def __init__(self, layers: list[Any]) -> None:
            self.layers = layers

    kv = {"keys": torch.zeros(1, 2, 3, 8), "values": torch.zeros(1, 2, 3, 8)}
    indexed = Layer(**kv, indexer_keys=torch.zeros(1, 3, 16))
    stray = Layer(**kv, compressed_keys=torch.zeros(1, 3, 4))
    entries = read_layers(Cache([indexed, stray]), object())
    assert entries[0]["index_head_dim"] == 16 and "unknown" not in entries[0]
    assert entries[1]["unknown"] == "compressed_keys"


def test_a_per_layer_config_is_read_not_a_crash(tmp_path: Path) -> None:
    """transformers' heterogeneous configs (dots3_note_text, transformers 5.x) give some fields
    per layer and raise when one is read as a global value; --from-transformers once crashed on
    that error (InternalError, exit 70), then refused. Since issue #34 models Dots3-Note, the
    reading agrees with the table: transformers' full default (46 layers, no dtype: float32),
    13 indexed layers (0, 1 and i % 4 == 1) x 100 tokens x (576 latent + 128 indexer key) x 4 B
    + 33 sliding layers x 100 x (1024 + 64) x 4 B (window 512) = 3,660,800 + 14,361,600."""
    from transformers import CONFIG_MAPPING

    config = CONFIG_MAPPING["dots3_note_text"]()
    refused = []
    for name in ("hidden_size", "num_attention_heads", "vocab_size", "max_position_embeddings"):
        try:
            getattr(config, name)
        except Exception:  # the independent fact: transformers refuses this read
            refused.append(name)
    assert refused, "transformers now gives every field globally: pick another heterogeneous type"
    model = tmp_path / "dots3"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config.to_dict(), default=str), "utf-8")
    read = calc(model, 100, "hf", "--from-transformers")
    table = calc(model, 100, "hf")
    assert read["bytes_per_sequence"] == table["bytes_per_sequence"] == 18_022_400
