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
what the server allocates. Tokenizer, writer and cache directory are ``scripts/tiny_gguf.py``'s;
the MLA keys and tensors, indexer and dense FFN ``scripts/tiny_gguf_dsa.py``'s.

Usage::

    python scripts/tiny_gguf_dots3.py OUT.gguf [--layer-types FFSSSF]
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gguf  # a sibling script, not a package
from tiny_gguf_dsa import (
    MlaDims,
    add_ffn_tensors,
    add_indexer_tensors,
    add_mla_params,
    add_mla_tensors,
)


@dataclass(frozen=True, slots=True)
class Dots3Dims(MlaDims):
    """``MlaDims`` (the full, DSA layers; ``num_heads`` for both kinds: Dots3 asserts query heads
    == KV heads per kind, ``qk_rope_head_dim`` shared, ``conversion/dots3.py`` lines 63-65) and
    the sliding layers' own latent and window."""

    swa_kv_lora_rank: int = 256
    sliding_window: int = 64


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
    t = tiny_gguf.TinyGguf(out_path, arch="dots3note", seed=seed)
    add_mla_params(t, d, n)
    # the sliding layers' geometry (conversion/dots3.py lines 124-132)
    w, rope = t.writer, d.qk_rope_head_dim
    w.add_sliding_window(d.sliding_window)
    w.add_sliding_window_pattern(sliding)
    w.add_kv_lora_rank_swa(d.swa_kv_lora_rank)
    w.add_key_length_swa(d.swa_kv_lora_rank + rope)
    w.add_value_length_swa(d.swa_kv_lora_rank)
    w.add_key_length_mla_swa(d.qk_nope_head_dim + rope)
    w.add_value_length_mla_swa(d.v_head_dim)
    w.add_rope_freq_base_swa(10000.0)
    # the DSA indexer on the full layers (conversion/dots3.py lines 140-143)
    w.add_indexer_types([not s for s in sliding])
    t.add_vocab()

    t.add_embeddings(d.hidden_size)
    for i in range(n):
        p = f"blk.{i}."
        add_mla_tensors(t, p, d, d.swa_kv_lora_rank if sliding[i] else d.kv_lora_rank)
        w.add_tensor(p + "attn_k_norm.weight", t.f32(1.0, rope))
        w.add_tensor(p + "attn_gate.weight", t.weight(d.num_heads, d.hidden_size))
        if not sliding[i]:
            add_indexer_tensors(t, p, d)
        add_ffn_tensors(t, p, d)
    return t.finish(hf_config(layer_types, d))


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
