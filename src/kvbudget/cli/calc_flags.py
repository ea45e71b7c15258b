"""``kvbudget calc``'s count flags (bounded) and llama.cpp's own flags (-c, -np, -kvu, -ctk, -ctv),
checked against ours and merged with them."""

from __future__ import annotations

from dataclasses import dataclass

from kvbudget.capacity.engines.registry import engine_is
from kvbudget.capacity.layouts.base import Layout
from kvbudget.errors import ConfigError
from kvbudget.units import parse_count


def count_flag(name: str, value: str | None, default: int | None = None) -> int | None:
    from kvbudget.safety.limits import MAX_MODEL_DIM, MAX_TOKENS

    if value is None:
        return default
    bound = MAX_TOKENS if name == "tokens" else MAX_MODEL_DIM
    return parse_count(value, field=name.replace("_", "-"), maximum=bound)


@dataclass(frozen=True, slots=True)
class LlamaKnobs:
    """llama.cpp's own flags (-c, -np, -kvu, -ctk, -ctv), checked and merged with ours."""

    kv_dtype: str
    v_dtype: str | None
    ctx_size: int | None
    seqs: int | None
    unified: bool

    @classmethod
    def parse(
        cls,
        model_ref: str | None,
        engine: Layout | None,
        kv_dtype: str,
        v_dtype: str | None,
        ctx_size: str | None,
        parallel: str | None,
        kv_unified: bool,
        cache_type_k: str | None,
        cache_type_v: str | None,
        seqs: str | None,
    ) -> LlamaKnobs:
        knobs = {
            "--ctx-size": ctx_size,
            "--parallel": parallel,
            "--kv-unified": True if kv_unified else None,
            "--cache-type-k": cache_type_k,
            "--cache-type-v": cache_type_v,
        }
        used = [k for k, v in knobs.items() if v is not None]
        cells = engine is not None and engine_is(engine, lambda e: e.slot_cells)
        if used and (model_ref is None or not cells):
            raise ConfigError(
                f"{used[0][2:]}: {', '.join(used)} "
                + ("is a llama.cpp flag" if len(used) == 1 else "are llama.cpp flags")
                + "; they apply with --model REF "
                f"--engine llamacpp (got engine {engine or 'vllm (default)'})",
                field=used[0][2:],
            )
        for ours, value, theirs, alias in (
            (
                "--kv-dtype",
                kv_dtype if kv_dtype != "auto" else None,
                "--cache-type-k",
                cache_type_k,
            ),
            ("--v-dtype", v_dtype, "--cache-type-v", cache_type_v),
            ("--seqs", seqs, "--parallel", parallel),
        ):
            if value is not None and alias is not None and value != alias:
                raise ConfigError(
                    f"{theirs[2:]}: {theirs} {alias} contradicts {ours} {value}; they are the "
                    "same setting, give one",
                    field=theirs[2:],
                )
        return cls(
            kv_dtype=cache_type_k or kv_dtype,
            v_dtype=cache_type_v or v_dtype,
            ctx_size=count_flag("ctx_size", ctx_size),
            seqs=count_flag("parallel", parallel),
            unified=kv_unified,
        )
