"""A snapshot's MTP tensors leave vLLM 0.32's weights without speculative decoding (issue #34).

vLLM 0.32.0 (``site-packages/vllm``) does not load a checkpoint's MTP layers for the target:
GLM-4.5's ``load_weights`` filters them with ``skip_spec_layers`` (``model_executor/models/
glm4_moe.py`` line 495), which drops every name ``get_spec_layer_idx_from_weight_name`` places in
``model.layers.{num_hidden_layers + k}.`` (``utils.py`` lines 589-601). The index's
``metadata.total_size`` counts them, so the plan takes their bytes off, read from the shards'
safetensors headers (8-byte little-endian header length, JSON with each tensor's
``data_offsets``). The oracle: the same snapshot without those tensors (its total smaller by
exactly their bytes) gives the same weights.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.checkpoint_mtp import is_skipped_mtp_tensor
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import resolve_model
from kvbudget.units import MiB

ROOT = Path(__file__).resolve().parents[3]
CATALOG = ROOT / "src" / "kvbudget" / "spec" / "catalog" / "models"
MTP = '{"method": "mtp", "num_speculative_tokens": 1}'
PEER = json.loads(
    (ROOT / "tests" / "peer" / "fixtures" / "vllm_pools_0.32.0.json").read_text("utf-8")
)
#: the tiny glm4_moe the CPU engine ran: 8 layers, hidden 256, num_nextn_predict_layers 1
TINY_GLM = PEER["cases"]["glm4_moe"]["config"]
TOTAL = 100 * MiB  # made-up metadata.total_size: 104,857,600 B
# the MTP layer 8's tensors in the second shard (bf16): eh_proj 256 x 512 = 262,144 B,
# enorm 256 x 2 = 512 B; 262,656 B in all
MTP_TENSORS = {
    "model.layers.8.eh_proj.weight": [256, 512],
    "model.layers.8.enorm.weight": [256],
}
MTP_BYTES = 256 * 512 * 2 + 256 * 2


def _shard(path: Path, tensors: dict[str, list[int]]) -> None:
    """A bf16 safetensors file of zeros: header then data, offsets as the format lays them."""
    header: dict[str, Any] = {}
    offset = 0
    for name, shape in tensors.items():
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode("utf-8")
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(offset))


def _snapshot(folder: Path, *, with_mtp: bool, shards: bool = True) -> Path:
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(TINY_GLM), encoding="utf-8")
    target = {"model.layers.7.mlp.gate.weight": [4, 256], "model.norm.weight": [256]}
    second = {**target, **(MTP_TENSORS if with_mtp else {})}
    weight_map = {name: "model-00002-of-00002.safetensors" for name in second}
    weight_map["model.embed_tokens.weight"] = "model-00001-of-00002.safetensors"
    total = TOTAL if with_mtp else TOTAL - MTP_BYTES
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index), encoding="utf-8")
    if shards:
        _shard(folder / "model-00001-of-00002.safetensors", {"model.embed_tokens.weight": [4]})
        _shard(folder / "model-00002-of-00002.safetensors", second)
    return folder


def _plan(snapshot: Path, **extra: Any) -> Any:
    resolved = resolve_model(str(snapshot))
    assert resolved.spec is not None, resolved.reason
    request = PlanRequest(
        model=str(snapshot),
        engine="vllm",
        engine_version="0.32.0",
        gpu="H200",
        tp=2,
        max_model_len=4096,
        **extra,
    )
    return make_plan(request, resolved.spec)


def test_mtp_tensors_taken_off_the_snapshot_total(tmp_path: Path) -> None:
    """104,857,600 - 262,656 = 104,594,944 B: the same as the snapshot without them (each rank
    within a byte: both are the architecture's shares scaled to the total)."""
    assert MTP_BYTES == 262_656
    with_tensors = _plan(_snapshot(tmp_path / "a", with_mtp=True))
    without_tensors = _plan(_snapshot(tmp_path / "b", with_mtp=False))
    assert with_tensors.weights.source == "read"
    assert with_tensors.weights.total_bytes == TOTAL - MTP_BYTES == 104_594_944
    assert without_tensors.weights.total_bytes == TOTAL - MTP_BYTES
    pairs = zip(
        with_tensors.weights.per_rank_bytes, without_tensors.weights.per_rank_bytes, strict=True
    )
    assert all(abs(a - b) <= 1 for a, b in pairs)
    assert any("2 MTP tensor(s), 262,656 B" in note for note in with_tensors.notes)


def test_with_an_mtp_drafter_the_whole_total_stays(tmp_path: Path) -> None:
    """With ``--speculative-config`` method ``mtp`` vLLM loads them: the total is kept."""
    result = _plan(_snapshot(tmp_path / "a", with_mtp=True), speculative_config=MTP)
    assert result.weights.total_bytes == TOTAL
    assert any("holds the checkpoint's MTP layer" in note for note in result.notes)


def test_absent_shards_leave_the_total_with_a_note(tmp_path: Path) -> None:
    """An index-only snapshot: the MTP tensors cannot be sized, the total stays, a note says so."""
    result = _plan(_snapshot(tmp_path / "a", with_mtp=True, shards=False))
    assert result.weights.total_bytes == TOTAL
    assert any("holds 2 MTP tensor(s) vLLM skips" in note for note in result.notes)


def _catalog(name: str) -> Any:
    resolved = resolve_model(str(CATALOG / f"{name}.json"))
    assert resolved.spec is not None, resolved.reason
    return resolved.spec


def test_which_names_vllm_skips() -> None:
    """The names of each loader's rule (``checkpoint_mtp`` module doc cites the lines)."""
    dsv3 = _catalog("deepseek-ai--DeepSeek-V3")  # 61 layers, num_nextn_predict_layers 1
    assert is_skipped_mtp_tensor(dsv3, "model.layers.61.eh_proj.weight")
    assert is_skipped_mtp_tensor(dsv3, "model.layers.61.embed_tokens.weight")
    assert not is_skipped_mtp_tensor(dsv3, "model.layers.60.mlp.gate.weight")
    assert not is_skipped_mtp_tensor(dsv3, "model.layers.6.mlp.gate.weight")
    flash = _catalog("XiaomiMiMo--MiMo-V2-Flash")
    assert is_skipped_mtp_tensor(flash, "model.mtp.layers.0.eh_proj.weight")
    assert not is_skipped_mtp_tensor(flash, "model.layers.47.self_attn.q_proj.weight")
    dsv4 = _catalog("deepseek-ai--DeepSeek-V4-Flash")
    assert is_skipped_mtp_tensor(dsv4, "mtp.0.e_proj.weight")
    assert not is_skipped_mtp_tensor(dsv4, "layers.0.attn.wq_a.weight")
    m3 = _catalog("MiniMaxAI--MiniMax-M3")
    assert is_skipped_mtp_tensor(m3, "model.mtp.0.eh_proj.weight")
    assert not is_skipped_mtp_tensor(m3, "model.layers.0.self_attn.q_proj.weight")


def test_a_corrupt_shard_header_is_one_line(tmp_path: Path) -> None:
    """A shard whose header cannot be read: a one-line ConfigError, not a traceback."""
    snapshot = _snapshot(tmp_path / "a", with_mtp=True)
    (snapshot / "model-00002-of-00002.safetensors").write_bytes(b"\x10\x00\x00")
    with pytest.raises(ConfigError, match=r"^snapshot: .* has no readable safetensors header"):
        _plan(snapshot)
