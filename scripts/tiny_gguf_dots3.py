#!/usr/bin/env python3
"""Write a tiny random-weight Dots3-Note GGUF (``dots3note``) that llama.cpp loads.

The shape the vendored converter writes (``conversion/dots3.py`` ``Dots3NoteModel``, a
``DeepseekV2Model``): MLA stored as MQA (``head_count_kv`` 1, ``key_length = kv_lora_rank +
qk_rope_head_dim``) on the full (DSA) layers, with the lightning indexer's keys
(``indexer_types`` = the non-sliding layers); the sliding layers' own MLA geometry
(``kv_lora_rank_swa``, ``key_length_swa = swa_kv_lora_rank + qk_rope_head_dim``),
``sliding_window`` and ``sliding_window_pattern`` (lines 124-143). Tensors are those
``src/models/dots3note.cpp`` ``load_arch_tensors`` asks for (head-wise output gate, rope-key norm);
every layer has a dense FFN (``leading_dense_block_count`` = layers), no NextN layer.

Next to ``OUT.gguf`` it writes ``OUT.config.json``, the same model as the checkpoint's flat config
(``model_type`` dots3_note), so ``kvbudget calc --model OUT.config.json --engine llamacpp`` sizes
what the server allocates. Tokenizer, writer and cache directory are ``scripts/tiny_gguf.py``'s.

Usage::

    python scripts/tiny_gguf_dots3.py OUT.gguf [--layer-types FFSSSF]
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
class Dots3Dims:
    hidden_size: int = 256
    num_heads: int = 4  # both kinds (Dots3 asserts query heads == KV heads per kind)
    q_lora_rank: int = 64
    kv_lora_rank: int = 128  # full (DSA) layers
    swa_kv_lora_rank: int = 256  # sliding layers
    qk_rope_head_dim: int = 32  # shared by both kinds (conversion/dots3.py lines 63-65)
    qk_nope_head_dim: int = 32
    v_head_dim: int = 32
    sliding_window: int = 64
    index_head_dim: int = 64
    index_n_heads: int = 2
    index_topk: int = 16
    ffn_size: int = 512
    context_length: int = 4096


#: full (F) and sliding (S) layers: Dots3NoteTextConfig's default pattern for 6 layers (full on
#: 0, 1 and i % 4 == 1)
DEFAULT_LAYER_TYPES = "FFSSSF"


def hf_config(layer_types: str, d: Dots3Dims) -> dict[str, Any]:
    names = {"F": "full_attention", "S": "sliding_attention"}
    return {
        "architectures": ["Dots3NoteForCausalLM"],
        "model_type": "dots3_note",
        "num_hidden_layers": len(layer_types),
        "layer_types": [names[c] for c in layer_types],
        "hidden_size": d.hidden_size,
        "intermediate_size": d.ffn_size,
        "moe_intermediate_size": 128,
        "first_k_dense_replace": len(layer_types),
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_heads,
        "q_lora_rank": d.q_lora_rank,
        "kv_lora_rank": d.kv_lora_rank,
        "qk_rope_head_dim": d.qk_rope_head_dim,
        "qk_nope_head_dim": d.qk_nope_head_dim,
        "v_head_dim": d.v_head_dim,
        "sliding_window_size": d.sliding_window,
        "swa_num_attention_heads": d.num_heads,
        "swa_num_key_value_heads": d.num_heads,
        "swa_q_lora_rank": d.q_lora_rank,
        "swa_kv_lora_rank": d.swa_kv_lora_rank,
        "swa_qk_rope_head_dim": d.qk_rope_head_dim,
        "swa_qk_nope_head_dim": d.qk_nope_head_dim,
        "swa_head_dim": d.qk_nope_head_dim + d.qk_rope_head_dim,
        "swa_v_head_dim": d.v_head_dim,
        "index_head_dim": d.index_head_dim,
        "index_n_heads": d.index_n_heads,
        "index_topk": d.index_topk,
        "max_position_embeddings": d.context_length,
        "vocab_size": 128256,
        "torch_dtype": "float16",
        "bos_token_id": 128000,
        "eos_token_id": 128009,
    }


def build_tiny_dots3_gguf(
    out_path: Path,
    *,
    layer_types: str = DEFAULT_LAYER_TYPES,
    seed: int = 0,
    dims: Dots3Dims | None = None,
) -> Path:
    """Write the model to ``out_path`` (atomically) and its HF config beside it."""
    if not layer_types or set(layer_types) - {"F", "S"} or "F" not in layer_types:
        raise SystemExit(f"tiny_gguf_dots3: --layer-types {layer_types!r}: F/S, at least one F")
    d = dims or Dots3Dims()
    n = len(layer_types)
    sliding = [c == "S" for c in layer_types]
    cache = tiny_gguf.llamacpp_cache_dir()
    gguf = tiny_gguf._import_gguf(cache / "gguf-py")
    reader = gguf.GGUFReader(str(cache / "models" / "ggml-vocab-llama-bpe.gguf"))
    tokens = tiny_gguf._field(reader, "tokenizer.ggml.tokens")
    vocab_size = len(tokens)
    rng = np.random.default_rng(seed)

    def weight(*shape: int) -> np.ndarray[Any, Any]:
        # numpy shape is ggml's reversed: (ne2, ne1, ne0)
        return (rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    def ones(size: int) -> np.ndarray[Any, Any]:
        return np.ones(size, dtype=np.float32)

    rope, nope, v = d.qk_rope_head_dim, d.qk_nope_head_dim, d.v_head_dim
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    w = gguf.GGUFWriter(str(tmp_path), arch="dots3note")
    w.add_name(f"kvbudget-tiny-dots3note-random-seed{seed}")
    w.add_block_count(n)
    w.add_context_length(d.context_length)
    w.add_embedding_length(d.hidden_size)
    w.add_feed_forward_length(d.ffn_size)
    w.add_head_count(d.num_heads)
    w.add_head_count_kv(1)  # conversion/deepseek.py line 326: MLA as MQA
    w.add_key_length(d.kv_lora_rank + rope)  # conversion/deepseek.py lines 349-352
    w.add_value_length(d.kv_lora_rank)
    w.add_key_length_mla(nope + rope)
    w.add_value_length_mla(v)
    w.add_q_lora_rank(d.q_lora_rank)
    w.add_kv_lora_rank(d.kv_lora_rank)
    # the sliding layers' geometry (conversion/dots3.py lines 124-132)
    w.add_sliding_window(d.sliding_window)
    w.add_sliding_window_pattern(sliding)
    w.add_kv_lora_rank_swa(d.swa_kv_lora_rank)
    w.add_key_length_swa(d.swa_kv_lora_rank + rope)
    w.add_value_length_swa(d.swa_kv_lora_rank)
    w.add_key_length_mla_swa(nope + rope)
    w.add_value_length_mla_swa(v)
    w.add_rope_dimension_count(rope)
    w.add_rope_freq_base(10000.0)
    w.add_rope_freq_base_swa(10000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_leading_dense_block_count(n)
    w.add_expert_feed_forward_length(128)
    w.add_expert_shared_count(1)
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
    # the DSA indexer on the full layers (conversion/dots3.py lines 140-143)
    w.add_indexer_head_count(d.index_n_heads)
    w.add_indexer_key_length(d.index_head_dim)
    w.add_indexer_top_k(d.index_topk)
    w.add_indexer_types([not s for s in sliding])
    w.add_vocab_size(vocab_size)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    tiny_gguf.add_llama_bpe_tokenizer(w, reader)

    h, heads = d.hidden_size, d.num_heads
    w.add_tensor("token_embd.weight", weight(vocab_size, h))
    w.add_tensor("output_norm.weight", ones(h))
    w.add_tensor("output.weight", weight(vocab_size, h))
    for i in range(n):
        p = f"blk.{i}."
        rank = d.swa_kv_lora_rank if sliding[i] else d.kv_lora_rank
        w.add_tensor(p + "attn_norm.weight", ones(h))
        w.add_tensor(p + "attn_q_a_norm.weight", ones(d.q_lora_rank))
        w.add_tensor(p + "attn_kv_a_norm.weight", ones(rank))
        w.add_tensor(p + "attn_k_norm.weight", ones(rope))
        w.add_tensor(p + "attn_q_a.weight", weight(d.q_lora_rank, h))
        w.add_tensor(p + "attn_q_b.weight", weight(heads * (nope + rope), d.q_lora_rank))
        w.add_tensor(p + "attn_kv_a_mqa.weight", weight(rank + rope, h))
        w.add_tensor(p + "attn_k_b.weight", weight(heads, rank, nope))
        w.add_tensor(p + "attn_v_b.weight", weight(heads, v, rank))
        w.add_tensor(p + "attn_output.weight", weight(h, heads * v))
        w.add_tensor(p + "attn_gate.weight", weight(heads, h))
        w.add_tensor(p + "ffn_norm.weight", ones(h))
        if not sliding[i]:
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
    config = hf_config(layer_types, d)
    out_path.with_suffix(".config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out_path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="path of the .gguf file to write")
    parser.add_argument("--layer-types", default=DEFAULT_LAYER_TYPES, help="F/S per layer")
    parser.add_argument("--seed", type=int, default=0, help="weight RNG seed (default 0)")
    args = parser.parse_args(argv)
    print(build_tiny_dots3_gguf(args.out, layer_types=args.layer_types, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
