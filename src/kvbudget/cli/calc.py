"""``kvbudget calc``: structural KV-cache bytes, explicit or from a model config."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict

import click
from rich.console import Console

from kvbudget.capacity.assumptions import CHECKLIST
from kvbudget.capacity.engines.registry import engine_entry, layout_names, parse_layout
from kvbudget.capacity.kvbytes import calc_explicit, calc_model
from kvbudget.capacity.layouts.llamacpp import llamacpp_cells, llamacpp_kv_split
from kvbudget.cli.calc_flags import LlamaKnobs, count_flag
from kvbudget.cli.calc_render import render
from kvbudget.cli.vocab import DP, KV_DTYPE, PP, TP, RegisteredChoice
from kvbudget.errors import ConfigError
from kvbudget.spec.resolve import parse_overrides, resolve_model

EXIT_NOT_APPLICABLE = 3
_EXPLICIT = ("layers", "kv_heads", "head_dim", "dtype_bytes")


@click.command("calc")
@click.option(
    "--model",
    "model_ref",
    help="config.json path, snapshot dir, catalog id (see 'kvbudget models') or cached repo id.",
)
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a config key (recorded as user-supplied). Repeatable.",
)
@click.option(
    "--download",
    is_flag=True,
    help="Allow downloading config.json from the Hugging Face Hub (off by default).",
)
@click.option(
    "--engine",
    type=RegisteredChoice(layout_names),
    help="Engine layout for --model (default vllm).",
)
@click.option(
    "--from-transformers",
    "read_transformers",
    is_flag=True,
    help="Read the layer structure from transformers itself (meta-device model; needs "
    "transformers and torch) and check it against kvbudget's table.",
)
@click.option(
    *KV_DTYPE,
    "kv_dtype",
    default="auto",
    show_default=True,
    help="KV cache dtype (auto = model dtype; fp8, nvfp4, q8_0, ...). For llamacpp this is -ctk.",
)
@click.option(
    "--v-dtype", help="llamacpp only: V cache type (-ctv) when it differs from --kv-dtype."
)
@click.option(
    "--ctx-size",
    help="llamacpp only: llama.cpp -c (total cells before padding to 256); --tokens then "
    "defaults to the cells of one slot (with --kv-unified: n_ctx / slots).",
)
@click.option("--parallel", help="llamacpp only: llama.cpp -np (slots); same as --seqs.")
@click.option(
    "--kv-unified",
    is_flag=True,
    help="llamacpp only: llama.cpp -kvu (one KV stream shared by all slots).",
)
@click.option("--cache-type-k", help="llamacpp only: llama.cpp -ctk (same as --kv-dtype).")
@click.option("--cache-type-v", help="llamacpp only: llama.cpp -ctv (same as --v-dtype).")
@click.option(
    "--tokens", help="Tokens cached per sequence (e.g. 4096, 128k = 128,000, 128K = 131,072)."
)
@click.option("--seqs", help="Sequences held at once per replica [default: 1].")
@click.option(*TP, "tp", help="Tensor-parallel size [default: 1].")
@click.option(*PP, "pp", help="Pipeline-parallel size [default: 1].")
@click.option(*DP, "dp", help="Data-parallel replicas [default: 1].")
@click.option(
    "--block-size",
    help="vllm only: tokens per block (default 16; 64 for MLA; 128 for MiniMax-M3; raised for "
    "hybrid mamba).",
)
@click.option("--layers", help="Explicit mode: number of cache layers.")
@click.option("--kv-heads", help="Explicit mode: KV heads per layer (not query heads).")
@click.option("--head-dim", help="Explicit mode: head dimension.")
@click.option("--dtype-bytes", help="Explicit mode: bytes per element (1, 2 or 4).")
@click.option(
    "--assume",
    "assumes",
    multiple=True,
    type=click.Choice([*CHECKLIST, "all"]),
    help="Explicit mode: confirm a checklist assumption (repeatable; 'all' confirms every one).",
)
@click.option(
    "--all-full-attention",
    "c_full",
    is_flag=True,
    help="Explicit mode: same as --assume full_attention.",
)
@click.option(
    "--identical-layers",
    "c_identical",
    is_flag=True,
    help="Explicit mode: same as --assume identical_layers.",
)
@click.option(
    "--independent-seqs",
    "c_independent",
    is_flag=True,
    help="Explicit mode: same as --assume independent_sequences.",
)
@click.option(
    "--no-sliding-window",
    "c_sliding",
    is_flag=True,
    help="Explicit mode: same as --assume no_sliding_window.",
)
@click.option(
    "--no-hybrid-state",
    "c_hybrid",
    is_flag=True,
    help="Explicit mode: same as --assume no_hybrid_state.",
)
@click.option(
    "--no-quant-metadata",
    "c_quant",
    is_flag=True,
    help="Explicit mode: same as --assume no_quant_metadata.",
)
@click.option(
    "--no-block-padding",
    "c_padding",
    is_flag=True,
    help="Explicit mode: same as --assume no_block_padding.",
)
@click.option(
    "--json", "as_json", is_flag=True, help="Print one JSON document (schema kvbudget.calc/1)."
)
def calc(
    model_ref: str | None,
    sets: tuple[str, ...],
    download: bool,
    engine: str | None,
    read_transformers: bool,
    kv_dtype: str,
    v_dtype: str | None,
    ctx_size: str | None,
    parallel: str | None,
    kv_unified: bool,
    cache_type_k: str | None,
    cache_type_v: str | None,
    tokens: str | None,
    seqs: str | None,
    tp: str | None,
    pp: str | None,
    dp: str | None,
    block_size: str | None,
    layers: str | None,
    kv_heads: str | None,
    head_dim: str | None,
    dtype_bytes: str | None,
    assumes: tuple[str, ...],
    c_full: bool,
    c_identical: bool,
    c_independent: bool,
    c_sliding: bool,
    c_hybrid: bool,
    c_quant: bool,
    c_padding: bool,
    as_json: bool,
) -> None:
    """KV-cache bytes per token, per sequence and in total (binary MiB/GiB), with status,
    assumption checklist and provenance ledger.

    Explicit mode: --layers --kv-heads --head-dim --dtype-bytes --tokens --seqs [--assume ...].
    Model mode: --model REF --tokens N [--engine --kv-dtype --tp --pp --dp --block-size].
    Status is exact, structural_reference or not_applicable (exit code 3).
    """
    layout = (
        None if engine is None else parse_layout(engine)
    )  # RegisteredChoice(layout_names) checked it
    confirm_flags = {
        "full_attention": c_full,
        "identical_layers": c_identical,
        "independent_sequences": c_independent,
        "no_sliding_window": c_sliding,
        "no_hybrid_state": c_hybrid,
        "no_quant_metadata": c_quant,
        "no_block_padding": c_padding,
    }
    assumes = (*assumes, *(name for name, on in confirm_flags.items() if on))
    explicit = {
        "layers": layers,
        "kv_heads": kv_heads,
        "head_dim": head_dim,
        "dtype_bytes": dtype_bytes,
    }
    given = [k for k, v in explicit.items() if v is not None]
    llama = LlamaKnobs.parse(
        model_ref,
        layout,
        kv_dtype,
        v_dtype,
        ctx_size,
        parallel,
        kv_unified,
        cache_type_k,
        cache_type_v,
        seqs,
    )
    kv_dtype, v_dtype = llama.kv_dtype, llama.v_dtype
    n_seqs = llama.seqs if llama.seqs is not None else count_flag("seqs", seqs, 1)
    assert n_seqs is not None
    if tokens is None and llama.ctx_size is not None:
        cells, streams = llamacpp_cells(1, n_seqs, ctx_size=llama.ctx_size, unified=llama.unified)
        tokens = str(cells if streams > 1 or n_seqs == 1 else max(1, cells // n_seqs))
    if tokens is None:
        raise ConfigError(
            "tokens: required; give --tokens N (tokens cached per sequence)", field="tokens"
        )
    n_tokens = count_flag("tokens", tokens)
    assert n_tokens is not None
    if model_ref is None:
        if not given:
            raise ConfigError(
                "model: give --model REF, or the explicit flags --layers --kv-heads --head-dim --dtype-bytes",
                field="model",
            )
        missing = [f"--{k.replace('_', '-')}" for k in _EXPLICIT if explicit[k] is None]
        if missing:
            raise ConfigError(
                f"explicit mode: missing {', '.join(missing)}; give all four or use --model",
                field=missing[0],
            )
        model_only = {
            "--engine": layout,
            "--from-transformers": read_transformers or None,
            "--set": sets or None,
            "--tp": tp,
            "--pp": pp,
            "--dp": dp,
            "--block-size": block_size,
            "--v-dtype": v_dtype,
        }
        extra = [k for k, v in model_only.items() if v is not None] + (
            ["--kv-dtype"] if kv_dtype != "auto" else []
        )
        if extra:
            raise ConfigError(
                f"explicit mode: {', '.join(extra)} only apply with --model; use --dtype-bytes for the element size",
                field=extra[0],
            )
        counts = {k: count_flag(k, v) for k, v in explicit.items()}
        result = calc_explicit(
            num_layers=counts["layers"] or 0,
            num_kv_heads=counts["kv_heads"] or 0,
            head_dim=counts["head_dim"] or 0,
            dtype_bytes=counts["dtype_bytes"] or 0,
            tokens=n_tokens,
            seqs=n_seqs,
            confirmed=set(assumes),
        )
    else:
        if given or assumes:
            flags = [f"--{k.replace('_', '-')}" for k in given] + (
                ["checklist confirmations (--assume ...)"] if assumes else []
            )
            raise ConfigError(
                f"model mode: {', '.join(flags)} only apply in the explicit mode; drop them or drop --model",
                field="model",
            )
        result = calc_model(
            model_ref,
            engine=layout or "vllm",
            engine_source="flag" if layout else "default",
            kv_dtype=kv_dtype,
            v_dtype=v_dtype,
            tokens=n_tokens,
            seqs=n_seqs,
            tp=count_flag("tp", tp, 1) or 1,
            pp=count_flag("pp", pp, 1) or 1,
            dp=count_flag("dp", dp, 1) or 1,
            block_size=count_flag("block_size", block_size),
            overrides=parse_overrides(list(sets)),
            allow_download=download,
            ctx_size=llama.ctx_size,
            unified=llama.unified,
            read_transformers=read_transformers,
        )
    kv = None
    slots = layout is not None and engine_entry(layout).slot_cells  # llama.cpp's cells
    if model_ref is not None and slots and result.status != "not_applicable":
        spec = resolve_model(
            model_ref, overrides=parse_overrides(list(sets)), allow_download=download
        ).spec
        if spec is not None:
            kv = llamacpp_kv_split(
                spec,
                tokens=n_tokens,
                seqs=n_seqs,
                kv_dtype=kv_dtype,
                v_dtype=v_dtype,
                ctx_size=llama.ctx_size,
                unified=llama.unified,
            )
    if as_json:
        doc = result.to_dict()
        if kv is not None:
            doc["llamacpp"] = {"figure": "computed", **asdict(kv)}
        click.echo(json.dumps(doc, indent=2, default=str))
    else:
        render(result, Console(width=140), kv)
    if result.status == "not_applicable":
        sys.exit(EXIT_NOT_APPLICABLE)
