#!/usr/bin/env python3
"""Write a tiny random-weight GGUF model that llama.cpp's `llama-server` can load.

Three variants, all with the real Llama-3 BPE tokenizer (copied from the vocab-only file
`ggml-vocab-llama-bpe.gguf` that ships with llama.cpp) and seeded N(0, 0.02) f16 weights:

* ``llama``  - 4 layers, GQA 8 query heads / 2 KV heads, head_dim 32, hidden 256, FFN 512,
  every layer full attention.
* ``gemma2`` - the same dims with Gemma-2's interleaved sliding-window attention: llama.cpp marks
  layers 0 and 2 as sliding (window ``--sliding-window`` tokens, default 128) and layers 1 and 3
  as full attention, and gives the sliding layers their own, smaller KV cache.
* ``minimax-m3`` - llama.cpp's ``LLM_ARCH_MINIMAX_M3`` (``src/llama-arch.cpp`` line 140) in 3
  layers: layer 0 a leading dense layer (``leading_dense_block_count`` 1), layers 1-2 MoE (4
  experts, 2 used, 1 shared) with the MSA indexer (2 heads of ``indexer_key_length`` 32); 4 query
  / 2 KV heads of head_dim 64 with partial rotary (32 dims). Keys and tensors are the ones
  ``src/models/minimax-m3.cpp`` (``load_arch_hparams`` / ``load_arch_tensors``) requires, named as
  ``conversion/minimax.py`` (``MiniMaxM3Model``) writes them. llama.cpp serves it with
  ``llama_kv_cache_msa``: a main KV cache over every layer and an indexer cache on layers 1-2.

Next to ``OUT.gguf`` it writes ``OUT.config.json``: the same model as a Hugging Face config, so
``kvbudget calc --model OUT.config.json --engine llamacpp`` sizes exactly what the server loads.

The writer is the gguf-py package vendored in the same llama.cpp tree as the binary (cached by
``scripts/llama-server.sh``), so file format and binary always match.

Usage::

    python scripts/tiny_gguf.py OUT.gguf [--arch llama|gemma2|minimax-m3] [--seed 0]
        [--sliding-window 128]

Outputs are random weights: the text they generate is gibberish; they exist to exercise the
engine's memory layout, scheduler, prompt cache and metrics.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

DEFAULT_LLAMACPP_PY_VERSION = "0.3.36"
ARCHES = ("llama", "gemma2", "minimax-m3")

# Minimal Llama-3 chat template (the vocab-only file carries none).
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    " + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)


@dataclass(frozen=True, slots=True)
class TinyDims:
    """Model dimensions (the same for both variants)."""

    num_layers: int = 4
    hidden_size: int = 256
    num_heads: int = 8
    num_kv_heads: int = 2
    head_dim: int = 32
    ffn_size: int = 512
    context_length: int = 4096
    rope_base: float = 500000.0
    rms_eps: float = 1e-5


@dataclass(frozen=True, slots=True)
class TinyMsaDims:
    """The MiniMax-M3 extras: leading dense layers, experts, MSA indexer, partial rotary."""

    num_layers: int = 3
    dense_lead_layers: int = 1
    num_experts: int = 4
    experts_used: int = 2
    shared_experts: int = 1
    expert_ffn_size: int = 64
    num_heads: int = 4
    head_dim: int = 64  # differs from index_head_dim, so the indexer's K and V rows differ
    index_heads: int = 2  # one indexer head per GQA group (src/models/minimax-m3.cpp)
    # a whole number of q8_0 / q4_0 blocks (32): llama.cpp 0c1e570 aborts a quantized cache
    # whose indexer rows are shorter than a block (GGML_ASSERT in ggml.c, from llama_kv_cache)
    index_head_dim: int = 32
    index_block_tokens: int = 64
    index_top_k_blocks: int = 4
    index_local_blocks: int = 1
    rotary_dim: int = 32
    rope_base: float = 5000000.0
    rms_eps: float = 1e-6

    def attention(self, d: TinyDims) -> TinyDims:
        """The shared dims with this model's query heads and head_dim."""
        return replace(
            d, num_layers=self.num_layers, num_heads=self.num_heads, head_dim=self.head_dim
        )


def minimax_m3_hf_config(d: TinyDims, m: TinyMsaDims) -> dict[str, Any]:
    """The tiny MiniMax-M3 as its Hugging Face ``config.json`` (the catalog's MiniMax-M3 keys)."""
    moe_freq = [0] * m.dense_lead_layers + [1] * (m.num_layers - m.dense_lead_layers)
    return {
        "architectures": ["MiniMaxM3ForCausalLM"],
        "model_type": "minimax_m3",
        "num_hidden_layers": m.num_layers,
        "hidden_size": d.hidden_size,
        "dense_intermediate_size": d.ffn_size,
        "intermediate_size": m.expert_ffn_size,
        "moe_intermediate_size": m.expert_ffn_size,
        "shared_intermediate_size": m.expert_ffn_size * m.shared_experts,
        "first_k_dense_replace": m.dense_lead_layers,
        "moe_layer_freq": moe_freq,
        "num_local_experts": m.num_experts,
        "num_experts_per_tok": m.experts_used,
        "n_shared_experts": m.shared_experts,
        "routed_scaling_factor": 2.0,
        "scoring_func": "sigmoid",
        "use_routing_bias": True,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "head_dim": d.head_dim,
        "rotary_dim": m.rotary_dim,
        "partial_rotary_factor": m.rotary_dim / d.head_dim,
        "rope_theta": m.rope_base,
        "use_qk_norm": True,
        "qk_norm_type": "per_head",
        "hidden_act": "swigluoai",
        "max_position_embeddings": d.context_length,
        "rms_norm_eps": m.rms_eps,
        "sparse_attention_config": {
            "use_sparse_attention": True,
            "sparse_attention_freq": moe_freq,
            "sparse_index_dim": m.index_head_dim,
            "sparse_num_index_heads": m.index_heads,
            "sparse_block_size": m.index_block_tokens,
            "sparse_topk_blocks": m.index_top_k_blocks,
            "sparse_local_block": m.index_local_blocks,
        },
        "vocab_size": 128256,
        "torch_dtype": "float16",
        "tie_word_embeddings": False,
        "bos_token_id": 128000,
        "eos_token_id": 128009,
    }


def llamacpp_cache_dir() -> Path:
    """The directory `scripts/llama-server.sh` fills (binary, gguf-py, vocab files)."""
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    version = os.environ.get("KVBUDGET_LLAMACPP_PY_VERSION", DEFAULT_LLAMACPP_PY_VERSION)
    return root / "kvbudget" / "llama.cpp" / version


def hf_config(
    arch: str, sliding_window_tokens: int, dims: TinyDims | None = None
) -> dict[str, Any]:
    """The same model described as a Hugging Face ``config.json`` (what ``kvbudget calc`` reads)."""
    d = dims or TinyDims()
    if arch == "minimax-m3":
        m = TinyMsaDims()
        return minimax_m3_hf_config(m.attention(d), m)
    config: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM" if arch == "llama" else "Gemma2ForCausalLM"],
        "model_type": arch,
        "num_hidden_layers": d.num_layers,
        "hidden_size": d.hidden_size,
        "intermediate_size": d.ffn_size,
        "num_attention_heads": d.num_heads,
        "num_key_value_heads": d.num_kv_heads,
        "head_dim": d.head_dim,
        "max_position_embeddings": d.context_length,
        "rms_norm_eps": d.rms_eps,
        "vocab_size": 128256,
        "torch_dtype": "float16",
        "tie_word_embeddings": arch == "gemma2",
        "bos_token_id": 128000,
        "eos_token_id": 128009,
    }
    if arch == "llama":
        config["rope_theta"] = d.rope_base
    else:
        config["sliding_window"] = sliding_window_tokens
        config["attn_logit_softcapping"] = 50.0
        config["final_logit_softcapping"] = 30.0
    return config


def _import_gguf(gguf_py_dir: Path) -> Any:
    if not (gguf_py_dir / "gguf" / "__init__.py").is_file():
        raise SystemExit(
            f"tiny_gguf: gguf-py not found at {gguf_py_dir}; run `bash scripts/llama-server.sh` "
            "first (it caches the vendored gguf-py next to the binary) or pass --gguf-py DIR"
        )
    sys.path.insert(0, str(gguf_py_dir))
    import gguf

    return gguf


def _field(reader: Any, key: str) -> Any:
    field = reader.fields.get(key)
    if field is None:
        raise SystemExit(f"tiny_gguf: vocab file lacks '{key}'")
    return field.contents()


def add_llama_bpe_tokenizer(writer: Any, reader: Any) -> None:
    """Llama-3's tokenizer, read from llama.cpp's ``ggml-vocab-llama-bpe.gguf`` (``reader``), into
    ``writer``: its tokens, types and merges, BOS 128000, EOS 128009, the chat template."""
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(_field(reader, "tokenizer.ggml.tokens"))
    writer.add_token_types(_field(reader, "tokenizer.ggml.token_type"))
    writer.add_token_merges(_field(reader, "tokenizer.ggml.merges"))
    writer.add_bos_token_id(128000)
    writer.add_eos_token_id(128009)  # <|eot_id|>; llama.cpp also treats 128001 as end-of-generation
    writer.add_add_bos_token(True)
    writer.add_chat_template(CHAT_TEMPLATE)


class TinyGguf:
    """One tiny random-weight GGUF being written (the DSA, Dots3-Note and DeepSeek-V4 builders):
    gguf-py and the Llama-3 vocab from :func:`llamacpp_cache_dir`, f16 ``weight`` arrays drawn
    from one RNG seeded ``seed`` in call order, and ``writer`` on a temporary file beside
    ``out_path`` that :meth:`finish` moves into place with the model's HF config."""

    def __init__(self, out_path: Path, *, arch: str, seed: int) -> None:
        cache = llamacpp_cache_dir()
        self.gguf = _import_gguf(cache / "gguf-py")
        self.reader = self.gguf.GGUFReader(str(cache / "models" / "ggml-vocab-llama-bpe.gguf"))
        self.vocab_size = len(_field(self.reader, "tokenizer.ggml.tokens"))
        self.rng = np.random.default_rng(seed)
        self.out_path = Path(out_path)
        self.out_path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp_path = self.out_path.with_name(self.out_path.name + f".tmp{os.getpid()}")
        self.writer = self.gguf.GGUFWriter(str(self.tmp_path), arch=arch)
        self.writer.add_name(f"kvbudget-tiny-{arch}-random-seed{seed}")

    def weight(self, *shape: int) -> np.ndarray[Any, Any]:
        """N(0, 0.02) f16 weights; numpy's shape is ggml's reversed: (ne2, ne1, ne0)."""
        return (self.rng.standard_normal(shape, dtype=np.float32) * 0.02).astype(np.float16)

    @staticmethod
    def f32(value: float, *shape: int) -> np.ndarray[Any, Any]:
        """An f32 tensor of ``value`` (norms: 1.0; biases, sinks: 0.0)."""
        return np.full(shape, value, dtype=np.float32)

    def add_vocab(self) -> None:
        """The vocabulary size, the f16 file type and the Llama-3 tokenizer."""
        self.writer.add_vocab_size(self.vocab_size)
        self.writer.add_file_type(self.gguf.LlamaFileType.MOSTLY_F16)
        add_llama_bpe_tokenizer(self.writer, self.reader)

    def add_embeddings(self, hidden_size: int) -> None:
        """``token_embd``, ``output_norm`` and an untied ``output``."""
        self.writer.add_tensor("token_embd.weight", self.weight(self.vocab_size, hidden_size))
        self.writer.add_tensor("output_norm.weight", self.f32(1.0, hidden_size))
        self.writer.add_tensor("output.weight", self.weight(self.vocab_size, hidden_size))

    def finish(self, config: dict[str, Any]) -> Path:
        """Write the file, move it to ``out_path`` and ``config`` to ``OUT.config.json``."""
        w = self.writer
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
        self.tmp_path.replace(self.out_path)
        config_path = self.out_path.with_suffix(".config.json")
        config_path.write_text(json.dumps(config, indent=2) + "\n")
        return self.out_path


def build_tiny_gguf(
    out_path: Path,
    *,
    arch: str = "llama",
    seed: int = 0,
    sliding_window_tokens: int = 128,
    gguf_py_dir: Path | None = None,
    vocab_path: Path | None = None,
    dims: TinyDims | None = None,
) -> Path:
    """Write the model to ``out_path`` (atomically) and return the path."""
    if arch not in ARCHES:
        raise SystemExit(f"tiny_gguf: --arch {arch!r} is not supported; use one of {ARCHES}")
    d = dims or TinyDims()
    cache = llamacpp_cache_dir()
    gguf = _import_gguf(gguf_py_dir or cache / "gguf-py")
    vocab = vocab_path or cache / "models" / "ggml-vocab-llama-bpe.gguf"
    if not vocab.is_file():
        raise SystemExit(f"tiny_gguf: vocab file {vocab} not found; run scripts/llama-server.sh")

    reader = gguf.GGUFReader(str(vocab))
    tokens = _field(reader, "tokenizer.ggml.tokens")
    vocab_size = len(tokens)

    rng = np.random.default_rng(seed)

    def weight(rows: int, cols: int) -> np.ndarray[Any, Any]:
        # numpy shape (out, in); gguf stores the reversed shape (in, out) as ggml expects.
        return (rng.standard_normal((rows, cols), dtype=np.float32) * 0.02).astype(np.float16)

    def ones(n: int) -> np.ndarray[Any, Any]:
        return np.ones(n, dtype=np.float32)

    def weight32(*shape: int) -> np.ndarray[Any, Any]:
        return rng.standard_normal(shape, dtype=np.float32) * 0.02

    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    tmp_path = out_path.with_name(out_path.name + f".tmp{os.getpid()}")
    writer = gguf.GGUFWriter(str(tmp_path), arch=arch)
    writer.add_name(f"kvbudget-tiny-{arch}-random-seed{seed}")
    m = TinyMsaDims()
    if arch == "minimax-m3":
        d = m.attention(d)
    writer.add_block_count(d.num_layers)
    writer.add_context_length(d.context_length)
    writer.add_embedding_length(d.hidden_size)
    writer.add_feed_forward_length(d.ffn_size)
    writer.add_head_count(d.num_heads)
    writer.add_head_count_kv(d.num_kv_heads)
    writer.add_key_length(d.head_dim)
    writer.add_value_length(d.head_dim)
    writer.add_layer_norm_rms_eps(m.rms_eps if arch == "minimax-m3" else d.rms_eps)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    if arch == "minimax-m3":
        # MiniMaxM2Model / MiniMaxM3Model.set_gguf_parameters (conversion/minimax.py)
        writer.add_rope_dimension_count(m.rotary_dim)
        writer.add_rope_freq_base(m.rope_base)
        writer.add_vocab_size(vocab_size)
        writer.add_expert_count(m.num_experts)
        writer.add_expert_used_count(m.experts_used)
        writer.add_expert_feed_forward_length(m.expert_ffn_size)
        writer.add_expert_shared_count(m.shared_experts)
        writer.add_expert_weights_scale(2.0)
        writer.add_expert_weights_norm(True)
        writer.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)
        writer.add_indexer_head_count(m.index_heads)
        writer.add_indexer_key_length(m.index_head_dim)
        writer.add_indexer_top_k(m.index_top_k_blocks)
        writer.add_indexer_block_size(m.index_block_tokens)
        writer.add_indexer_local_blocks(m.index_local_blocks)
        writer.add_leading_dense_block_count(m.dense_lead_layers)
    elif arch == "llama":
        writer.add_rope_dimension_count(d.head_dim)
        writer.add_rope_freq_base(d.rope_base)
        writer.add_vocab_size(vocab_size)
    else:
        writer.add_sliding_window(sliding_window_tokens)
        writer.add_attn_logit_softcapping(50.0)
        writer.add_final_logit_softcapping(30.0)

    add_llama_bpe_tokenizer(writer, reader)

    h, kv = d.hidden_size, d.num_kv_heads * d.head_dim
    q = d.num_heads * d.head_dim
    writer.add_tensor("token_embd.weight", weight(vocab_size, h))
    writer.add_tensor("output_norm.weight", ones(h))
    if arch in ("llama", "minimax-m3"):
        writer.add_tensor("output.weight", weight(vocab_size, h))
    if arch == "minimax-m3":
        _add_minimax_m3_layers(writer, d, m, weight, weight32, ones)
    for i in range(0 if arch == "minimax-m3" else d.num_layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(h))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(q, h))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(kv, h))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(kv, h))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(h, q))
        if arch == "gemma2":
            writer.add_tensor(f"blk.{i}.post_attention_norm.weight", ones(h))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(h))
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(d.ffn_size, h))
        writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(d.ffn_size, h))
        writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(h, d.ffn_size))
        if arch == "gemma2":
            writer.add_tensor(f"blk.{i}.post_ffw_norm.weight", ones(h))

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    tmp_path.replace(out_path)
    config_path = out_path.with_suffix(".config.json")
    config_path.write_text(json.dumps(hf_config(arch, sliding_window_tokens, d), indent=2) + "\n")
    return out_path


def _add_minimax_m3_layers(
    writer: Any, d: TinyDims, m: TinyMsaDims, weight: Any, weight32: Any, ones: Any
) -> None:
    """``llama_model_minimax_m3::load_arch_tensors`` (``src/models/minimax-m3.cpp``): attention
    with per-head QK-norm on every layer; a dense FFN on the leading layers; routed + shared
    experts and the indexer (f32, as the converter forces) on the rest."""
    h, kv = d.hidden_size, d.num_kv_heads * d.head_dim
    q = d.num_heads * d.head_dim
    e, f = m.num_experts, m.expert_ffn_size
    for i in range(m.num_layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", ones(h))
        writer.add_tensor(f"blk.{i}.attn_q.weight", weight(q, h))
        writer.add_tensor(f"blk.{i}.attn_k.weight", weight(kv, h))
        writer.add_tensor(f"blk.{i}.attn_v.weight", weight(kv, h))
        writer.add_tensor(f"blk.{i}.attn_output.weight", weight(h, q))
        writer.add_tensor(f"blk.{i}.attn_q_norm.weight", ones(d.head_dim))
        writer.add_tensor(f"blk.{i}.attn_k_norm.weight", ones(d.head_dim))
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", ones(h))
        if i < m.dense_lead_layers:
            writer.add_tensor(f"blk.{i}.ffn_gate.weight", weight(d.ffn_size, h))
            writer.add_tensor(f"blk.{i}.ffn_up.weight", weight(d.ffn_size, h))
            writer.add_tensor(f"blk.{i}.ffn_down.weight", weight(h, d.ffn_size))
            continue
        writer.add_tensor(f"blk.{i}.ffn_gate_inp.weight", weight32(e, h))
        writer.add_tensor(f"blk.{i}.exp_probs_b.bias", np.zeros(e, dtype=np.float32))
        # numpy (expert, out, in) -> ggml {in, out, expert}
        writer.add_tensor(f"blk.{i}.ffn_gate_exps.weight", weight32(e, f, h).astype(np.float16))
        writer.add_tensor(f"blk.{i}.ffn_up_exps.weight", weight32(e, f, h).astype(np.float16))
        writer.add_tensor(f"blk.{i}.ffn_down_exps.weight", weight32(e, h, f).astype(np.float16))
        fs = f * m.shared_experts
        writer.add_tensor(f"blk.{i}.ffn_gate_shexp.weight", weight(fs, h))
        writer.add_tensor(f"blk.{i}.ffn_up_shexp.weight", weight(fs, h))
        writer.add_tensor(f"blk.{i}.ffn_down_shexp.weight", weight(h, fs))
        writer.add_tensor(
            f"blk.{i}.indexer.q_proj.weight", weight32(m.index_heads * m.index_head_dim, h)
        )
        writer.add_tensor(f"blk.{i}.indexer.k_proj.weight", weight32(m.index_head_dim, h))
        writer.add_tensor(f"blk.{i}.indexer.q_norm.weight", ones(m.index_head_dim))
        writer.add_tensor(f"blk.{i}.indexer.k_norm.weight", ones(m.index_head_dim))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="path of the .gguf file to write")
    parser.add_argument("--arch", choices=list(ARCHES), default="llama")
    parser.add_argument("--seed", type=int, default=0, help="weight RNG seed (default 0)")
    parser.add_argument(
        "--sliding-window",
        type=int,
        default=128,
        help="gemma2 only: sliding window in tokens (default 128)",
    )
    parser.add_argument("--gguf-py", type=Path, default=None, help="vendored gguf-py directory")
    parser.add_argument("--vocab", type=Path, default=None, help="vocab-only GGUF file")
    args = parser.parse_args(argv)
    if args.sliding_window < 1:
        parser.error(f"--sliding-window must be >= 1 (got {args.sliding_window})")
    path = build_tiny_gguf(
        args.out,
        arch=args.arch,
        seed=args.seed,
        sliding_window_tokens=args.sliding_window,
        gguf_py_dir=args.gguf_py,
        vocab_path=args.vocab,
    )
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
