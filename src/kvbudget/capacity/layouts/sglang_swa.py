"""Which models SGLang runs with its hybrid SWA pool, by release (read: 0.5.4, 0.5.23), and what
``calc --engine sglang`` says of their sliding layers."""

from __future__ import annotations

from kvbudget.capacity.sglang_pool import HYBRID_SWA_CONFIGURATOR_VERSION
from kvbudget.capacity.versions import Version
from kvbudget.spec.model import ModelSpec

#: models for which SGLang turns the hybrid SWA pool off (``disable_hybrid_swa_memory``, §7.1;
#: 0.5.4 ``server_args.py`` lines 959, 982, 988)
NO_HYBRID_SWA_MODEL_TYPES = frozenset({"gpt_oss", "gemma2", "gemma3", "gemma3_text", "olmo2"})
#: 0.5.23 no longer turns it off for gpt-oss (``arg_groups/model_overrides/gpt_oss.py`` sets no
#: ``disable_hybrid_swa_memory``; ``GptOssForCausalLM`` is in ``SWA_SINK_ARCHS``,
#: ``configs/model_config.py`` lines 88-90, a hybrid SWA arch, lines 2651-2690); Gemma-2/3 and
#: Olmo2 keep it (``model_overrides/gemma2_gemma3.py`` line 26, ``olmo2.py`` line 23)
NO_HYBRID_SWA_MODEL_TYPES_0523 = NO_HYBRID_SWA_MODEL_TYPES - {"gpt_oss"}

#: 0.5.23's hybrid SWA architectures (``configs/model_config.py`` ``is_hybrid_swa_model``, lines
#: 2651-2697, with ``SWA_SINK_ARCHS`` lines 88-96 and ``MIMO_V2_MODEL_ARCHS`` lines 74-77):
#: ``ModelConfig.is_hybrid_swa`` holds for them unless ``disable_hybrid_swa_memory`` (lines
#: 1213-1218), and the pool is ``HybridSWAPoolConfigurator``'s (``pool_configurator.py`` lines
#: 1715-1725). The families with their own pools (DeepSeek-V4, Inkling) are planned apart.
HYBRID_SWA_ARCHS_0523 = frozenset(
    {
        "BeamForCausalLM",
        "Llama4ForConditionalGeneration",
        "GptOssForCausalLM",
        "GraniteSWAForCausalLM",
        "GraniteMoeSWAForCausalLM",
        "IQuestQ1ForCausalLM",
        "IQuestQ1MTP",
        "MiMoV2ForCausalLM",
        "MiMoV2FlashForCausalLM",
        "MiMoV2MTP",
        "Step3p5ForCausalLM",
        "Step3p5MTP",
        "Step3p7ForConditionalGeneration",
        "Gemma4ForCausalLM",
        "Gemma4ForConditionalGeneration",
        "EmbeddingGemma2Model",
        "Gemma4UnifiedForConditionalGeneration",
        "DiffusionGemmaForBlockDiffusion",
        "LagunaForCausalLM",
        "MellumForCausalLM",
        "MuseGlimmerForCausalLM",
        "MuseGlimmerForConditionalGeneration",
        "UnlimitedOCRForCausalLM",
    }
)


def sglang_hybrid_swa(model: ModelSpec, version: Version) -> bool:
    """SGLang ``version`` runs this model with its hybrid SWA pool (0.5.23: a listed
    architecture that does not turn it off; 0.5.4: none kvbudget plans, only model classes with
    ``get_attention_sliding_window_size``, all of which turn it off, ``model_runner.py`` lines
    392-400, 921-928, ``server_args.py`` lines 959, 982, 988)."""
    return (
        version >= HYBRID_SWA_CONFIGURATOR_VERSION
        and model.architecture in HYBRID_SWA_ARCHS_0523
        and model.model_type not in NO_HYBRID_SWA_MODEL_TYPES_0523
    )


def sglang_windowed_note(model: ModelSpec, kind: str) -> str:
    """``calc``'s line on ``kind`` (sliding / chunked) layers, which it counts at full length.

    ``calc`` prices SGLang's pool at the default release (0.5.4), which keeps every layer's row
    of every token in one pool for every model kvbudget plans (``DefaultPoolConfigurator``:
    0.5.23 ``pool_configurator.py`` lines 225-237, 1716-1725; 0.5.4 ``model_runner.py`` lines
    1390-1399, hybrid only as :func:`sglang_hybrid_swa` says). Under SGLang 0.5.23's hybrid SWA
    pool a sliding row has no fixed per-sequence count: the rows form a pool of their own, sized
    as full tokens x ``--swa-full-tokens-ratio`` (``pool_configurator.py`` lines 786-803,
    859-893), a prefill holds every prompt token's row, and decode frees the rows older than
    ``ceil_align(max(window, page), page)`` tokens once ``SGLANG_SWA_EVICTION_INTERVAL`` (128)
    more have slid out (``managers/schedule_batch.py`` lines 4047-4123, ``mem_cache/common.py``
    lines 75-135, ``environ.py`` line 730); ``plan`` sizes that pool, so the line points there."""
    if sglang_hybrid_swa(model, HYBRID_SWA_CONFIGURATOR_VERSION):
        return (
            f"{kind} layers counted at full length, one pool as in SGLang 0.5.4 (calc's release); "
            f"SGLang 0.5.23 runs {model.architecture} with its hybrid SWA pool: these layers' rows "
            "are a pool of full tokens x --swa-full-tokens-ratio (0.8), freed beyond the window "
            "as decode goes on ('kvbudget plan --engine sglang --engine-version 0.5.23' sizes it)"
        )
    return (
        f"{kind} layers counted at full length: SGLang keeps every layer's row of every token in "
        f"one pool for {model.architecture} (no hybrid SWA pool; DefaultPoolConfigurator)"
    )
