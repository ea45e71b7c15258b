"""SGLang's ``--swa-full-tokens-ratio``: whether SGLang runs a model with its hybrid SWA pool, the
ratio it takes (given, or its fallback 0.8), and a given ratio SGLang ignores."""

from __future__ import annotations

from kvbudget.capacity.layouts.sglang_swa import (
    NO_HYBRID_SWA_MODEL_TYPES,
    NO_HYBRID_SWA_MODEL_TYPES_0523,
    sglang_hybrid_swa,
)
from kvbudget.capacity.sglang_pool import HYBRID_SWA_CONFIGURATOR_VERSION
from kvbudget.capacity.versions import Version
from kvbudget.spec.model import ModelSpec

#: SGLang's ``--swa-full-tokens-ratio`` when not given: 0.5.4 ``server_args.py`` line 235
#: (``swa_full_tokens_ratio: float = 0.8``); 0.5.23 ``arg_groups/fields/schedule.py`` lines
#: 150-161 (``fallback=0.8``)
DEFAULT_SWA_FULL_TOKENS_RATIO = 0.8
#: the SGLang release before 0.5.23 whose hybrid SWA rule kvbudget has read
SGLANG_054: Version = (0, 5, 4)


def _given_swa_ratio(
    model: ModelSpec, ratio: float, notes: list[str], version: Version
) -> float | None:
    """``--swa-full-tokens-ratio`` on a model with sliding layers: taken where SGLang runs the
    hybrid SWA pool; else ignored, as SGLang ignores it (None: sliding layers counted as full).

    SGLang 0.5.23 only range-checks the flag (``arg_groups/kv_cache_hook.py`` lines 427-428,
    kvbudget's ``PlanRequest`` does the same: ``0 < ratio <= 1``); a model that is not
    ``is_hybrid_swa`` (not an ``is_hybrid_swa_model`` architecture, or one setting
    ``disable_hybrid_swa_memory``: ``configs/model_config.py`` lines 1213-1218) gets
    ``DefaultPoolConfigurator`` (``model_executor/pool_configurator.py`` lines 1716-1725), which
    never reads it. 0.5.4 reads it only in ``set_num_token_hybrid``, called when ``is_hybrid``
    (``model_executor/model_runner.py`` lines 1715-1716; ``is_hybrid``: lines 392-400). Between
    0.5.4 and 0.5.23 kvbudget has not read which models run the pool: the ratio is applied, with
    a note."""
    if sglang_hybrid_swa(model, version):
        return ratio
    v = ".".join(map(str, version))
    read = version == SGLANG_054 or version >= HYBRID_SWA_CONFIGURATOR_VERSION
    off = (
        NO_HYBRID_SWA_MODEL_TYPES_0523
        if version >= HYBRID_SWA_CONFIGURATOR_VERSION
        else NO_HYBRID_SWA_MODEL_TYPES
    )
    if model.model_type in off:
        why = f"SGLang sets disable_hybrid_swa_memory for model_type {model.model_type}"
    elif read:
        why = f"SGLang {v} does not run {model.architecture} with its hybrid SWA pool"
    else:
        notes.append(
            f"--swa-full-tokens-ratio {ratio}: which models SGLang {v} runs with its hybrid SWA "
            "pool is not read (0.5.4 and 0.5.23 are); the split models the pool as if it did"
        )
        return ratio
    where = (
        "0.5.23 pool_configurator.py lines 1716-1725: DefaultPoolConfigurator; the flag is only "
        "range-checked, arg_groups/kv_cache_hook.py lines 427-428"
        if version >= HYBRID_SWA_CONFIGURATOR_VERSION
        else "0.5.4 model_runner.py lines 1715-1716: set_num_token_hybrid only when is_hybrid"
    )
    notes.append(
        f"--swa-full-tokens-ratio {ratio} ignored, as SGLang {v} ignores it: {why} ({where}); "
        "sliding/chunked layers counted as full"
    )
    return None


def _default_swa_ratio(
    model: ModelSpec, version: Version, defaults: dict[str, str], notes: list[str]
) -> float | None:
    """SGLang's hybrid SWA pool when ``--swa-full-tokens-ratio`` is not given: ratio 0.8 for the
    models SGLang runs with it, None (sliding layers counted as full) for the rest, said either
    way in ``defaults``.

    0.5.23: the architectures of :data:`HYBRID_SWA_ARCHS_0523` unless the model sets
    ``disable_hybrid_swa_memory`` (:data:`NO_HYBRID_SWA_MODEL_TYPES_0523`). 0.5.4: none of the
    models kvbudget plans; its pool is hybrid only when the model class has
    ``get_attention_sliding_window_size`` (``model_executor/model_runner.py`` lines 392-400,
    921-928; gpt-oss, Gemma-2/3/3n and Olmo2, which all set ``disable_hybrid_swa_memory``,
    ``server_args.py`` lines 959, 982, 988), and Llama-4's chunked pool needs
    ``--hybrid-kvcache-ratio`` (``configs/model_config.py`` lines 156-167, 975-990), which
    kvbudget does not model."""
    off_0523 = NO_HYBRID_SWA_MODEL_TYPES_0523
    if sglang_hybrid_swa(model, version):
        defaults["swa_full_tokens_ratio"] = (
            f"{DEFAULT_SWA_FULL_TOKENS_RATIO} (SGLang's fallback, arg_groups/fields/schedule.py "
            f"lines 150-161: {model.architecture} runs with SGLang's hybrid SWA pool, "
            "configs/model_config.py lines 2651-2697)"
        )
        return DEFAULT_SWA_FULL_TOKENS_RATIO
    if version >= HYBRID_SWA_CONFIGURATOR_VERSION:
        why = (
            f"SGLang sets disable_hybrid_swa_memory for model_type {model.model_type}"
            if model.model_type in off_0523
            else f"{model.architecture} is not one of SGLang's hybrid SWA architectures "
            "(configs/model_config.py lines 2651-2697)"
        )
    elif model.model_type in NO_HYBRID_SWA_MODEL_TYPES:
        why = (
            f"SGLang sets disable_hybrid_swa_memory for model_type {model.model_type} "
            "(server_args.py lines 959, 982, 988)"
        )
    else:
        why = (
            "SGLang 0.5.4 uses its hybrid SWA pool only for model classes with "
            "get_attention_sliding_window_size, all of which turn it off, and for Llama-4 with "
            "--hybrid-kvcache-ratio (model_runner.py lines 392-400, 921-928)"
        )
    defaults["swa_full_tokens_ratio"] = f"none ({why}): sliding/chunked layers counted as full"
    read = version == SGLANG_054 or version >= HYBRID_SWA_CONFIGURATOR_VERSION
    flag = (
        " (SGLang ignores --swa-full-tokens-ratio for it)"
        if read
        else "; --swa-full-tokens-ratio models SGLang's hybrid SWA pool"
    )
    notes.append(f"sliding/chunked layers counted as full: {why}{flag}")
    return None


def swa_ratio(
    model: ModelSpec,
    given: float | None,
    version: Version,
    defaults: dict[str, str],
    notes: list[str],
) -> float | None:
    """The ratio SGLang sizes this model's hybrid SWA pool with (None: no pool, sliding layers
    counted as full): a given one where SGLang reads it, else SGLang's default."""
    if given is not None:
        return _given_swa_ratio(model, given, notes, version)
    return _default_swa_ratio(model, version, defaults, notes)
