"""Nemotron-NAS (DeciLM, ``model_type`` ``nemotron-nas``): every layer has its own block config.

No class in transformers (the checkpoints ship remote code), so the rule is vLLM's
(``vllm/model_executor/models/nemotron_nas.py`` 0.32, ``DeciLMDecoderLayer.__init__``): a layer
whose ``block_configs[i].attention.no_op`` is true has no attention and no KV; any other layer is
full attention with ``num_attention_heads // n_heads_in_group`` KV heads of ``head_dim`` (else
``hidden_size // num_attention_heads``, ``llama.py`` ``LlamaAttention``). Attention variants vLLM
does not build (``replace_with_linear``, ``window_length``, sink tokens) are refused, naming the
layer. The result is marked unverified against transformers (no class to check).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import num_layers
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layer_runs import LayerSeq
from kvbudget.spec.layers import FullAttention, LayerSpec, NoAttention

#: attention fields of a block config whose non-default value vLLM 0.32 does not build
_UNSUPPORTED = ("replace_with_linear", "window_length", "num_sink_tokens", "sparsify")


def build_nemotron_nas(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    n = num_layers(r)
    heads = r.get_int("num_attention_heads", note="query heads")
    blocks = r.get("block_configs", note="per-layer attention: no_op, n_heads_in_group")
    if n is None or heads is None or blocks is None:
        return None
    if not isinstance(blocks, list) or len(blocks) != n:
        raise SpecError(
            f"{r.prefix}block_configs: expected {n} per-layer entries, got "
            f"{str(blocks)[:40]!r}; fix the config",
            field="block_configs",
        )
    head_dim: int | None = None
    out: list[LayerSpec] = []
    for i, block in enumerate(blocks):
        attention = block.get("attention") if isinstance(block, dict) else None
        if not isinstance(attention, dict):
            raise SpecError(
                f"{r.prefix}block_configs[{i}].attention: expected a mapping, got "
                f"{str(attention)[:40]!r}; fix the config",
                field="block_configs",
            )
        if attention.get("no_op") is True:
            out.append(NoAttention(i))
            continue
        odd = [k for k in _UNSUPPORTED if attention.get(k) not in (None, False)]
        if odd:
            raise SpecError(
                f"{r.prefix}block_configs[{i}].attention.{odd[0]}: {attention[odd[0]]!r} is not "
                "modelled (vLLM 0.32 nemotron_nas.py builds plain attention); use the explicit mode",
                field="block_configs",
            )
        group = attention.get("n_heads_in_group")
        if isinstance(group, bool) or not isinstance(group, int) or group <= 0 or heads % group:
            raise SpecError(
                f"{r.prefix}block_configs[{i}].attention.n_heads_in_group: expected a positive "
                f"divisor of num_attention_heads {heads}, got {group!r}; fix the config",
                field="block_configs",
            )
        if head_dim is None:
            head_dim = _head_dim(r, heads)
            if head_dim is None:
                return None
        out.append(FullAttention(i, heads // group, head_dim))
    return LayerSeq.from_items(out)


def _head_dim(r: FieldReader, heads: int) -> int | None:
    """``head_dim``, else ``hidden_size // num_attention_heads`` (vLLM's LlamaAttention)."""
    if r.has("head_dim"):
        return r.get_int("head_dim")
    hidden = r.get_int("hidden_size")
    if hidden is None:
        return None
    r.derive(
        "head_dim", hidden // heads, f"hidden_size // num_attention_heads = {hidden} // {heads}"
    )
    return hidden // heads
