"""Weight bytes of a model, whole and per rank, each figure marked read / computed / estimated.

Order of sources, strongest first:

1. ``--weights-bytes`` (``flag``): a figure read from an engine log ("Model loading took X GiB"),
   bytes per GPU; used as is on every rank.
2. A snapshot's ``model.safetensors.index.json`` ``metadata.total_size`` (or the size of a lone
   ``model.safetensors``): ``read``. The split over ranks is then ``computed`` from the
   architecture's shares (below) and scaled to the read total (a vLLM plan without an MTP
   drafter then takes the checkpoint's MTP tensors off: :mod:`kvbudget.capacity.checkpoint_mtp`).
3. The architecture's parameter count (``computed`` when every layer kind has a known formula,
   ``estimated`` when some layers - Mamba / gated delta net / linear attention - are approximated):
   embeddings (vocab x hidden, lm_head unless ``tie_word_embeddings``), attention projections
   from the resolved layers (MLA: q/kv low-rank paths), MLP (gated, 3 x hidden x intermediate) or
   MoE (experts x 3 x hidden x moe_intermediate + router + shared experts), norms.

Quantization (``quantization_config``): ``fp8`` = 1 B per linear weight plus one fp32 scale per
``weight_block_size`` block; ``awq`` / ``gptq`` = ``bits/8`` B per weight plus per group an fp16
scale and a packed ``bits``-bit zero (GPTQ ``desc_act`` adds an int32 ``g_idx`` per input row);
``mxfp4`` (gpt-oss experts) = 0.5 B plus one 1-byte scale per 32; ModelOpt ``NVFP4``
(``modelopt_fp4``) = 0.5 B plus one 1-byte scale per ``group_size`` (16), ModelOpt ``FP8``
(``modelopt``) as per-tensor ``fp8``; a ModelOpt checkpoint's ``exclude_modules`` (``ignore`` in a
``config.json`` form) matched per module as vLLM does (:mod:`kvbudget.capacity.modelopt_exclude`):
excluded modules in the model dtype, the figure ``estimated`` only when a pattern names nothing
kvbudget can place; ``compressed-tensors`` = the
first config group's ``num_bits`` (8: one fp32 scale per output channel; 4: an fp16 scale per group). Embeddings, lm_head, norms and
routers stay in the model dtype (MiMo-V2's router: ``moe_router_dtype``, default fp32, plus its
fp32 ``e_score_correction_bias``, and its sliding layers' per-head sink bias, as vLLM 0.32 builds
them: :mod:`kvbudget.capacity.weight_matrices`). Tensor parallel divides projections and experts by ``tp``
(KV projections by ``max(1, kv_heads // tp)`` heads, MLA down-projections replicated); pipeline
parallel places layers by the engine's split (``pp_split``: vLLM's ``get_pp_indices`` unless
the engine's planner gives its own, SGLang's ``layouts.base.sglang_pp_split``), embeddings on the
first stage, lm_head
(again, even when tied) and the final norm on the last.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from kvbudget.capacity.layouts.base import PpSplit
from kvbudget.capacity.layouts.vllm import get_pp_indices
from kvbudget.capacity.model_dtype import vllm_quant_name
from kvbudget.capacity.modelopt_exclude import Exclusion, exclude_patterns, resolve_exclusion
from kvbudget.capacity.moe_layers import count_moe_layers, is_moe_layer
from kvbudget.capacity.vision import vision_tower
from kvbudget.capacity.weight_matrices import (
    Matrix as Matrix,  # re-exported: callers import it here
)
from kvbudget.capacity.weight_matrices import _matrix_bytes, _raw, layer_matrices
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.units import cdiv

WeightsSource = Literal["flag", "read", "computed", "estimated"]

#: the count's notes on what it leaves out (a module-by-module pricer drops them)
APPROX_NOTE = "state-space / linear-attention / KV-shared projections are approximated"
NORMS_NOTE = "the language model's biases and q/k norms are not counted"


def without_count_notes(weights: WeightsEstimate) -> WeightsEstimate:
    """``weights`` without the parameter count's notes on what it approximates: for a pricer
    that sizes every module itself (DeepSeek-V4, Qwen4-Exp), they no longer hold."""
    notes = tuple(n for n in weights.notes if n not in (APPROX_NOTE, NORMS_NOTE))
    return replace(weights, notes=notes)


@dataclass(frozen=True, slots=True)
class WeightsEstimate:
    """Weight bytes: ``per_rank_bytes[pp_rank]`` is one GPU of that pipeline stage."""

    total_bytes: int
    per_rank_bytes: tuple[int, ...]
    source: WeightsSource
    method: str
    num_params: int | None
    quantization: str
    notes: tuple[str, ...] = ()
    #: parameters of the routed experts (MoE layers; shared experts and routers not included):
    #: each token reads only ``num_experts_per_tok`` of ``num_experts`` of them
    num_expert_params: int = 0
    #: bytes of those routed experts, whole model (stored bytes: quantized where they are)
    expert_bytes: int = 0
    #: parameters of a VLM's vision tower and projector (not in ``num_params``, which is the
    #: language model a decode step reads); their bytes are in every stage's figure
    vision_params: int = 0
    #: their bytes, whole (once): loaded, never read by a decode step
    vision_bytes: int = 0
    #: parameters of the modules a ModelOpt checkpoint's ``exclude_modules`` leaves unquantized
    #: (their GEMMs run in the model dtype): outside the routed experts, and of routed experts
    excluded_params: int = 0
    excluded_expert_params: int = 0

    @property
    def max_rank_bytes(self) -> int:
        return max(self.per_rank_bytes)


def _model_dtype_bytes(spec: ModelSpec) -> int:
    size = spec.dtype_bytes
    return 2 if size is None or size == 4 else size


def _exclusion(spec: ModelSpec) -> Exclusion | None:
    """The ModelOpt ``exclude_modules`` list against every decoder layer's matrices."""
    if not [p for p in exclude_patterns(spec.quantization_config) if p != "lm_head"]:
        return None
    names: dict[int, list[str]] = {}
    for i in range(spec.num_layers):
        mats, _ = layer_matrices(spec, i, is_moe_layer(spec, i))
        names[i] = [m.name for m in mats]
    return resolve_exclusion(spec, names)


def _layer_groups(
    spec: ModelSpec, indices: range, exclusion: Exclusion | None
) -> list[tuple[bool, int, frozenset[str]]]:
    """``(moe, count, excluded matrix names)`` over the layers ``indices`` of one run."""
    if exclusion is None or exclusion.family is None:
        num_moe = count_moe_layers(spec, indices)
        out = [(True, num_moe, frozenset[str]()), (False, len(indices) - num_moe, frozenset())]
        return [g for g in out if g[1]]
    groups: Counter[tuple[bool, frozenset[str]]] = Counter()
    for i in indices:
        moe = is_moe_layer(spec, i)
        mats, _ = layer_matrices(spec, i, moe)
        groups[moe, frozenset(m.name for m in mats if exclusion.excluded(spec, i, m.name))] += 1
    return [(moe, count, excluded) for (moe, excluded), count in groups.items()]


def layer_rank_bytes(
    spec: ModelSpec,
    mats: list[Matrix],
    *,
    tp: int,
    moe_ranks: int,
    excluded: frozenset[str] = frozenset(),
) -> int:
    """One GPU's bytes of one decoder layer made of ``mats`` (:func:`layer_matrices`) and its two
    norms: projections split over ``tp``, routed experts over ``moe_ranks``, each matrix in the
    checkpoint's quantization unless ``excluded`` (then in the model dtype)."""
    dtype_bytes = spec.dtype_bytes or 2
    kv_heads = spec.num_kv_heads() or 0
    total = 2 * (spec.hidden_size or 0) * dtype_bytes
    for m in mats:
        mq = None if m.name in excluded else spec.quantization_config
        shape = m.rank_shape(moe_ranks if m.expert else tp, kv_heads)
        total += m.count * _matrix_bytes(m, shape, mq, dtype_bytes)
    return total


def compute_weights(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    moe_ranks: int | None = None,
    pp_split: PpSplit = get_pp_indices,
) -> WeightsEstimate:
    """Weight bytes from the architecture (no snapshot): whole model and per pipeline stage.

    ``moe_ranks``: the GPUs the routed experts are spread over (default ``tp``). With vLLM's
    ``--data-parallel-size dp`` a MoE layer spans every rank of every data-parallel engine:
    ``FusedMoEParallelConfig.make`` (vLLM 0.32.0 ``model_executor/layers/fused_moe/config.py``)
    flattens them to ``dp x tp`` (experts split whole with ``--enable-expert-parallel``,
    tensor-sharded otherwise: the same bytes per GPU), while attention and dense layers stay
    split over ``tp`` within each engine.
    """
    if spec.model_type in ("deepseek_v41", "deepseek_v41_text"):
        raise ConfigError(
            f"weights: {spec.model_type} (DeepSeek-V4.1) is not priced: its modules, Engram tables "
            "and quantization differ from DeepSeek-V4's (vLLM 0.32 models/deepseek_v41/nvidia/"
            "model.py, common/engram.py, quant_config.py); pass --weights-bytes from the engine's log",
            field="weights_bytes",
        )
    experts_over = moe_ranks or tp
    h = spec.hidden_size or 0
    vocab = spec.vocab_size
    if not h or not vocab:
        raise ConfigError(
            "weights: hidden_size and vocab_size are needed to count parameters; pass --weights-bytes",
            field="weights_bytes",
        )
    quant = spec.quantization_config
    # the planner resolved --dtype first (model_dtype.with_dtype): float32 here is --dtype float32
    dtype_bytes = spec.dtype_bytes or 2
    notes: list[str] = []
    approx_any = False
    stage_bytes = [0] * pp
    total_bytes = 0
    params = 0
    expert_params = expert_bytes = 0
    excluded_params = excluded_expert_params = 0
    norm = h * dtype_bytes
    exclusion = _exclusion(spec)
    for p in range(pp):
        start, end = pp_split(spec.num_layers, p, pp)  # the engine's split (vLLM's default)
        for layer, indices in spec.layer_seq[start:end].runs():
            for moe, count, excluded in _layer_groups(spec, indices, exclusion):
                mats, approx = layer_matrices(spec, layer.layer_index, moe)
                approx_any = approx_any or approx
                layer_rank = layer_rank_bytes(
                    spec, mats, tp=tp, moe_ranks=experts_over, excluded=excluded
                )
                layer_total = 0
                for m in mats:
                    # an excluded module is stored unquantized (UnquantizedLinearMethod)
                    mq = None if m.name in excluded else quant
                    layer_total += m.count * _matrix_bytes(
                        m, (m.in_features, m.out_features), mq, dtype_bytes
                    )
                    params += count * m.count * m.in_features * m.out_features
                    if m.name in excluded and m.quantizable:
                        if m.expert:
                            excluded_expert_params += (
                                count * m.count * m.in_features * m.out_features
                            )
                        else:
                            excluded_params += count * m.count * m.in_features * m.out_features
                    if m.expert:
                        expert_params += count * m.count * m.in_features * m.out_features
                        expert_bytes += (
                            count
                            * m.count
                            * _matrix_bytes(m, (m.in_features, m.out_features), mq, dtype_bytes)
                        )
                stage_bytes[p] += count * layer_rank
                total_bytes += count * (layer_total + 2 * norm)
                params += count * 2 * h
    embed_rank = cdiv(vocab, tp) * h * dtype_bytes
    stage_bytes[0] += embed_rank
    lm_head_on_last = (not spec.tie_word_embeddings) or pp > 1
    if lm_head_on_last:
        stage_bytes[-1] += embed_rank
    stage_bytes[-1] += norm
    embed_total = vocab * h * dtype_bytes
    total_bytes += embed_total * (1 if spec.tie_word_embeddings else 2) + norm
    params += vocab * h * (1 if spec.tie_word_embeddings else 2) + h
    if spec.tie_word_embeddings and pp > 1:
        notes.append("tied embeddings: the last pipeline stage holds its own copy of lm_head")
    qname = vllm_quant_name(quant)
    partly_excluded = exclusion is not None and bool(exclusion.unmapped)
    if exclusion is not None and exclusion.unmapped:
        notes.append(
            f"exclude_modules pattern {exclusion.unmapped[0][:120]} "
            f"({len(exclusion.unmapped)} such); what it names is counted as quantized; a "
            "snapshot's size or --weights-bytes gives the exact figure"
        )
    elif exclusion is not None:
        notes.append(
            f"exclude_modules: {len(exclusion.patterns)} pattern(s) matched per module as vLLM "
            "does (ModelOptQuantConfigBase.is_layer_excluded); excluded modules in the model dtype"
        )
    if approx_any:
        notes.append(APPROX_NOTE)
    notes.append(NORMS_NOTE)
    method = f"parameter count from the architecture ({params:,} parameters), quantization {qname}"
    tower = vision_tower(spec.wrapper_config, text_hidden=h, tp=tp)
    if tower is not None:
        stage_bytes = [b + tower.rank_params * dtype_bytes for b in stage_bytes]
        total_bytes += tower.num_params * dtype_bytes
        method += f"; + {tower.method}, {dtype_bytes} B each"
    elif spec.wrapper_config.get("vision_config"):
        notes.append("this wrapper's vision tower is not counted (its type is not modelled)")
    return WeightsEstimate(
        total_bytes=total_bytes,
        per_rank_bytes=tuple(stage_bytes),
        source="estimated" if approx_any or partly_excluded else "computed",
        method=method,
        num_params=params,
        quantization=qname,
        notes=tuple(notes),
        num_expert_params=expert_params,
        expert_bytes=expert_bytes,
        vision_params=tower.num_params if tower else 0,
        vision_bytes=tower.num_params * dtype_bytes if tower else 0,
        excluded_params=excluded_params,
        excluded_expert_params=excluded_expert_params,
    )


def read_snapshot_total(snapshot: Path) -> int | None:
    """``metadata.total_size`` of ``model.safetensors.index.json``, or a lone file's size."""
    index = snapshot / "model.safetensors.index.json"
    if index.is_file():
        try:
            data = json.loads(index.read_text("utf-8"))
            return int(data["metadata"]["total_size"])
        except (ValueError, KeyError, TypeError, RecursionError) as exc:
            raise ConfigError(
                f"snapshot: {index} has no readable metadata.total_size ({exc}); pass --weights-bytes",
                field="snapshot",
            ) from exc
    single = snapshot / "model.safetensors"
    if single.is_file():
        return single.stat().st_size
    return None


def rope_cache_bytes(spec: ModelSpec) -> int:
    """vLLM's rotary ``cos_sin_cache`` buffer, loaded with the weights (one per stage: ``get_rope``
    caches one instance per configuration): ``max_position_embeddings x rotary_dim`` in the model
    dtype (0.19.0 ``vllm/model_executor/layers/rotary_embedding/base.py``, ``cache.to(dtype)``).
    ``rotary_dim`` is ``qk_rope_head_dim`` for MLA, else ``head_dim x partial_rotary_factor``."""
    max_pos = spec.max_position_embeddings
    rope_keys = ("rope_theta", "rope_scaling", "rope_parameters")
    if not max_pos or not any(k in spec.raw_config for k in rope_keys):
        return 0
    if _raw(spec, "qk_rope_head_dim"):
        rotary = int(_raw(spec, "qk_rope_head_dim"))
    else:
        heads = spec.num_attention_heads or 1
        head_dim = int(_raw(spec, "head_dim", 0) or (spec.hidden_size or 0) // heads)
        rotary = int(head_dim * float(_raw(spec, "partial_rotary_factor", 1.0) or 1.0))
    return max_pos * rotary * (spec.dtype_bytes or 2)


def with_rope_cache(weights: WeightsEstimate, spec: ModelSpec) -> WeightsEstimate:
    """Add the rotary cache to each stage (not to a ``--weights-bytes`` figure, already whole)."""
    extra = rope_cache_bytes(spec)
    if not extra or weights.source == "flag":
        return weights
    return replace(
        weights,
        per_rank_bytes=tuple(b + extra for b in weights.per_rank_bytes),
        method=f"{weights.method}; + rotary cos_sin_cache {extra:,} B per stage (vLLM buffer)",
    )


def estimate_weights(
    spec: ModelSpec,
    *,
    tp: int = 1,
    pp: int = 1,
    snapshot: Path | None = None,
    weights_bytes: int | None = None,
    moe_ranks: int | None = None,
    pp_split: PpSplit = get_pp_indices,
) -> WeightsEstimate:
    """Weight bytes by the strongest source available (flag > snapshot > architecture);
    ``moe_ranks`` and ``pp_split`` (the engine's layer split) as :func:`compute_weights`."""
    if weights_bytes is not None:
        return WeightsEstimate(
            total_bytes=weights_bytes * tp * pp,
            per_rank_bytes=(weights_bytes,) * pp,
            source="flag",
            method="--weights-bytes (bytes per GPU, e.g. from the engine log)",
            num_params=None,
            quantization=vllm_quant_name(spec.quantization_config),
        )
    computed = compute_weights(spec, tp=tp, pp=pp, moe_ranks=moe_ranks, pp_split=pp_split)
    if snapshot is not None and not snapshot.is_dir():
        raise ConfigError(
            f"snapshot: {snapshot} is not a directory; pass the model snapshot folder "
            "(the one holding model.safetensors.index.json)",
            field="snapshot",
        )
    total_read = read_snapshot_total(snapshot) if snapshot is not None else None
    if total_read is None:
        if snapshot is not None:
            note = f"{snapshot} has no model.safetensors(.index.json); weights computed from the architecture"
            return replace(computed, notes=(*computed.notes, note))
        return computed
    computed_sum = sum(computed.per_rank_bytes) * tp
    if moe_ranks is not None and moe_ranks != tp:  # one engine's ranks do not hold the whole
        computed_sum = computed.total_bytes
    scale = total_read / computed_sum if computed_sum else 1.0
    return WeightsEstimate(
        total_bytes=total_read,
        per_rank_bytes=tuple(int(b * scale) for b in computed.per_rank_bytes),
        source="read",
        method=(
            f"total read from {snapshot} (metadata.total_size = {total_read:,} B); per-rank split "
            "computed from the architecture's shares"
        ),
        num_params=computed.num_params,
        quantization=computed.quantization,
        notes=computed.notes,
        num_expert_params=computed.num_expert_params,
        expert_bytes=int(computed.expert_bytes * total_read / computed.total_bytes)
        if computed.total_bytes
        else 0,
        vision_params=computed.vision_params,
        vision_bytes=computed.vision_bytes,
        excluded_params=computed.excluded_params,
        excluded_expert_params=computed.excluded_expert_params,
    )
