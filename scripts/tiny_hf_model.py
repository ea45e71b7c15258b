#!/usr/bin/env python3
"""Write a tiny Hugging Face model directory (config + tokenizer, no weights) for vLLM.

vLLM serves it with ``--load-format dummy`` (random weights, nothing read from disk), so the
directory holds only ``config.json`` (built from transformers' own config classes, with
``architectures`` set so vLLM picks its native model class, not its Transformers fallback) and a
byte-level BPE tokenizer trained here with the ``tokenizers`` library on a seeded synthetic
corpus (no download). Run it with a python that has ``transformers`` and ``tokenizers`` (the
vLLM venv of ``scripts/vllm-cpu.sh`` has both).

Variants (``--arch``):

* ``llama``  - 4 layers, GQA 8 query / 2 KV heads, head_dim 32, hidden 256, FFN 512, bf16.
* ``mqa``    - the same with 1 KV head (multi-query attention).
* ``granitemoehybrid`` - a Granite-4.0-H style hybrid: 8 layers, Mamba-2 (16 heads x 32, state 64,
  1 group, conv 4) on layers 0-2 and 4-6, GQA attention (4 query / 2 KV heads of 64) on 3 and 7,
  4 experts top-2, bf16 (issue #34: vLLM CPU's SSM reset to float32 and its hybrid block raise).

Usage::

    python scripts/tiny_hf_model.py OUT_DIR [--arch llama|mqa|granitemoehybrid] [--vocab-size 2048]

The text such a model generates is gibberish; it exists to exercise the engine's memory
layout, scheduler, prefix cache and metrics.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def corpus(seed: int, num_lines: int = 4000) -> list[str]:
    """Seeded pseudo-words, so the trained vocabulary is the same on every machine."""
    rng = np.random.default_rng(seed)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    lines = []
    for _ in range(num_lines):
        words = []
        for _ in range(int(rng.integers(4, 16))):
            n = int(rng.integers(1, 4))
            words.append("".join(syllables[int(i)] for i in rng.integers(0, len(syllables), n)))
        if rng.random() < 0.3:
            words.append(str(int(rng.integers(0, 10_000))))
        lines.append(" ".join(words) + rng.choice([".", ",", "?", "!", ";"]))
    return lines


def train_tokenizer(out: Path, vocab_size: int, seed: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>")
    fast.save_pretrained(str(out))


def granite_hybrid_config(vocab_size: int) -> object:
    from transformers import GraniteMoeHybridConfig

    cfg = GraniteMoeHybridConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        shared_intermediate_size=512,
        num_hidden_layers=8,
        num_attention_heads=4,
        num_key_value_heads=2,
        num_local_experts=4,
        num_experts_per_tok=2,
        mamba_n_heads=16,
        mamba_d_head=32,
        mamba_d_state=64,
        mamba_n_groups=1,
        mamba_d_conv=4,
        mamba_expand=2,
        layer_types=["linear_attention"] * 3
        + ["full_attention"]
        + ["linear_attention"] * 3
        + ["full_attention"],
        max_position_embeddings=8192,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    cfg.architectures = ["GraniteMoeHybridForCausalLM"]
    return cfg


def write_config(out: Path, arch: str, vocab_size: int) -> None:
    from transformers import LlamaConfig

    if arch == "granitemoehybrid":
        hybrid: Any = granite_hybrid_config(vocab_size)
        hybrid.torch_dtype = "bfloat16"
        hybrid.save_pretrained(str(out))
        _keep_torch_dtype(out)
        return

    num_kv_heads = {"llama": 2, "mqa": 1}[arch]
    cfg = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=num_kv_heads,
        head_dim=32,
        max_position_embeddings=8192,
        bos_token_id=0,
        eos_token_id=1,
        tie_word_embeddings=False,
    )
    cfg.architectures = ["LlamaForCausalLM"]
    cfg.torch_dtype = "bfloat16"
    cfg.save_pretrained(str(out))
    _keep_torch_dtype(out)


def _keep_torch_dtype(out: Path) -> None:
    # Some transformers versions write `dtype`, older readers want `torch_dtype`: keep both.
    path = out / "config.json"
    data = json.loads(path.read_text())
    data.setdefault("torch_dtype", "bfloat16")
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--arch", choices=["llama", "mqa", "granitemoehybrid"], default="llama")
    ap.add_argument("--vocab-size", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    train_tokenizer(args.out, args.vocab_size, args.seed)
    write_config(args.out, args.arch, args.vocab_size)
    print(args.out.resolve())


if __name__ == "__main__":
    main()
