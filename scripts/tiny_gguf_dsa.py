#!/usr/bin/env python3
"""Write a tiny random-weight DSA GGUF (``deepseek32`` or ``glm-dsa``) that llama.cpp loads.

The DeepSeek-V3.2 / GLM-5 shape at toy size, as the vendored converter writes it
(``conversion/deepseek.py`` ``DeepseekV2Model.set_gguf_parameters`` / ``DeepseekV32Model``,
``conversion/glm.py`` ``GlmMoeDsaModel``): MLA stored as MQA (``head_count_kv`` 1,
``key_length = kv_lora_rank + qk_rope_head_dim``), the lightning indexer's keys, and for
``glm-dsa`` optionally ``indexer_types`` (``--indexer-types FSSF``: F = "full", S = "shared").
Tensors are those ``src/models/deepseek32.cpp`` / ``glm-dsa.cpp`` ``load_arch_tensors`` ask for;
every layer has a dense FFN (``leading_dense_block_count`` = layers), no NextN layer.

Next to ``OUT.gguf`` it writes ``OUT.config.json``, the same model as a Hugging Face config, so
``kvbudget calc --model OUT.config.json --engine llamacpp`` sizes what the server allocates.
Tokenizer, writer and cache directory are ``scripts/tiny_gguf.py``'s.

Usage::

    python scripts/tiny_gguf_dsa.py OUT.gguf [--arch deepseek32|glm-dsa] [--indexer-types FSSF]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gguf  # a sibling script, not a package


@dataclass(frozen=True, slots=True)
class MlaDims:
    """The MLA attention, DSA indexer and dense FFN dims of a tiny DeepseekV2-shaped model (the
    DSA models here; Dots3-Note's full layers, ``scripts/tiny_gguf_dots3.py``)."""

    hidden_size: int = 256
    num_heads: int = 4
    q_lora_rank: int = 64
    kv_lora_rank: int = 128
    qk_rope_head_dim: int = 32
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    index_head_dim: int = 64
    index_n_heads: int = 2
    index_topk: int = 16
    ffn_size: int = 512
    context_length: int = 4096


@dataclass(frozen=True, slots=True)
class DsaDims(MlaDims):
    num_layers: int = 4


ARCHS = {"deepseek32": "deepseek_v32", "glm-dsa": "glm_moe_dsa"}
HF_ARCHITECTURES = {"deepseek32": "DeepseekV32ForCausalLM", "glm-dsa": "GlmMoeDsaForCausalLM"}


def hf_config(arch: str, indexer_types: str | None, d: DsaDims) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": [HF_ARCHITECTURES[arch]],
        "model_type": ARCHS[arch],
        "num_hidden_layers": d.num_layers,
        "hidden_size": d.hidden_size,
        "intermediate_size": d.ffn_size,
        "moe_intermediate_size": 128,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_heads,
        "q_lora_rank": d.q_lora_rank,
        "kv_lora_rank": d.kv_lora_rank,
        "qk_rope_head_dim": d.qk_rope_head_dim,
        "qk_nope_head_dim": d.qk_nope_head_dim,
        "v_head_dim": d.v_head_dim,
        "index_head_dim": d.index_head_dim,
        "index_n_heads": d.index_n_heads,
        "index_topk": d.index_topk,
        "first_k_dense_replace": d.num_layers,
        "max_position_embeddings": d.context_length,
        "vocab_size": 128256,
        "torch_dtype": "float16",
        "bos_token_id": 128000,
        "eos_token_id": 128009,
    }
    if indexer_types is not None:
        config["indexer_types"] = [{"F": "full", "S": "shared"}[c] for c in indexer_types]
    return config


def build_tiny_dsa_gguf(
    out_path: Path,
    *,
    arch: str = "deepseek32",
    indexer_types: str | None = None,
    seed: int = 0,
    dims: DsaDims | None = None,
) -> Path:
    """Write the model to ``out_path`` (atomically) and its HF config beside it."""
    if arch not in ARCHS:
        raise SystemExit(f"tiny_gguf_dsa: --arch {arch!r}; use one of {sorted(ARCHS)}")
    d = dims or DsaDims()
    if indexer_types is not None and (
        arch != "glm-dsa" or len(indexer_types) != d.num_layers or set(indexer_types) - {"F", "S"}
    ):
        raise SystemExit(f"tiny_gguf_dsa: --indexer-types needs glm-dsa and {d.num_layers} of F/S")
    t = tiny_gguf.TinyGguf(out_path, arch=arch, seed=seed)
    add_mla_params(t, d, d.num_layers)
    if indexer_types is not None:
        t.writer.add_indexer_types([c == "F" for c in indexer_types])
    t.add_vocab()

    t.add_embeddings(d.hidden_size)
    for i in range(d.num_layers):
        p = f"blk.{i}."
        add_mla_tensors(t, p, d, d.kv_lora_rank)
        add_indexer_tensors(t, p, d)
        add_ffn_tensors(t, p, d)
    return t.finish(hf_config(arch, indexer_types, d))


def add_mla_params(t: tiny_gguf.TinyGguf, d: MlaDims, num_layers: int) -> None:
    """The keys ``DeepseekV2Model.set_gguf_parameters`` writes (``conversion/deepseek.py``):
    MLA stored as MQA, a dense FFN on every layer (``leading_dense_block_count`` = layers), the
    DSA indexer's heads."""
    w = t.writer
    w.add_block_count(num_layers)
    w.add_context_length(d.context_length)
    w.add_embedding_length(d.hidden_size)
    w.add_feed_forward_length(d.ffn_size)
    w.add_head_count(d.num_heads)
    w.add_head_count_kv(1)  # conversion/deepseek.py line 326: MLA as MQA
    w.add_key_length(d.kv_lora_rank + d.qk_rope_head_dim)  # conversion/deepseek.py lines 349-352
    w.add_value_length(d.kv_lora_rank)
    w.add_key_length_mla(d.qk_nope_head_dim + d.qk_rope_head_dim)
    w.add_value_length_mla(d.v_head_dim)
    w.add_q_lora_rank(d.q_lora_rank)
    w.add_kv_lora_rank(d.kv_lora_rank)
    w.add_rope_dimension_count(d.qk_rope_head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_leading_dense_block_count(num_layers)
    w.add_expert_feed_forward_length(128)
    w.add_expert_shared_count(1)
    w.add_expert_gating_func(t.gguf.ExpertGatingFuncType.SIGMOID)
    w.add_indexer_head_count(d.index_n_heads)
    w.add_indexer_key_length(d.index_head_dim)
    w.add_indexer_top_k(d.index_topk)


def add_mla_tensors(t: tiny_gguf.TinyGguf, p: str, d: MlaDims, rank: int) -> None:
    """Layer ``p``'s MLA attention with a latent of ``rank`` (``kv_lora_rank``)."""
    w, h, heads = t.writer, d.hidden_size, d.num_heads
    rope, nope, v = d.qk_rope_head_dim, d.qk_nope_head_dim, d.v_head_dim
    w.add_tensor(p + "attn_norm.weight", t.f32(1.0, h))
    w.add_tensor(p + "attn_q_a_norm.weight", t.f32(1.0, d.q_lora_rank))
    w.add_tensor(p + "attn_kv_a_norm.weight", t.f32(1.0, rank))
    w.add_tensor(p + "attn_q_a.weight", t.weight(d.q_lora_rank, h))
    w.add_tensor(p + "attn_q_b.weight", t.weight(heads * (nope + rope), d.q_lora_rank))
    w.add_tensor(p + "attn_kv_a_mqa.weight", t.weight(rank + rope, h))
    w.add_tensor(p + "attn_k_b.weight", t.weight(heads, rank, nope))
    w.add_tensor(p + "attn_v_b.weight", t.weight(heads, v, rank))
    w.add_tensor(p + "attn_output.weight", t.weight(h, heads * v))


def add_indexer_tensors(t: tiny_gguf.TinyGguf, p: str, d: MlaDims) -> None:
    """Layer ``p``'s lightning indexer (its keys are what llama.cpp's indexer cache holds)."""
    w = t.writer
    w.add_tensor(p + "indexer.k_norm.weight", t.f32(1.0, d.index_head_dim))
    w.add_tensor(p + "indexer.k_norm.bias", t.f32(0.0, d.index_head_dim))
    w.add_tensor(p + "indexer.proj.weight", t.weight(d.index_n_heads, d.hidden_size))
    w.add_tensor(p + "indexer.attn_k.weight", t.weight(d.index_head_dim, d.hidden_size))
    index_q = d.index_n_heads * d.index_head_dim
    w.add_tensor(p + "indexer.attn_q_b.weight", t.weight(index_q, d.q_lora_rank))


def add_ffn_tensors(t: tiny_gguf.TinyGguf, p: str, d: MlaDims) -> None:
    """Layer ``p``'s dense FFN and its norm."""
    w, h = t.writer, d.hidden_size
    w.add_tensor(p + "ffn_norm.weight", t.f32(1.0, h))
    w.add_tensor(p + "ffn_gate.weight", t.weight(d.ffn_size, h))
    w.add_tensor(p + "ffn_up.weight", t.weight(d.ffn_size, h))
    w.add_tensor(p + "ffn_down.weight", t.weight(h, d.ffn_size))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="path of the .gguf file to write")
    parser.add_argument("--arch", choices=sorted(ARCHS), default="deepseek32")
    parser.add_argument("--indexer-types", default=None, help="glm-dsa: F/S per layer, e.g. FSSF")
    parser.add_argument("--seed", type=int, default=0, help="weight RNG seed (default 0)")
    args = parser.parse_args(argv)
    print(
        build_tiny_dsa_gguf(
            args.out, arch=args.arch, indexer_types=args.indexer_types, seed=args.seed
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
