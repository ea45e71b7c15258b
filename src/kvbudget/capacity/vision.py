"""Vision towers and multimodal projectors of VLM checkpoints, counted as vLLM builds them.

vLLM builds a multimodal wrapper's vision tower and projector in the model's ``__init__`` inside
``_mark_tower_model`` (vLLM 0.32.0 ``model_executor/models/interfaces.py``): they are loaded
unless ``--limit-mm-per-prompt`` sets every modality of the tower to 0 (then a
``StageMissingLayer`` stands in and nothing is loaded). The tower is built without a
pipeline-rank check, so every pipeline stage holds it. Tensor parallel splits its linears as
the language model's (``QKVParallelLinear`` / ``ColumnParallelLinear`` split the output,
``RowParallelLinear`` the input, its bias whole) under the default ``--mm-encoder-tp-mode
weights`` (``data`` keeps the tower whole on every rank: ``vision.py``
``is_vit_use_data_parallel``; not modelled). Embeddings, norms and bare ``nn.Parameter`` tensors are whole on every rank.

Per tower, the modules read in vLLM 0.32.0 (``model_executor/models/``):

- ``siglip_vision_model`` (Gemma-3, ``gemma3_mm.py`` + ``siglip.py``): patch ``Conv2d`` with
  bias, a position ``Embedding`` of ``(image_size // patch_size)^2`` rows, per layer
  ``qkv_proj`` / ``out_proj`` / ``fc1`` / ``fc2`` with biases and two ``LayerNorm`` (weight and
  bias), a ``post_layernorm``; no pooling head (``use_head=False``). Gemma-3's projector: an
  ``nn.Parameter`` ``vision_hidden x text_hidden`` and a ``GemmaRMSNorm(vision_hidden)``.
- ``llama4_vision_model`` (Llama-4, ``mllama4.py``): ``class_embedding``,
  ``positional_embedding_vlm`` of ``(image_size // patch_size)^2 + 1`` rows, an unfold patch
  ``linear`` without bias, ``layernorm_pre`` / ``layernorm_post``, per layer q/k/v/o and
  ``fc1`` / ``fc2`` with biases and two ``LayerNorm``; the pixel-shuffle adapter
  ``fc1: intermediate_size -> projector_input_dim``, ``fc2: projector_input_dim ->
  projector_output_dim`` (bias per ``multi_modal_projector_bias``) and the projector
  ``linear_1: vision_output_dim -> text hidden`` without bias.
- ``qwen2_5_vl`` (``qwen2_5_vl.py``): a ``Conv3d`` patch embedding without bias
  (``in_channels x temporal_patch x patch^2 -> hidden``), per block two ``RMSNorm``, ``qkv``
  and ``proj`` with biases, a gated MLP (``gate_up_proj`` / ``down_proj``) with biases; the
  patch merger ``ln_q`` (``RMSNorm``), ``hidden x merge^2 -> hidden x merge^2 -> out_hidden``
  with biases.

The tower is counted in the model dtype (checkpoints' quantization configs leave the vision
tower unconverted, e.g. ``modules_to_not_convert``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvbudget.units import cdiv


@dataclass(frozen=True, slots=True)
class TowerWeights:
    """A vision tower plus projector: parameters (whole) and parameters on one GPU."""

    model_type: str
    num_params: int
    rank_params: int
    method: str


class _Count:
    """Parameter tally, whole and per tensor-parallel rank."""

    def __init__(self, tp: int) -> None:
        self.tp = tp
        self.total = 0
        self.rank = 0

    def whole(self, n: int) -> None:
        self.total += n
        self.rank += n

    def col(self, n_in: int, n_out: int, bias: bool) -> None:
        self.total += n_in * n_out + (n_out if bias else 0)
        self.rank += n_in * cdiv(n_out, self.tp) + (cdiv(n_out, self.tp) if bias else 0)

    def row(self, n_in: int, n_out: int, bias: bool) -> None:
        self.total += n_in * n_out + (n_out if bias else 0)
        self.rank += cdiv(n_in, self.tp) * n_out + (n_out if bias else 0)


def _int(cfg: dict[str, Any], *keys: str, default: int = 0) -> int:
    for key in keys:
        value = cfg.get(key)
        if value is not None:
            return int(value)
    return default


def _siglip(vc: dict[str, Any], c: _Count) -> None:
    h = _int(vc, "hidden_size")
    inter = _int(vc, "intermediate_size")
    layers = _int(vc, "num_hidden_layers")
    patch = _int(vc, "patch_size")
    channels = _int(vc, "num_channels", default=3)
    positions = (_int(vc, "image_size") // patch) ** 2 if patch else 0
    c.whole(channels * patch * patch * h + h)  # patch Conv2d + bias
    c.whole(positions * h)  # position Embedding
    for _ in range(layers):
        c.col(h, 3 * h, True)  # qkv_proj
        c.row(h, h, True)  # out_proj
        c.col(h, inter, True)  # fc1
        c.row(inter, h, True)  # fc2
        c.whole(4 * h)  # layer_norm1/2, weight + bias
    c.whole(2 * h)  # post_layernorm


def _gemma3_projector(vc: dict[str, Any], text_hidden: int, c: _Count) -> None:
    h = _int(vc, "hidden_size")
    c.whole(h * text_hidden + h)  # mm_input_projection_weight, mm_soft_emb_norm


def _llama4(vc: dict[str, Any], text_hidden: int, c: _Count) -> None:
    h = _int(vc, "hidden_size")
    inter = _int(vc, "intermediate_size")
    layers = _int(vc, "num_hidden_layers")
    patch = _int(vc, "patch_size")
    channels = _int(vc, "num_channels", default=3)
    positions = (_int(vc, "image_size") // patch) ** 2 + 1 if patch else 0
    c.whole(h + positions * h)  # class_embedding, positional_embedding_vlm
    c.col(channels * patch * patch, h, False)  # unfold patch linear
    c.whole(4 * h)  # layernorm_pre / layernorm_post
    for _ in range(layers):
        c.col(h, 3 * h, True)  # qkv_proj
        c.row(h, h, True)  # o_proj
        c.col(h, inter, True)  # fc1
        c.row(inter, h, True)  # fc2
        c.whole(4 * h)  # input / post-attention LayerNorm
    proj_in = _int(vc, "projector_input_dim")
    proj_out = _int(vc, "projector_output_dim")
    bias = bool(vc.get("multi_modal_projector_bias", False))
    c.col(inter, proj_in, bias)  # vision_adapter.mlp.fc1 (input_size=intermediate_size)
    c.row(proj_in, proj_out, bias)  # vision_adapter.mlp.fc2
    c.col(_int(vc, "vision_output_dim"), text_hidden, False)  # multi_modal_projector.linear_1


def _qwen2_5_vl(vc: dict[str, Any], c: _Count) -> None:
    h = _int(vc, "hidden_size")
    inter = _int(vc, "intermediate_size")
    depth = _int(vc, "depth")
    patch = _int(vc, "patch_size")
    temporal = _int(vc, "temporal_patch_size", default=2)
    channels = _int(vc, "in_channels", "in_chans", default=3)
    merge = _int(vc, "spatial_merge_size", default=2)
    out = _int(vc, "out_hidden_size")
    c.whole(channels * temporal * patch * patch * h)  # Conv3d, no bias
    for _ in range(depth):
        c.whole(2 * h)  # norm1 / norm2 (RMSNorm)
        c.col(h, 3 * h, True)  # qkv
        c.row(h, h, True)  # proj
        c.col(h, 2 * inter, True)  # gate_up_proj
        c.row(inter, h, True)  # down_proj
    merged = h * merge * merge
    c.whole(h)  # merger ln_q
    c.col(merged, merged, True)
    c.row(merged, out, True)


def vision_tower(wrapper: dict[str, Any], *, text_hidden: int, tp: int) -> TowerWeights | None:
    """The tower and projector of a multimodal wrapper config (None: none, or not modelled)."""
    vc = wrapper.get("vision_config")
    if not isinstance(vc, dict):
        return None
    top = str(wrapper.get("model_type", ""))
    kind = str(vc.get("model_type", ""))
    c = _Count(tp)
    if top == "gemma3" and kind in ("siglip_vision_model", ""):
        kind = "siglip_vision_model"
        _siglip(vc, c)
        _gemma3_projector(vc, text_hidden, c)
        source = "gemma3_mm.py + siglip.py"
    elif top == "llama4" or kind == "llama4_vision_model":
        kind = "llama4_vision_model"
        _llama4(vc, text_hidden, c)
        source = "mllama4.py"
    elif top == "qwen2_5_vl":
        kind = "qwen2_5_vl"
        _qwen2_5_vl(vc, c)
        source = "qwen2_5_vl.py"
    else:
        return None
    split = f"linears split over tp {tp}" if tp > 1 else "one GPU"
    return TowerWeights(
        model_type=kind,
        num_params=c.total,
        rank_params=c.rank,
        method=(
            f"vision tower + projector ({kind}, {c.total:,} parameters, {split}) as vLLM 0.32.0 "
            f"{source} builds it, on every pipeline stage (not loaded when --limit-mm-per-prompt sets "
            "every modality to 0)"
        ),
    )
