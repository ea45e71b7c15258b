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
import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gguf  # a sibling script, not a package


@dataclass(frozen=True, slots=True)
class DsaDims:
    num_layers: int = 4
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
    cache = tiny_gguf.llamacpp_cache_dir()
    gguf = tiny_gguf._import_gguf(cache / "gguf-py")
    reader = gguf.GGUFReader(str(cache / "models" / "ggml-vocab-llama-bpe.gguf"))
    tokens = tiny_gguf._field(reader, "tokenizer.ggml.tokens")
    vocab_size = len(tokens)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray[Any, Any]:
        # numpy shape is ggml's reversed: (ne2, ne1, ne0)
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray[Any, Any]:
        return np.ones(n, dtype=np.float32)

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp_path), arch=arch)
    w.add_name(f"kvbudget-tiny-{arch}-random-seed{seed}")
    w.add_block_count(d.num_layers)
    w.add_context_length(d.context_length)
    w.add_embedding_length(d.hidden_size)
    w.add_feed_forward_length(d.ffn_size)
    w.add_head_count(d.num_heads)
    w.add_head_count_kv(1)  # conversion/deepseek.py line 326: MLA as MQA
    w.add_key_length(d.kv_lora_rank + d.qk_rope_head_dim)
    w.add_value_length(d.kv_lora_rank)
    w.add_key_length_mla(d.qk_nope_head_dim + d.qk_rope_head_dim)
    w.add_value_length_mla(d.v_head_dim)
    w.add_q_lora_rank(d.q_lora_rank)
    w.add_kv_lora_rank(d.kv_lora_rank)
    w.add_rope_dimension_count(d.qk_rope_head_dim)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_leading_dense_block_count(d.num_layers)
    w.add_expert_feed_forward_length(128)
    w.add_expert_shared_count(1)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    w.add_indexer_head_count(d.index_n_heads)
    w.add_indexer_key_length(d.index_head_dim)
    w.add_indexer_top_k(d.index_topk)
    if indexer_types is not None:
        w.add_indexer_types([c == "F" for c in indexer_types])
    w.add_vocab_size(vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tiny_gguf.add_llama_bpe_tokenizer(w, reader)

    h, heads = d.hidden_size, d.num_heads
    w.add_tensor("token_embd.weight", weight(vocab_size, h))
    w.add_tensor("output_norm.weight", ones(h))
    w.add_tensor("output.weight", weight(vocab_size, h))
    for i in range(d.num_layers):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", ones(h))
        w.add_tensor(p + "attn_q_a_norm.weight", ones(d.q_lora_rank))
        w.add_tensor(p + "attn_kv_a_norm.weight", ones(d.kv_lora_rank))
        w.add_tensor(p + "attn_q_a.weight", weight(d.q_lora_rank, h))
        q_dim = heads * (d.qk_nope_head_dim + d.qk_rope_head_dim)
        w.add_tensor(p + "attn_q_b.weight", weight(q_dim, d.q_lora_rank))
        w.add_tensor(p + "attn_kv_a_mqa.weight", weight(d.kv_lora_rank + d.qk_rope_head_dim, h))
        w.add_tensor(p + "attn_k_b.weight", weight(heads, d.kv_lora_rank, d.qk_nope_head_dim))
        w.add_tensor(p + "attn_v_b.weight", weight(heads, d.v_head_dim, d.kv_lora_rank))
        w.add_tensor(p + "attn_output.weight", weight(h, heads * d.v_head_dim))
        w.add_tensor(p + "ffn_norm.weight", ones(h))
        w.add_tensor(p + "indexer.k_norm.weight", ones(d.index_head_dim))
        w.add_tensor(p + "indexer.k_norm.bias", np.zeros(d.index_head_dim, dtype=np.float32))
        w.add_tensor(p + "indexer.proj.weight", weight(d.index_n_heads, h))
        w.add_tensor(p + "indexer.attn_k.weight", weight(d.index_head_dim, h))
        index_q = d.index_n_heads * d.index_head_dim
        w.add_tensor(p + "indexer.attn_q_b.weight", weight(index_q, d.q_lora_rank))
        w.add_tensor(p + "ffn_gate.weight", weight(d.ffn_size, h))
        w.add_tensor(p + "ffn_up.weight", weight(d.ffn_size, h))
        w.add_tensor(p + "ffn_down.weight", weight(h, d.ffn_size))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp_path.replace(out_path)
    config = hf_config(arch, indexer_types, d)
    out_path.with_suffix(".config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_path


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
