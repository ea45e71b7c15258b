"""``kvbudget fingerprint``: a deployment's cache compatibility identity, and a comparison."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click

from kvbudget.capacity.engines.registry import engine_entry, fingerprinted_engines
from kvbudget.capacity.kvbytes import calc_model
from kvbudget.cli.vocab import KV_DTYPE, PP, TP, RegisteredChoice
from kvbudget.errors import ConfigError
from kvbudget.spec.fingerprint import (
    CacheIdentity,
    chat_template_hash,
    compatible,
    position_encoding,
    tokenizer_hash,
    weights_revision,
)
from kvbudget.spec.locate import locate_config
from kvbudget.units import parse_count

SCHEMA = "kvbudget.fingerprint/1"
EXIT_INCOMPATIBLE = 1


def _identity(
    model_ref: str,
    *,
    revision: str | None,
    tokenizer: str | None,
    adapter: str | None,
    multimodal_hash: str | None,
    kv_dtype: str,
    engine: str,
    engine_version: str | None,
    block_size: str | None,
    hash_algo: str | None,
    tp: int,
    pp: int,
    kv_connector: str,
    connector_reshards: bool,
) -> tuple[CacheIdentity, list[str]]:
    source = locate_config(model_ref)
    notes: list[str] = []
    model_dir = source.path.parent if source.origin in ("file", "snapshot", "hf_cache") else None
    tok_dir = Path(tokenizer) if tokenizer else model_dir
    if tokenizer and not Path(tokenizer).is_dir():
        raise ConfigError(
            f"--tokenizer: {tokenizer!r} is not a directory; pass the tokenizer's folder",
            field="tokenizer",
        )
    tok_hash = tokenizer_hash(tok_dir) if tok_dir is not None else None
    template_hash = chat_template_hash(tok_dir) if tok_dir is not None else None
    if tok_hash is None:
        notes.append("tokenizer_hash unknown: no tokenizer files found; pass --tokenizer DIR")
    if template_hash is None:
        notes.append("chat_template_hash unknown: no chat template found (none, or not given)")
    weights = f"revision:{revision}" if revision else None
    if weights is None:
        weights = weights_revision(source.sha256, source.revision, model_dir)
        if source.revision is None:
            notes.append(
                "weights_revision derived from config.json and the weights index, not the "
                "weights themselves; pass --revision for a published snapshot"
            )
    has_vision = any(
        k in source.raw for k in ("vision_config", "audio_config", "mm_tokens_per_image")
    )
    mm = multimodal_hash if multimodal_hash is not None else (None if has_vision else "text-only")
    if mm is None:
        notes.append(
            "multimodal_hash unknown: the model takes images/audio; pass --multimodal-hash"
        )
    prefix_layout = engine_entry(engine).prefix_layout
    assert prefix_layout is not None  # RegisteredChoice(fingerprinted_engines) checked it
    default_block, default_algo = prefix_layout
    if block_size is None or hash_algo is None:
        notes.append(
            f"layout uses {engine}'s defaults where not given (block {default_block}, hash {default_algo})"
        )
    block = block_size or default_block
    layout = f"block_size={block} hash={hash_algo or default_algo}"
    if engine_version is None:
        notes.append("engine version unknown: pass --engine-version")
    identity = CacheIdentity(
        weights_revision=weights,
        tokenizer_hash=tok_hash,
        chat_template_hash=template_hash,
        position_encoding=position_encoding(source.raw),
        adapter=adapter or "none",
        multimodal_hash=mm,
        kv_cache_dtype=kv_dtype,
        engine=f"{engine} {engine_version}" if engine_version else None,
        layout=layout,
        tensor_parallel_size=tp,
        pipeline_parallel_size=pp,
        connector=kv_connector,
        connector_reshards=connector_reshards,
    )
    return identity, notes


def _load_identity(path: str) -> CacheIdentity:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(
            f"--compare: {path} does not exist; pass a fingerprint JSON", field="compare"
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise ConfigError(
            f"--compare: {path} is not a readable fingerprint JSON ({type(exc).__name__}); "
            "write one with 'kvbudget fingerprint --out'",
            field="compare",
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("identity"), dict):
        raise ConfigError(
            f"--compare: {path} has no 'identity' object; write one with 'kvbudget fingerprint --out'",
            field="compare",
        )
    return CacheIdentity.from_dict(data["identity"], source=f"--compare {path}")


@click.command("fingerprint")
@click.option(
    "--model",
    "model_ref",
    required=True,
    help="config.json path, snapshot dir, catalog id or cached repo id.",
)
@click.option("--revision", help="Weights revision (a snapshot hash or tag), as vLLM's --revision.")
@click.option(
    "--tokenizer", help="Tokenizer folder (default: the model's folder), as vLLM's --tokenizer."
)
@click.option("--adapter", help="LoRA adapter identity (name and revision); default none.")
@click.option(
    "--multimodal-hash", help="Multimodal input hashing scheme (text-only models: text-only)."
)
@click.option(
    *KV_DTYPE,
    "kv_dtype",
    default="auto",
    show_default=True,
    help="KV cache dtype, as plan's --kv-dtype.",
)
@click.option(
    "--engine",
    type=RegisteredChoice(fingerprinted_engines),
    default="vllm",
    show_default=True,
    help="The engine whose cache layout the fingerprint keys (its block size and prefix hash).",
)
@click.option(
    "--engine-version", help="Engine version, e.g. 0.32.0 (KV layouts change between versions)."
)
@click.option("--block-size", help="KV block (page) size in tokens; default: the engine's.")
@click.option(
    "--prefix-caching-hash-algo",
    "hash_algo",
    help="Prefix block hash algorithm (vLLM's flag); default: the engine's.",
)
@click.option(*TP, "tp_text", default="1", show_default=True, help="Tensor-parallel size.")
@click.option(*PP, "pp_text", default="1", show_default=True, help="Pipeline-parallel size.")
@click.option(
    "--kv-connector",
    default="none",
    show_default=True,
    help="KV connector and version, e.g. 'LMCacheConnectorV1 0.3.9'.",
)
@click.option(
    "--connector-reshards", is_flag=True, help="The connector converts KV between TP/PP splits."
)
@click.option("--compare", "compare_path", help="A fingerprint JSON (from --out) to compare with.")
@click.option("--out", "out_path", help="Write the fingerprint JSON to this file.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document.")
def fingerprint(
    model_ref: str,
    revision: str | None,
    tokenizer: str | None,
    adapter: str | None,
    multimodal_hash: str | None,
    kv_dtype: str,
    engine: str,
    engine_version: str | None,
    block_size: str | None,
    hash_algo: str | None,
    tp_text: str,
    pp_text: str,
    kv_connector: str,
    connector_reshards: bool,
    compare_path: str | None,
    out_path: str | None,
    as_json: bool,
) -> None:
    """A deployment's KV-cache compatibility identity; with --compare, whether reuse is safe.

    Exit 0 when compatible (or no comparison), 1 when the two identities are incompatible.
    """
    tp = parse_count(tp_text, field="tp")
    pp = parse_count(pp_text, field="pp")
    if tp < 1 or pp < 1:
        raise ConfigError(f"--tp/--pp: need >= 1, got {tp}/{pp}", field="tp")
    if block_size is not None:
        block_size = str(parse_count(block_size, field="block-size"))
    # the deployment must be one calc and plan accept: the model's config, the KV dtype under
    # this engine and TP against the KV heads go through calc's own validation (the same
    # resolve_model, get_kv_dtype and layout checks), so fingerprint never exits 0 on inputs
    # calc and plan refuse (issue 30)
    calc_model(
        model_ref,
        engine=engine,
        kv_dtype=kv_dtype,
        tokens=1,
        tp=tp,
        pp=pp,
        block_size=int(block_size) if block_size is not None else None,
    )
    identity, notes = _identity(
        model_ref,
        revision=revision,
        tokenizer=tokenizer,
        adapter=adapter,
        multimodal_hash=multimodal_hash,
        kv_dtype=kv_dtype,
        engine=engine,
        engine_version=engine_version,
        block_size=block_size,
        hash_algo=hash_algo,
        tp=tp,
        pp=pp,
        kv_connector=kv_connector,
        connector_reshards=connector_reshards,
    )
    doc: dict[str, Any] = {
        "schema": SCHEMA,
        "basis": "computed (hashes of the model's files and the declared deployment)",
        "identity": identity.as_dict(),
        "digest": identity.digest(),
        "notes": notes,
    }
    exit_code = 0
    if compare_path is not None:
        other = _load_identity(compare_path)
        result = compatible(identity, other)
        doc["comparison"] = {
            "other": compare_path,
            "other_digest": other.digest(),
            "compatible": result.compatible,
            "reasons": result.reasons,
        }
        exit_code = 0 if result.compatible else EXIT_INCOMPATIBLE
    if out_path is not None:
        try:
            Path(out_path).parent.mkdir(parents=True, exist_ok=True)
            Path(out_path).write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise ConfigError(
                f"--out: cannot write {out_path}: {exc.strerror}", field="out"
            ) from None
    if as_json:
        click.echo(json.dumps(doc, indent=2))
    else:
        click.echo(f"  digest  {doc['digest']}")
        for key, value in identity.as_dict().items():
            click.echo(f"  {key:<24} {value}")
        for note in notes:
            click.echo(f"  note: {note}")
        if "comparison" in doc:
            comp = doc["comparison"]
            verdict = "compatible" if comp["compatible"] else "INCOMPATIBLE"
            click.echo(f"  vs {compare_path}: {verdict}")
            for reason in comp["reasons"]:
                click.echo(f"    - {reason}")
    if exit_code:
        sys.exit(exit_code)
