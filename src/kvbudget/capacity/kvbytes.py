"""Structural KV bytes: the explicit-input formula and the model-mode calculation.

Explicit mode (the seed's calculator): ``bytes = 2 x layers x kv_heads x head_dim x dtype_bytes x
tokens x seqs``; e.g. 32 layers, 8 KV heads, head_dim 128, 2 bytes, 4096 tokens, 8 sequences =
4,294,967,296 bytes (4 GiB). Model mode resolves a config into layers and applies one engine layout
(``hf``, ``vllm``, ``sglang``, ``llamacpp``). Both return a :class:`CalcResult` whose
:meth:`~CalcResult.to_dict` is the ``kvbudget calc --json`` document (schema in
``docs/commands/calc.md``). Every figure is ``computed`` (arithmetic), never measured.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kvbudget.capacity.assumptions import (
    explicit_assumptions,
    model_assumptions,
    status_from,
)
from kvbudget.capacity.dsv41_engines import refuse_dsv41_engine
from kvbudget.capacity.dtypes import dtype_from_element_bytes, get_kv_dtype
from kvbudget.capacity.engines.registry import LayoutLoad, engine_entry, parse_layout
from kvbudget.capacity.layouts.base import (
    Layout,
    LayoutNotApplicable,
    LayoutResult,
)
from kvbudget.capacity.ledger import input_entry, length_conflict
from kvbudget.capacity.result import CalcResult
from kvbudget.errors import ConfigError
from kvbudget.safety.limits import MAX_MODEL_DIM
from kvbudget.spec.from_transformers import from_transformers
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.provenance import SourceKind
from kvbudget.spec.resolve import ResolvedModel, resolve_model


def _positive(name: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{name}: must be an integer >= 1, got {value!r}", field=name)
    return value


def layer_ranges(indices: Sequence[int]) -> list[list[int]]:
    """Layer indices as half-open ``[start, stop)`` runs: ``(0, 1, 2, 5)`` -> ``[[0, 3], [5, 6]]``;
    a strided group too long to list (a period over 10^8 layers) as ``[start, stop, step]``."""
    return LayerIndices.of(indices).as_ranges()


def explicit_bytes(
    *, num_layers: int, num_kv_heads: int, head_dim: int, dtype_bytes: int, tokens: int, seqs: int
) -> tuple[int, int, int]:
    """(bytes per token, per sequence, total) of the seed formula; refuses bad counts by name."""
    for name, value in (
        ("layers", num_layers),
        ("kv_heads", num_kv_heads),
        ("head_dim", head_dim),
        ("dtype_bytes", dtype_bytes),
        ("tokens", tokens),
        ("seqs", seqs),
    ):
        _positive(name, value)
    if num_layers > MAX_MODEL_DIM:
        raise ConfigError(
            f"layers: {num_layers} is beyond the limit of {MAX_MODEL_DIM:,} (docs/limits.md); "
            "give the model's real layer count",
            field="layers",
        )
    dtype_from_element_bytes(dtype_bytes)
    per_token = 2 * num_layers * num_kv_heads * head_dim * dtype_bytes
    return per_token, per_token * tokens, per_token * tokens * seqs


def calc_explicit(
    *,
    num_layers: int,
    num_kv_heads: int,
    head_dim: int,
    dtype_bytes: int,
    tokens: int,
    seqs: int,
    confirmed: set[str] | frozenset[str] = frozenset(),
) -> CalcResult:
    """The seed's explicit mode with its assumption checklist."""
    per_token, per_seq, total = explicit_bytes(
        num_layers=num_layers,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype_bytes=dtype_bytes,
        tokens=tokens,
        seqs=seqs,
    )
    assumptions = explicit_assumptions(set(confirmed))
    status, reasons = status_from(assumptions)
    inputs = {
        "layers": num_layers,
        "kv_heads": num_kv_heads,
        "head_dim": head_dim,
        "dtype_bytes": dtype_bytes,
        "tokens": tokens,
        "seqs": seqs,
    }
    ledger = [
        input_entry(k, v, "flag", location=f"--{k.replace('_', '-')}") for k, v in inputs.items()
    ]
    group = {
        "pp_rank": 0,
        "kind": "full",
        "num_layers": num_layers,
        "layer_ranges": [[0, num_layers]],
        "tokens_kept": tokens,
        "bytes_per_token": per_token,
        "bytes_per_sequence": per_seq,
        "bytes_per_rank": total,
        "note": "2 x layers x kv_heads x head_dim x dtype_bytes",
    }
    rank = {
        "pp_rank": 0,
        "tp_ranks": 1,
        "layer_start": 0,
        "layer_end": num_layers,
        "bytes_per_rank": total,
    }
    return CalcResult(
        mode="explicit",
        status=status,
        engine="structural",
        kv_dtype=f"{dtype_bytes} bytes/element",
        tokens=tokens,
        seqs=seqs,
        bytes_per_token=per_token,
        bytes_per_sequence=per_seq,
        total_bytes=total,
        replica_bytes=total,
        per_rank_max_bytes=total,
        groups=[group],
        per_rank=[rank],
        assumptions=assumptions,
        ledger=ledger,
        reasons=reasons,
    )


def run_layout(
    spec: ModelSpec,
    engine: Layout,
    *,
    tokens: int,
    seqs: int,
    kv_dtype: str,
    v_dtype: str | None,
    tp: int,
    pp: int,
    dp: int,
    block_size: int | None,
    ctx_size: int | None = None,
    unified: bool = False,
) -> LayoutResult:
    """``engine``'s layout, looked up in the engine registry (``capacity/engines/``);
    ``ctx_size``/``unified`` are llama.cpp's -c and -kvu (other layouts refuse them)."""
    load = LayoutLoad(
        tokens=tokens,
        seqs=seqs,
        kv_dtype=kv_dtype,
        v_dtype=v_dtype,
        tp=tp,
        pp=pp,
        dp=dp,
        block_size=block_size,
        ctx_size=ctx_size,
        unified=unified,
    )
    entry = engine_entry(engine)
    refuse_dsv41_engine(spec, entry.name)
    return entry.layout(spec, load)


def _layout_tables(layout: LayoutResult) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    groups = [
        {
            "pp_rank": s.pp_rank,
            "kind": g.kind,
            "num_layers": g.num_layers,
            "layer_ranges": layer_ranges(g.layer_indices),
            "tokens_kept": g.tokens_kept,
            "bytes_per_token": g.bytes_per_token,
            "bytes_per_sequence": g.bytes_per_sequence,
            "bytes_per_rank": g.bytes_total,
            "note": g.note,
        }
        for s in layout.stages
        for g in s.groups
    ]
    ranks = [
        {
            "pp_rank": s.pp_rank,
            "tp_ranks": layout.tp,
            "layer_start": s.layer_start,
            "layer_end": s.layer_end,
            "bytes_per_rank": s.bytes_per_rank,
        }
        for s in layout.stages
    ]
    return groups, ranks


def calc_model(
    ref: str,
    *,
    engine: str = "vllm",
    engine_source: SourceKind = "default",
    kv_dtype: str = "auto",
    v_dtype: str | None = None,
    tokens: int,
    seqs: int = 1,
    tp: int = 1,
    pp: int = 1,
    dp: int = 1,
    block_size: int | None = None,
    overrides: dict[str, Any] | None = None,
    allow_download: bool = False,
    resolved: ResolvedModel | None = None,
    ctx_size: int | None = None,
    unified: bool = False,
    read_transformers: bool = False,
) -> CalcResult:
    """Resolve ``ref`` and compute its KV bytes under ``engine``'s layout.

    ``resolved`` skips the lookup (the web passes a pasted config resolved in memory);
    ``read_transformers`` reads the layer structure from transformers itself
    (:mod:`kvbudget.spec.from_transformers`).
    """
    for name, value in (("tokens", tokens), ("seqs", seqs), ("tp", tp), ("pp", pp), ("dp", dp)):
        _positive(name, value)
    layout_name = parse_layout(engine)
    if resolved is None:
        resolved = resolve_model(ref, overrides=overrides, allow_download=allow_download)
    if read_transformers:
        resolved = from_transformers(resolved, overrides=overrides)
    base: dict[str, Any] = {
        "engine": layout_name,
        "kv_dtype": kv_dtype,
        "tokens": tokens,
        "seqs": seqs,
        "tp": tp,
        "pp": pp,
        "dp": dp,
        "model_id": resolved.model_id,
        "mode": "model",
    }
    inputs = [
        input_entry(
            "engine", layout_name, engine_source, location="--engine", note="engine layout applied"
        ),
        input_entry(
            "tokens", tokens, "flag", location="--tokens", note="tokens cached per sequence"
        ),
        input_entry(
            "seqs", seqs, "flag", location="--seqs", note="sequences held at once per replica"
        ),
        input_entry("tp", tp, "flag", location="--tp"),
        input_entry("pp", pp, "flag", location="--pp"),
        input_entry("dp", dp, "flag", location="--dp", note="replicas; total = replica x dp"),
    ]
    if resolved.spec is None:
        ledger = list(resolved.ledger) + inputs
        return CalcResult(
            status="not_applicable",
            ledger=ledger,
            reasons=[resolved.reason],
            missing_fields=list(resolved.missing),
            **base,
        )
    spec = resolved.spec
    inputs[1] = length_conflict(spec, tokens, inputs[1])
    entry = engine_entry(layout_name)
    # a KV-quantized checkpoint: the engine's auto is the checkpoint's KV dtype (kv_checkpoint)
    found = entry.checkpoint_kv(spec, kv_dtype) if entry.checkpoint_kv is not None else None
    layout_kv = found.name if found is not None and found.name is not None else kv_dtype
    try:
        layout = run_layout(
            spec,
            layout_name,
            tokens=tokens,
            seqs=seqs,
            kv_dtype=layout_kv,
            v_dtype=v_dtype,
            tp=tp,
            pp=pp,
            dp=dp,
            block_size=block_size,
            ctx_size=ctx_size,
            unified=unified,
        )
    except LayoutNotApplicable as exc:
        return CalcResult(
            status="not_applicable",
            ledger=list(resolved.ledger) + inputs,
            reasons=[f"{exc.reason} (the formula does not apply; measure)"],
            **base,
        )
    dtypes = [get_kv_dtype(layout_kv, engine=layout_name, model_dtype=spec.torch_dtype)]
    if entry.picks_kv_dtype and layout.kv_dtype != dtypes[0].name:  # DeepSeek-V4: fp8_ds_mla
        dtypes[0] = get_kv_dtype(layout.kv_dtype, engine=layout_name, model_dtype=spec.torch_dtype)
    if v_dtype is not None:
        dtypes.append(get_kv_dtype(v_dtype, engine=layout_name, model_dtype=spec.torch_dtype))
    kv_note = (
        f"auto -> {dtypes[0].name} (model dtype {spec.torch_dtype})"
        if kv_dtype == "auto"
        else dtypes[0].description
    )
    if found is not None:
        kv_note = f"auto -> {found.reason}" if found.name else found.reason
    inputs.append(
        input_entry(
            "kv_dtype",
            layout.kv_dtype,
            "flag" if kv_dtype != "auto" else "config" if layout_kv != kv_dtype else "default",
            location="--kv-dtype"
            if layout_kv == kv_dtype
            else f"--kv-dtype auto; {spec.quantization_file}",
            note=kv_note,
        )
    )
    if entry.has_blocks:
        inputs.append(
            input_entry(
                "block_size",
                layout.block_size,
                "flag" if block_size else "default",
                location="--block-size",
                note="tokens per block (vLLM default 16, MLA 64, MiniMax-M3 128, hybrid raise)",
            )
        )
    assumptions = model_assumptions(spec, layout, dtypes)
    status, reasons = status_from(assumptions)
    groups, ranks = _layout_tables(layout)
    base["kv_dtype"] = layout.kv_dtype
    return CalcResult(
        status=status,
        block_size=layout.block_size,
        bytes_per_token=layout.bytes_per_token,
        bytes_per_sequence=layout.bytes_per_sequence,
        total_bytes=layout.total_bytes,
        replica_bytes=layout.replica_bytes,
        per_rank_max_bytes=layout.per_rank_max_bytes,
        groups=groups,
        per_rank=ranks,
        assumptions=assumptions,
        ledger=list(resolved.ledger) + inputs,
        reasons=reasons,
        notes=list(layout.notes),
        **base,
    )
