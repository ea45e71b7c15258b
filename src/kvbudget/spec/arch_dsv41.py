"""DeepSeek-V4.1 (``deepseek_v41``, its text model ``deepseek_v41_text``): each layer's kind.

No transformers release has a DeepSeek-V4.1 class (transformers 5.24 ships ``deepseek_v4``
only) and no V4.1 config is published, so these rules are vLLM 0.32.0's reading, and the
model's row is a structural reference (never ``exact``). vLLM's ``DeepseekV41Config``
(``transformers_utils/configs/deepseek_v41.py`` lines 8-50) copies every ``text_config`` key onto
the top level; kvbudget reads the same keys from ``text_config`` (nested) or the top level
(flat). Per decoder layer ``i`` (``models/deepseek_v41/attention.py`` lines 303-351):

* ``compress_ratios[i]`` (0 past the list or without one): 0 is a pure sliding window, 1 a
  full-length compressed cache, 2 one compressed entry per 2 tokens; vLLM refuses any other;
* ``kv_source_layer_ids``: only these layers own a compressed-KV cache (and its compressor);
  ``index_source_layer_ids``: only these run an indexer, whose key cache the kv source owns;
* every other compressed layer reads the nearest kv source at or below it
  (``max(s for s in kv_source_layer_ids if s <= i)``) and stores only its own window.

So a layer is, in kvbudget's kinds: a kv source that is also an index source,
``CompressedSparseAttention`` (window, compressed entries at its ratio, an indexer key of
``index_head_dim`` per entry); a kv source only, ``CompressedAttention``; any other layer a
``SlidingWindow`` of the one shared K=V head (as DeepSeek-V4's sliding layers). Engram tables
(``engram_layer_ids``, ``models/deepseek_v41/nvidia/model.py`` lines 291-316) and the candidate
block buffer register no KV cache spec.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbudget.errors import SpecError
from kvbudget.spec.arch_common import ARCH
from kvbudget.spec.fields import FieldReader
from kvbudget.spec.layers import (
    CompressedAttention,
    CompressedSparseAttention,
    LayerSpec,
    SlidingWindow,
)

__all__ = ["DSV41_SOURCE", "build_deepseek_v41"]

DSV41_SOURCE = (
    "vllm/transformers_utils/configs/deepseek_v41.py and vllm/models/deepseek_v41/attention.py "
    "lines 303-351 (no transformers class)"
)
_ATTN = "vLLM 0.32 models/deepseek_v41/attention.py"


def _ids(r: FieldReader, key: str, n: int, note: str) -> tuple[int, ...]:
    value: Any = r.get(key, default=[], required=False, note=note)
    if not isinstance(value, list | tuple) or any(
        isinstance(x, bool) or not isinstance(x, int) or x < 0 for x in value
    ):
        raise SpecError(
            f"{r.prefix}{key}: expected a list of layer indices, got {str(value)[:60]!r}; fix "
            "the config",
            field=key,
        )
    return tuple(int(x) for x in value)


def _ratios(r: FieldReader, n: int) -> list[int]:
    value: Any = r.get(
        "compress_ratios",
        default=None,
        required=False,
        null_is_value=True,
        note="per layer: 0 sliding window, 1 full-length compressed, 2 ratio-2 compressed",
    )
    if value is None:
        return [0] * n
    if not isinstance(value, list) or any(
        isinstance(x, bool) or not isinstance(x, int) for x in value
    ):
        raise SpecError(
            f"{r.prefix}compress_ratios: expected a list of integers, got {str(value)[:60]!r}; "
            "fix the config",
            field="compress_ratios",
        )
    ratios = [int(value[i]) if i < len(value) else 0 for i in range(n)]
    for i, ratio in enumerate(ratios):
        if ratio not in (0, 1, 2):
            raise SpecError(
                f"{r.prefix}compress_ratios: {ratio} at layer {i}; {_ATTN} lines 316-321 refuse "
                f'it: "DeepSeek V4.1 layer {i} has compress_ratio={ratio}; only 0 (sliding '
                'window), 1 and 2 are supported."; fix the config',
                field="compress_ratios",
            )
    return ratios


def _check_topology(
    prefix: str, ratios: list[int], kv: tuple[int, ...], index: tuple[int, ...]
) -> None:
    """What vLLM refuses (or fails on) while building the layers, in its words."""
    for i, ratio in enumerate(ratios):
        if ratio == 0:
            if i in kv or i in index:
                role = "kv_source_layer_ids" if i in kv else "index_source_layer_ids"
                raise SpecError(
                    f"{prefix}{role}: layer {i} has compress_ratio 0 (a pure sliding window), so "
                    "vLLM 0.32 cannot build its compressor or indexer (models/deepseek_v41/"
                    "compressor.py lines 198-204: 'DeepSeek V4.1 compressor supports "
                    "compress_ratio 1 (full-length compressed cache) and 2; got 0.'); fix the "
                    "config",
                    field=role,
                )
            continue
        if not kv or not index:
            raise SpecError(
                f"{prefix}kv_source_layer_ids: {_ATTN} lines 335-342 refuse the config: "
                '"DeepSeek V4.1 requires kv_source_layer_ids / index_source_layer_ids in the '
                f'config for compressed layers (layer {i} has compress_ratio={ratio})."; add both',
                field="kv_source_layer_ids",
            )
        below = [s for s in kv if s <= i]
        if not below:
            raise SpecError(
                f"{prefix}kv_source_layer_ids: layer {i} is compressed but no kv source is at or "
                f"below it; {_ATTN} lines 343-345 take max(s for s in kv_source_layer_ids if s <= "
                f"{i}), which fails; list a kv source at or below layer {i}",
                field="kv_source_layer_ids",
            )
        source = max(below)
        if i in index and i not in kv and source not in index:
            raise SpecError(
                f"{prefix}index_source_layer_ids: layer {i} reads the indexer key cache of its kv "
                f"source {source}, which is no index source and so owns none; {_ATTN} lines "
                "448-459 raise 'Indexer K cache source ... not found on this rank'; fix the config",
                field="index_source_layer_ids",
            )


def build_deepseek_v41(r: FieldReader, model_type: str) -> Sequence[LayerSpec] | None:
    """DeepSeek-V4.1's layers (module docstring); ``None`` when a required field is missing."""
    n = r.get_int("num_hidden_layers", note="decoder layers (MTP layers not included)")
    head_dim = r.get_int("head_dim", note="the one shared K=V head (vLLM reads config.head_dim)")
    window = r.get_int("sliding_window", note="window of every layer's shared K=V head")
    if n is None or head_dim is None or window is None:
        return None
    ratios = _ratios(r, n)
    kv = _ids(r, "kv_source_layer_ids", n, "layers owning a compressed-KV cache")
    index = _ids(r, "index_source_layer_ids", n, "layers running an indexer")
    _check_topology(r.prefix, ratios, kv, index)
    if r.has("engram_layer_ids"):
        r.get("engram_layer_ids", note="Engram n-gram tables: no KV cache")
    if r.has("index_n_heads"):
        r.get("index_n_heads", note="indexer query heads: not cached")
    index_dim = 0
    if r.has("index_head_dim") or any(ratios[i] and i in kv and i in index for i in range(n)):
        index_dim = r.get_int("index_head_dim", note="indexer key per compressed entry") or 0
        if not index_dim:
            return None
    out: list[LayerSpec] = []
    for i, ratio in enumerate(ratios):
        if ratio and i in kv and i in index:
            out.append(
                CompressedSparseAttention(i, head_dim, window, ratio, index_head_dim=index_dim)
            )
        elif ratio and i in kv:
            out.append(CompressedAttention(i, head_dim, window, ratio))
        else:
            out.append(SlidingWindow(i, 1, head_dim, 0, window))
    sources = sum(1 for i in range(n) if ratios[i] and i in kv)
    r.record(
        "layer_types",
        f"{sources} kv-source compressed, {n - sources} sliding-window only",
        ARCH,
        note="from compress_ratios, kv_source_layer_ids and index_source_layer_ids "
        f"({_ATTN} lines 303-351); {model_type}",
    )
    return out
