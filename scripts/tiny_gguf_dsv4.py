#!/usr/bin/env python3
"""Write a tiny random-weight DeepSeek-V4 GGUF (``deepseek4``) that llama.cpp loads and serves.

DeepSeek-V4's shape at toy size, with the keys and tensors llama.cpp 0c1e570 reads
(``src/models/deepseek4.cpp`` ``load_arch_hparams`` / ``load_arch_tensors``; the converter's
``conversion/deepseek.py`` ``DeepseekV4Model``): one shared K=V head (``head_count_kv`` 1,
``key_length`` = ``head_dim``), a sliding window, ``compress_ratios`` 0 / 4 (CSA, with the
lightning indexer) / 128 (HCA), hyper-connections (``hc_mult`` 4: the graph asserts it), MoE
with sqrt-softplus routing; no hash layers and no MTP layer. The Llama-3 tokenizer and writer are
``scripts/tiny_gguf.py``'s.

Next to ``OUT.gguf`` it writes ``OUT.config.json``, the same model as a Hugging Face config, so
``kvbudget calc --model OUT.config.json --engine llamacpp`` sizes what the server allocates.

Usage::

    python scripts/tiny_gguf_dsv4.py OUT.gguf [--seed 0]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tiny_gguf  # a sibling script, not a package

#: layer 0 sliding only, 1 and 3 CSA (ratio 4), 2 HCA (ratio 128)
COMPRESS_RATIOS = (0, 4, 128, 4)
HIDDEN = 256
HEADS = 4
HEAD_DIM = 128
ROPE_DIM = 32
Q_LORA_RANK = 64
O_GROUPS = 2
O_LORA_RANK = 64
HC_MULT = 4  # src/models/deepseek4.cpp: GGML_ASSERT(hc == 4)
EXPERTS = 4
EXPERTS_USED = 2
EXPERT_FFN = 64
INDEX_HEAD_DIM = 64
INDEX_HEADS = 2
SLIDING_WINDOW = 64
CONTEXT_LENGTH = 4096


def hf_config() -> dict[str, Any]:
    """The model as a ``DeepseekV4ForCausalLM`` config.json."""
    return {
        "architectures": ["DeepseekV4ForCausalLM"],
        "model_type": "deepseek_v4",
        "num_hidden_layers": len(COMPRESS_RATIOS),
        "compress_ratios": list(COMPRESS_RATIOS),
        "hidden_size": HIDDEN,
        "num_attention_heads": HEADS,
        "num_key_value_heads": 1,
        "head_dim": HEAD_DIM,
        "qk_rope_head_dim": ROPE_DIM,
        "q_lora_rank": Q_LORA_RANK,
        "o_groups": O_GROUPS,
        "o_lora_rank": O_LORA_RANK,
        "index_head_dim": INDEX_HEAD_DIM,
        "index_n_heads": INDEX_HEADS,
        "index_topk": 16,
        "sliding_window": SLIDING_WINDOW,
        "hc_mult": HC_MULT,
        "hc_sinkhorn_iters": 3,
        "hc_eps": 1e-6,
        "num_hash_layers": 0,
        "n_routed_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_USED,
        "n_shared_experts": 1,
        "moe_intermediate_size": EXPERT_FFN,
        "num_nextn_predict_layers": 0,
        "max_position_embeddings": CONTEXT_LENGTH,
        "rms_norm_eps": 1e-6,
        "vocab_size": 128256,
        "torch_dtype": "float16",
        "bos_token_id": 128000,
        "eos_token_id": 128009,
    }


def build_tiny_dsv4_gguf(out_path: Path, *, seed: int = 0) -> Path:
    """Write the model to ``out_path`` (atomically) and its HF config beside it."""
    t = tiny_gguf.TinyGguf(out_path, arch="deepseek4", seed=seed)
    w, weight, f32 = t.writer, t.weight, t.f32
    layers = len(COMPRESS_RATIOS)
    w.add_block_count(layers)
    w.add_context_length(CONTEXT_LENGTH)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(4 * EXPERT_FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(1)
    w.add_key_length(HEAD_DIM)  # conversion/base.py lines 1541-1543: head_dim
    w.add_value_length(HEAD_DIM)
    w.add_rope_dimension_count(ROPE_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_q_lora_rank(Q_LORA_RANK)
    w.add_sliding_window(SLIDING_WINDOW)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_expert_count(EXPERTS)
    w.add_expert_used_count(EXPERTS_USED)
    w.add_expert_feed_forward_length(EXPERT_FFN)
    w.add_expert_shared_count(1)
    w.add_expert_weights_scale(1.0)
    w.add_expert_weights_norm(True)
    w.add_swiglu_clamp_exp([10.0] * layers)
    w.add_swiglu_clamp_shexp([10.0] * layers)
    w.add_indexer_head_count(INDEX_HEADS)
    w.add_indexer_key_length(INDEX_HEAD_DIM)
    w.add_indexer_top_k(16)
    w.add_attention_output_group_count(O_GROUPS)
    w.add_attention_output_lora_rank(O_LORA_RANK)
    w.add_attention_compress_ratios(list(COMPRESS_RATIOS))
    w.add_attention_compress_rope_freq_base(10000.0)
    w.add_hyper_connection_count(HC_MULT)
    w.add_hyper_connection_sinkhorn_iterations(3)
    w.add_hyper_connection_epsilon(1e-6)
    w.add_hash_layer_count(0)
    w.add_embedding_length_out(HIDDEN * HC_MULT)
    w.add_expert_gating_func(t.gguf.ExpertGatingFuncType.SQRTSOFTPLUS)
    t.add_vocab()

    hc_dim, mix = HC_MULT * HIDDEN, (2 + HC_MULT) * HC_MULT
    t.add_embeddings(HIDDEN)
    w.add_tensor("output_hc_fn.weight", weight(HC_MULT, hc_dim))
    w.add_tensor("output_hc_base.weight", f32(1.0, HC_MULT))
    w.add_tensor("output_hc_scale.weight", f32(1.0, 1))
    for i, ratio in enumerate(COMPRESS_RATIOS):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", f32(1.0, HIDDEN))
        w.add_tensor(p + "attn_sinks.weight", f32(0.0, HEADS))
        w.add_tensor(p + "attn_q_a.weight", weight(Q_LORA_RANK, HIDDEN))
        w.add_tensor(p + "attn_q_a_norm.weight", f32(1.0, Q_LORA_RANK))
        w.add_tensor(p + "attn_q_b.weight", weight(HEADS * HEAD_DIM, Q_LORA_RANK))
        w.add_tensor(p + "attn_kv.weight", weight(HEAD_DIM, HIDDEN))
        w.add_tensor(p + "attn_kv_a_norm.weight", f32(1.0, HEAD_DIM))
        group_in = HEADS * HEAD_DIM // O_GROUPS
        w.add_tensor(p + "attn_output_a.weight", weight(O_GROUPS, O_LORA_RANK, group_in))
        w.add_tensor(p + "attn_output_b.weight", weight(HIDDEN, O_GROUPS * O_LORA_RANK))
        for part in ("attn", "ffn"):
            w.add_tensor(p + f"hc_{part}_fn.weight", weight(mix, hc_dim))
            w.add_tensor(p + f"hc_{part}_base.weight", f32(0.0, mix))
            w.add_tensor(p + f"hc_{part}_scale.weight", f32(1.0, 3))
        if ratio:
            rows = (2 if ratio == 4 else 1) * HEAD_DIM
            w.add_tensor(p + "attn_compressor_kv.weight", weight(rows, HIDDEN))
            w.add_tensor(p + "attn_compressor_gate.weight", weight(rows, HIDDEN))
            w.add_tensor(p + "attn_compressor_ape.weight", f32(0.0, ratio, rows))
            w.add_tensor(p + "attn_compressor_norm.weight", f32(1.0, HEAD_DIM))
        if ratio == 4:
            w.add_tensor(p + "indexer.proj.weight", weight(INDEX_HEADS, HIDDEN))
            w.add_tensor(
                p + "indexer.attn_q_b.weight", weight(INDEX_HEADS * INDEX_HEAD_DIM, Q_LORA_RANK)
            )
            w.add_tensor(p + "indexer_compressor_kv.weight", weight(2 * INDEX_HEAD_DIM, HIDDEN))
            w.add_tensor(p + "indexer_compressor_gate.weight", weight(2 * INDEX_HEAD_DIM, HIDDEN))
            w.add_tensor(p + "indexer_compressor_ape.weight", f32(0.0, ratio, 2 * INDEX_HEAD_DIM))
            w.add_tensor(p + "indexer_compressor_norm.weight", f32(1.0, INDEX_HEAD_DIM))
        w.add_tensor(p + "ffn_gate_inp.weight", weight(EXPERTS, HIDDEN))
        w.add_tensor(p + "exp_probs_b.bias", f32(0.0, EXPERTS))
        w.add_tensor(p + "ffn_norm.weight", f32(1.0, HIDDEN))
        w.add_tensor(p + "ffn_gate_exps.weight", weight(EXPERTS, EXPERT_FFN, HIDDEN))
        w.add_tensor(p + "ffn_up_exps.weight", weight(EXPERTS, EXPERT_FFN, HIDDEN))
        w.add_tensor(p + "ffn_down_exps.weight", weight(EXPERTS, HIDDEN, EXPERT_FFN))
        w.add_tensor(p + "ffn_gate_shexp.weight", weight(EXPERT_FFN, HIDDEN))
        w.add_tensor(p + "ffn_up_shexp.weight", weight(EXPERT_FFN, HIDDEN))
        w.add_tensor(p + "ffn_down_shexp.weight", weight(HIDDEN, EXPERT_FFN))
    return t.finish(hf_config())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="path of the .gguf file to write")
    parser.add_argument("--seed", type=int, default=0, help="weight RNG seed (default 0)")
    args = parser.parse_args(argv)
    print(build_tiny_dsv4_gguf(args.out, seed=args.seed))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
