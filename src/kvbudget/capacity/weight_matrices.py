"""A model's weight matrices and their bytes under its quantization (``capacity.weights`` sums them).

Each decoder layer's projections as :class:`Matrix` (attention or MLA, MLP or MoE, with how tensor
parallel splits each) and one matrix's bytes per quantization method; the methods and their
scale layouts are listed in :mod:`kvbudget.capacity.weights`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvbudget.capacity.model_dtype import vllm_quant_name
from kvbudget.capacity.moe_layers import is_moe_layer
from kvbudget.errors import ConfigError, SpecError
from kvbudget.spec.layers import (
    MLA,
    CompressedAttention,
    FullAttention,
    KVShared,
    LayerSpec,
    NoAttention,
    ParallelHybrid,
)
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer
from kvbudget.units import cdiv

Split = Literal["col", "row", "rep", "kv"]


@dataclass(frozen=True, slots=True)
class Matrix:
    """One weight matrix (``in_features x out_features``), ``count`` copies, how TP splits it."""

    name: str
    in_features: int
    out_features: int
    count: int = 1
    split: Split = "col"
    quantizable: bool = True
    expert: bool = False
    #: a K / V projection's own KV heads (its layer's: MiMo-V2-Flash's sliding layers have 8,
    #: its full layers 4); 0 = the ``kv_heads`` :meth:`rank_shape` is given
    kv_heads: int = 0

    def rank_shape(self, tp: int, kv_heads: int = 0) -> tuple[int, int]:
        """One rank's ``(in, out)``; a ``kv`` split keeps ``max(1, heads // tp)`` whole heads
        (vLLM 0.32 ``QKVParallelLinear``, ``model_executor/layers/linear.py`` lines 1050-1063:
        one replicated head per rank when ``tp >= heads``)."""
        heads = self.kv_heads or kv_heads
        if self.split == "col":
            return self.in_features, cdiv(self.out_features, tp)
        if self.split == "row":
            return cdiv(self.in_features, tp), self.out_features
        if self.split == "kv" and heads:
            per_head = self.out_features // heads
            return self.in_features, max(1, heads // tp) * per_head
        return self.in_features, self.out_features


def _raw(spec: ModelSpec, key: str, default: Any = None) -> Any:
    return spec.raw_config.get(key, default)


def _attention_matrices(layer: LayerSpec, spec: ModelSpec, h: int) -> tuple[list[Matrix], bool]:
    """Projection matrices of one layer's mixer; the bool is True when approximated."""
    n_heads = spec.num_attention_heads or 1
    if isinstance(layer, MLA):
        nope = layer.qk_nope_head_dim or int(_raw(spec, "qk_nope_head_dim", 128))
        v_dim = layer.v_head_dim or int(_raw(spec, "v_head_dim", 128))
        heads = layer.num_heads or n_heads
        q_lora = _raw(spec, "q_lora_rank")
        out = []
        if q_lora:
            out.append(Matrix("q_a_proj", h, int(q_lora), split="rep"))
            out.append(Matrix("q_b_proj", int(q_lora), heads * (nope + layer.qk_rope_head_dim)))
        else:
            out.append(Matrix("q_proj", h, heads * (nope + layer.qk_rope_head_dim)))
        out.append(Matrix("kv_a_proj", h, layer.kv_lora_rank + layer.qk_rope_head_dim, split="rep"))
        out.append(Matrix("kv_b_proj", layer.kv_lora_rank, heads * (nope + v_dim)))
        out.append(Matrix("o_proj", heads * v_dim, h, split="row"))
        return out, False
    if isinstance(layer, FullAttention):
        d, dv, kv = layer.head_dim, layer.v_dim, layer.num_kv_heads
        return [
            Matrix("q_proj", h, n_heads * d),
            Matrix("k_proj", h, kv * d, split="kv", kv_heads=kv),
            Matrix("v_proj", h, kv * dv, split="kv", kv_heads=kv),
            Matrix("o_proj", n_heads * dv, h, split="row"),
        ], False
    if isinstance(layer, StateLayer):
        if layer.state_kind == "sconv_fp32":  # depthwise convs: kernel x channels, negligible
            return [], True
        if layer.state_kind == "gdn":
            k_dim = layer.num_k_heads * layer.head_k_dim
            v_dim = layer.num_heads * layer.head_dim
            return [
                Matrix("in_proj_qkvz", h, 2 * k_dim + 2 * v_dim),
                Matrix("in_proj_ba", h, 2 * layer.num_heads),
                Matrix("out_proj", v_dim, h, split="row"),
            ], True
        if layer.state_kind == "linear":
            d = layer.head_dim or h // n_heads
            return [
                Matrix("qkv_proj", h, 3 * layer.num_heads * d),
                Matrix("out_proj", layer.num_heads * d, h, split="row"),
            ], True
        inner = layer.intermediate_size or 2 * h
        extra = (
            2 * layer.n_groups * layer.state_size + layer.num_heads
            if layer.state_kind == "mamba2"
            else inner
        )
        return [
            Matrix("in_proj", h, 2 * inner + extra),
            Matrix("out_proj", inner, h, split="row"),
        ], True
    if isinstance(layer, ParallelHybrid):  # Falcon-H1: both branches' projections
        attention, _ = _attention_matrices(layer.attention, spec, h)
        state, _ = _attention_matrices(layer.state, spec, h)
        return attention + state, True
    if isinstance(layer, CompressedAttention):  # DeepSeek-V4 (modeling_deepseek_v4.py)
        d, q_lora = layer.head_dim, int(_raw(spec, "q_lora_rank", 1024))
        groups, o_lora = int(_raw(spec, "o_groups", 8)), int(_raw(spec, "o_lora_rank", 1024))
        series = 2 if layer.index_head_dim else 1  # CSA compresses two series per token
        out = [
            Matrix("q_a_proj", h, q_lora, split="rep"),
            Matrix("q_b_proj", q_lora, n_heads * d),
            Matrix("kv_proj", h, d, split="rep"),
            Matrix("o_a_proj", n_heads * d // groups, groups * o_lora, split="row"),
            Matrix("o_b_proj", groups * o_lora, h, split="rep"),
            Matrix("compressor.kv_gate", h, 2 * series * d, split="rep"),
        ]
        if layer.index_head_dim:  # the indexer's own compressor and query projection
            index_heads = int(_raw(spec, "index_n_heads", 64))
            out.append(Matrix("indexer.kv_gate", h, 4 * layer.index_head_dim, split="rep"))
            out.append(Matrix("indexer.q_b_proj", q_lora, index_heads * layer.index_head_dim))
        return out, True
    # KV-shared layers still project Q (and K/V that are discarded in some models); NoAttention none
    if isinstance(layer, KVShared):
        d = h // n_heads
        return [
            Matrix("q_proj", h, n_heads * d),
            Matrix("o_proj", n_heads * d, h, split="row"),
        ], True
    assert isinstance(layer, NoAttention)
    return [], False


def _mlp_matrices(spec: ModelSpec, index: int, h: int, moe: bool | None = None) -> list[Matrix]:
    if is_moe_layer(spec, index) if moe is None else moe:
        assert spec.num_experts is not None
        moe_inter = spec.moe_intermediate_size or spec.intermediate_size or 4 * h
        out = [
            Matrix("experts.gate_up", h, 2 * moe_inter, count=spec.num_experts, expert=True),
            Matrix("experts.down", moe_inter, h, count=spec.num_experts, split="row", expert=True),
            Matrix("router", h, spec.num_experts, split="rep", quantizable=False),
        ]
        shared_inter = spec.shared_expert_intermediate_size or (
            (spec.num_shared_experts or 0) * moe_inter
        )
        if shared_inter:
            out.append(Matrix("shared.gate_up", h, 2 * shared_inter))
            out.append(Matrix("shared.down", shared_inter, h, split="row"))
        return out
    # MiniMax-M3's dense layers (vLLM 0.32.0 models/minimax_m3/nvidia/model.py line 750,
    # transformers' MiniMaxM3VLDenseMLP): dense_intermediate_size, not the experts' size
    dense = _raw(spec, "dense_intermediate_size") if spec.model_type.startswith("minimax_m3") else 0
    inter = int(dense or _raw(spec, "intermediate_size_mlp", 0) or spec.intermediate_size or 0)
    if not inter:
        return []
    return [Matrix("mlp.gate_up", h, 2 * inter), Matrix("mlp.down", inter, h, split="row")]


def layer_matrices(
    spec: ModelSpec, index: int, moe: bool | None = None, layer: LayerSpec | None = None
) -> tuple[list[Matrix], bool]:
    """All matrices of decoder layer ``index`` and whether any were approximated
    (``moe`` given: whether it is a MoE layer, else read from the config's pattern; ``layer``
    given: its mixer, for a layer outside ``spec.layers`` such as an MTP drafter's)."""
    h = spec.hidden_size
    if not h:
        raise ConfigError(
            "hidden_size: the model config has none; pass --weights-bytes to plan without it",
            field="hidden_size",
        )
    mixer, approx = _attention_matrices(spec.layers[index] if layer is None else layer, spec, h)
    return mixer + _mlp_matrices(spec, index, h, moe), approx


def _quant_int(quant: dict[str, Any], key: str, default: Any, minimum: int) -> int:
    """An integer of ``quantization_config`` (a wrong type is a one-line SpecError)."""
    value = quant.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= 2**31:
        raise SpecError(
            f"quantization_config.{key}: expected an integer >= {minimum}, got "
            f"{str(value)[:40]!r}; fix the config",
            field=f"quantization_config.{key}",
        )
    return value


def _matrix_bytes(
    m: Matrix, shape: tuple[int, int], quant: dict[str, Any] | None, dtype_bytes: int
) -> int:
    """Bytes of one copy of ``m`` on one rank with shape ``(in, out)``."""
    n_in, n_out = shape
    if not quant or not m.quantizable:
        return n_in * n_out * dtype_bytes
    method = vllm_quant_name(quant)
    if method == "modelopt_fp4":
        # ModelOptNvFp4LinearMethod / its fused MoE (vLLM 0.32.0 modelopt.py): the weight packed
        # two e2m1 values per byte, one float8_e4m3fn scale per ``group_size`` inputs of each
        # output row, and per-tensor fp32 weight_scale_2 and input (global) scale
        nested = quant.get("quantization")  # hf_quant_config.json nests its fields
        group = _quant_int(nested if isinstance(nested, dict) else quant, "group_size", 16, 1)
        return cdiv(n_in * n_out, 2) + n_out * cdiv(n_in, group) + 8
    if method in ("fp8", "modelopt"):  # modelopt FP8: per-tensor, as fp8 without blocks
        block = quant.get("weight_block_size")
        if block:
            rows = _quant_int({"b": block[0] if isinstance(block, list) else block}, "b", 1, 1)
            cols = _quant_int(
                {"b": block[1] if isinstance(block, list) and len(block) > 1 else None}, "b", 1, 1
            )
            scales = cdiv(n_out, rows) * cdiv(n_in, cols)
        else:
            scales = 1
        return n_in * n_out + 4 * scales
    if method in ("awq", "gptq"):
        bits = _quant_int(quant, "bits", quant.get("w_bit", 4), 1)
        group = _quant_int(quant, "group_size", quant.get("q_group_size", 128), -1)
        group = n_in if group <= 0 else group
        groups = cdiv(n_in, group)
        packed = cdiv(n_in * n_out * bits, 8)
        scales = groups * n_out * 2
        zeros = cdiv(groups * n_out * bits, 8)
        g_idx = n_in * 4 if method == "gptq" and quant.get("desc_act") else 0
        return packed + scales + zeros + g_idx
    if method == "compressed-tensors":
        return _compressed_tensors_bytes(n_in, n_out, quant)
    if method == "mxfp4":
        if not m.expert:
            return n_in * n_out * dtype_bytes
        return cdiv(n_in * n_out, 2) + cdiv(n_in * n_out, 32)
    raise ConfigError(
        f"quantization_config.quant_method: {method!r} is not modelled; pass --weights-bytes "
        "with the figure from the engine log ('Model loading took X GiB')",
        field="quantization_config",
    )


def _compressed_tensors_bytes(n_in: int, n_out: int, quant: dict[str, Any]) -> int:
    """compressed-tensors: the first config group's weight scheme (8-bit: one fp32 scale per
    output channel; fewer bits: packed with an fp16 scale per ``group_size`` inputs)."""
    groups = quant.get("config_groups") or {}
    first: Any = next(iter(groups.values()), {}) if isinstance(groups, dict) else {}
    weights: Any = (first.get("weights") or {}) if isinstance(first, dict) else {}
    bits = int(weights.get("num_bits", 8))
    if bits >= 8:
        return n_in * n_out * bits // 8 + 4 * n_out
    group = int(weights.get("group_size") or n_in)
    return cdiv(n_in * n_out * bits, 8) + cdiv(n_in, group) * n_out * 2
