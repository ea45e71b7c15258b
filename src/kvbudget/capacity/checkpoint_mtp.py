"""A snapshot's MTP tensors, which vLLM 0.32 skips without speculative decoding.

A checkpoint with multi-token-prediction layers ships their tensors next to the target's, so the
index's ``metadata.total_size`` counts them; without ``--speculative-config`` (method ``mtp``)
vLLM 0.32.0 does not load them (``site-packages/vllm``):

* DeepSeek-V3 / V3.2, GLM-5 (``glm_moe_dsa``), GLM-4.5 (``glm4_moe``): names starting
  ``model.layers.{n}.``, ``layers.{n}.`` or ``model.language_model.layers.{n}.`` for ``n`` in
  ``num_hidden_layers .. + num_nextn_predict_layers`` (``model_executor/models/utils.py`` lines
  575-601 ``get_spec_layer_idx_from_weight_name``, called by ``deepseek_v2.py`` lines 1653-1654,
  ``models/deepseek_v32/nvidia/model.py`` line 354 and ``glm4_moe.py`` line 495
  ``skip_spec_layers``).
* MiMo (``mimo``): ``model.mtp_layers.`` (``mimo.py`` line 93, mapped to None).
* MiMo-V2-Flash: any name holding ``mtp`` (``mimo_v2.py`` lines 762-763).
* DeepSeek-V4: any name holding ``mtp.`` (``models/deepseek_v4/nvidia/model.py`` line 1753, mapped
  to None).
* MiniMax-M3: any name holding ``mtp.`` (``models/minimax_m3/nvidia/model.py`` lines 969-971).
* Qwen4-Exp: any name holding ``mtp.`` (``models/qwen4_exp/nvidia/model.py`` lines 923-926,
  1126-1129: ``orig_to_new_substr={"mtp.": None}``).

Their bytes are read from the shards' safetensors headers (8-byte little-endian header length,
then a JSON map of tensor name to ``data_offsets``: the tensor's bytes are ``end - start``), the
shard of each named in the index's ``weight_map``. When a shard is absent (an index-only
snapshot) nothing is subtracted and a note says how many tensors the total over-counts.
"""

from __future__ import annotations

import json
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvbudget.capacity.layouts.vllm_dsv4 import is_deepseek_v4
from kvbudget.capacity.layouts.vllm_minimax_m3 import VLLM_MINIMAX_M3_TYPES
from kvbudget.capacity.layouts.vllm_qwen4 import is_qwen4_exp
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

__all__ = ["is_skipped_mtp_tensor", "snapshot_mtp_bytes", "without_mtp_tensors"]

#: model types vLLM 0.32 drops ``layers.{num_hidden_layers + k}.`` for (module doc)
_NEXTN_LAYER_TYPES = frozenset({"deepseek_v3", "deepseek_v32", "glm_moe_dsa", "glm4_moe"})
#: a header larger than this is not a safetensors header (the format caps it at 100 MB)
_MAX_HEADER_BYTES = 100_000_000


def is_skipped_mtp_tensor(model: ModelSpec, name: str) -> bool:
    """Whether vLLM 0.32 skips checkpoint tensor ``name`` of ``model`` without an MTP drafter."""
    model_type = model.model_type
    if model_type in _NEXTN_LAYER_TYPES:
        n = model.raw_config.get("num_nextn_predict_layers") or 0
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            return False
        base = model.num_layers
        prefixes = tuple(
            f"{p}{base + k}."
            for k in range(n)
            for p in ("model.layers.", "layers.", "model.language_model.layers.")
        )
        return name.startswith(prefixes)
    if model_type == "mimo":
        return name.startswith("model.mtp_layers.")
    if model_type == "mimo_v2_flash":
        return "mtp" in name
    if model_type in VLLM_MINIMAX_M3_TYPES or is_deepseek_v4(model) or is_qwen4_exp(model):
        return "mtp." in name
    return False


def _header_sizes(shard: Path) -> dict[str, int]:
    """Tensor name -> bytes, from one safetensors file's header."""
    try:
        with shard.open("rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            if length > _MAX_HEADER_BYTES:
                raise ValueError(f"header length {length}")
            header: dict[str, Any] = json.loads(f.read(length))
        return {
            name: int(entry["data_offsets"][1]) - int(entry["data_offsets"][0])
            for name, entry in header.items()
            if name != "__metadata__"
        }
    except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error) as exc:
        raise ConfigError(
            f"snapshot: {shard} has no readable safetensors header ({exc}); pass --weights-bytes",
            field="snapshot",
        ) from exc


def snapshot_mtp_bytes(snapshot: Path, model: ModelSpec) -> tuple[int | None, int]:
    """``(bytes, count)`` of the MTP tensors ``snapshot``'s index names (module doc): bytes None
    when a shard holding one is absent; ``(0, 0)`` without an index or MTP tensors."""
    index = snapshot / "model.safetensors.index.json"
    if not index.is_file():
        return 0, 0
    try:
        weight_map = json.loads(index.read_text("utf-8")).get("weight_map") or {}
    except (ValueError, AttributeError, RecursionError):
        return 0, 0
    if not isinstance(weight_map, dict):
        return 0, 0
    shards: dict[str, list[str]] = {}
    for name, shard in weight_map.items():
        if isinstance(shard, str) and is_skipped_mtp_tensor(model, name):
            shards.setdefault(shard, []).append(name)
    count = sum(len(names) for names in shards.values())
    total = 0
    for shard, names in shards.items():
        path = snapshot / shard
        if not path.is_file():
            return None, count
        sizes = _header_sizes(path)
        total += sum(sizes.get(name, 0) for name in names)
    return total, count


def without_mtp_tensors(
    weights: WeightsEstimate, snapshot: Path, model: ModelSpec
) -> WeightsEstimate:
    """``weights`` read from ``snapshot``'s total less the MTP tensors vLLM skips (module doc),
    every stage scaled by the same ratio; a note when they cannot be sized."""
    if weights.source != "read":
        return weights
    skipped, count = snapshot_mtp_bytes(snapshot, model)
    if count == 0:
        return weights
    if skipped is None:
        note = (
            f"the snapshot's total_size holds {count} MTP tensor(s) vLLM skips without "
            "--speculative-config (their shards are absent, so their bytes are not taken off): "
            "the weights are over-counted by them"
        )
        return replace(weights, notes=(*weights.notes, note))
    kept = weights.total_bytes - skipped
    if skipped <= 0 or kept <= 0:
        return weights
    ratio = kept / weights.total_bytes
    note = (
        f"{count} MTP tensor(s), {skipped:,} B (safetensors headers), taken off the snapshot's "
        "total_size: vLLM skips them without --speculative-config"
    )
    return replace(
        weights,
        total_bytes=kept,
        per_rank_bytes=tuple(int(b * ratio) for b in weights.per_rank_bytes),
        expert_bytes=int(weights.expert_bytes * ratio),
        method=f"{weights.method}; less {skipped:,} B of MTP tensors vLLM does not load",
        notes=(*weights.notes, note),
    )
