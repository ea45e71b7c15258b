"""``--speculative-config`` method ``mtp`` for DeepSeek-V4 with ``--engine sglang``: SGLang's
NEXTN (EAGLE) drafter, read in the sglang 0.5.23 source (paths under ``sglang/srt/``; DeepSeek-V4
is read there whatever ``--engine-version`` says, as its pools are).

* The drafter: vLLM's MTP methods are SGLang's NextN drafter, taken from the target's
  checkpoint (``arg_groups/speculative_hook.py`` lines 1120-1157 list
  ``DeepseekV4ForCausalLM``). For DeepSeek-V4 it must be launched as ``--speculative-algorithm
  EAGLE --speculative-eagle-topk 1``: the DeepSeek-V4 hook asserts both
  (``arg_groups/deepseek_v4_hook.py`` lines 148-158) and runs (``arg_groups/pipeline.py`` line
  225) before the speculative hook (line 306) turns NEXTN into EAGLE (``speculative_hook.py``
  lines 109-115, 150-159) or picks the top-k (lines 1159-1172; the fields default to None,
  ``arg_groups/fields/spec.py`` lines 58-69). A top-k given needs the steps too (lines
  1159-1163), so kvbudget maps ``num_speculative_tokens`` k to ``--speculative-num-steps k
  --speculative-eagle-topk 1``, ``speculative_num_draft_tokens = k + 1`` (lines 1255-1268), and
  refuses a config without it in SGLang's words.
* Its layer: ``DeepseekV4ModelNextN`` builds one ``DeepseekV4DecoderLayer`` with
  ``compress_ratio_override=COMPRESS_RATIO_NEXTN_LAYER`` = 0 (``models/deepseek_v4_nextn.py``
  lines 53, 104-121): a sliding window only, no compressor, no indexer. The draft worker's own
  ``DeepSeekV4TokenToKVPool`` takes ratio 0 for each of its layers and the target's
  ``memory_pool_config`` (``mem_cache/kv_cache_configurator.py`` lines 470-474, 2072-2081) with
  the c4 / c128 / state sizes zeroed (lines 546-556): one SWA pool of the target's
  ``swa_max_total_num_tokens``, ``swa // 256 + 1`` pages of 149,760 B
  (``_num_dsv4_physical_kv_pages``, ``deepseek_v4_memory_pool.py`` lines 165-169, 279-291).
* What the target budgets (``model_executor/pool_configurator.py``): with a drafter the
  compressor-state rings are 16 rows (ratio 4) and 256 (ratio 128) instead of 8 and 128
  (``get_compress_state_ring_size``, ``deepseek_v4_memory_pool.py`` lines 60-91), and the
  draft is reserved by inflating ``bytes_per_full_token`` by ``(layers + 1) / layers``, one
  draft layer whatever the checkpoint says (lines 1250-1257): more than the one ratio-0 layer
  the draft pool holds. The rings must serve the draft tokens (lines 1194-1198, 1291-1307:
  ``ring - window + 2``, 10 for ratio 4 and 130 for ratio 128, ``get_compress_state_write_pad``
  lines 118-122); more is SGLang's assertion, quoted.
* ``max_running_requests``: the DeepSeek-V4 hook declares 256 (``deepseek_v4_hook.py`` lines
  137-146, run from ``arg_groups/model_hook.py`` lines 258-265) before the speculative hook
  (``arg_groups/pipeline.py`` lines 225, 306) whose reset to 48 applies only when none is set
  (``speculative_hook.py`` lines 1086-1094): 256 stands.
* Its weights are loaded before the target's pool is sized (as for the other NextN drafters,
  :mod:`kvbudget.capacity.engines.sglang.speculative`): its own ``embed_tokens`` and
  ``lm_head`` (``deepseek_v4_nextn.py`` lines 67-72, 275-281), each ``vocab / tp x hidden``,
  plus the layer and its ``e_proj`` / ``h_proj`` / ``hc_head`` / norms (lines 74-122), as SGLang
  builds them (:func:`kvbudget.capacity.engines.sglang.dsv4_weights.sglang_dsv4_nextn_bytes`:
  float32 block scales, every head's sink, the target's decoder layer at ratio 0); its
  ``freqs_cis`` table (``precompute_freqs_cis`` behind ``lru_cache(2)``,
  ``kernels/ops/attention/dsv4/rope.py`` lines 27-68; ``models/deepseek_v4.py`` lines
  1171-1200) and ``get_rope`` ``cos_sin_cache`` are the target's ratio-0 ones when the target
  has ratio-0 layers (Flash), else its own (Pro). Where SGLang's target modules are not priced
  (``sglang_dsv4_unpriced``), kvbudget's vLLM DeepSeek-V4 MTP estimate
  (:func:`kvbudget.capacity.mtp_draft.mtp_weights_bytes`) stands in.
"""

from __future__ import annotations

from kvbudget.capacity.engines.sglang.dsv4_weights import (
    sglang_dsv4_nextn_bytes,
    sglang_dsv4_unpriced,
    sglang_mxfp4_scales_unpriced,
)
from kvbudget.capacity.layouts.sglang_dsv4 import CSA_RATIO, HCA_RATIO
from kvbudget.capacity.mtp_weights import (
    deepseek_v4_mtp_bytes,
    deepseek_v4_mtp_rope_bytes,
    deepseek_v4_mtp_unpriced,
)
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import CompressedAttention, CompressedSparseAttention
from kvbudget.spec.model import ModelSpec

#: ``get_compress_state_write_pad(ratio, ring)`` with the speculative rings 16 / 256:
#: ``ring - ratio * (2 if ratio == 4 else 1) + 2`` (``deepseek_v4_memory_pool.py`` 118-122)
DSV4_MAX_DRAFT_TOKENS = {CSA_RATIO: 16 - 8 + 2, HCA_RATIO: 256 - 128 + 2}
DSV4_SPEC_RINGS = {CSA_RATIO: 16, HCA_RATIO: 256}


def dsv4_draft_tokens(model: ModelSpec, config: dict[str, object]) -> tuple[int, int, int]:
    """``(steps, topk, draft tokens)`` SGLang runs DeepSeek-V4's drafter with; refuses, in
    SGLang's words, a launch without top-k 1 and a draft count its rings cannot serve."""
    k = config.get("num_speculative_tokens")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise ConfigError(
            f"speculative_config: num_speculative_tokens {k!r} for deepseek_v4 under SGLang "
            "0.5.23: without --speculative-eagle-topk 1 its DeepSeek-V4 hook stops with 'Only "
            "EAGLE speculative algorithm with topk == 1 is supported for DeepseekV4ForCausalLM' "
            "(arg_groups/deepseek_v4_hook.py lines 155-158: it runs before the speculative hook "
            "picks a top-k), and a top-k needs the steps; pass num_speculative_tokens k (kvbudget "
            "reads --speculative-algorithm EAGLE --speculative-num-steps k "
            "--speculative-eagle-topk 1)",
            field="speculative_config",
        )
    steps = (k, 1, k + 1)
    draft_tokens = steps[2]
    ratios = {
        x.compress_rate
        for x in model.layer_seq.distinct()
        if isinstance(x, CompressedAttention | CompressedSparseAttention)
    }
    for ratio in (CSA_RATIO, HCA_RATIO):
        most = DSV4_MAX_DRAFT_TOKENS[ratio]
        if ratio in ratios and draft_tokens > most:
            raise ConfigError(
                f"speculative_config: num_speculative_tokens {k} for deepseek_v4 under SGLang "
                f"0.5.23: 'speculative_num_draft_tokens={draft_tokens} exceeds what the "
                f"c{ratio} compress state ring can keep resident (ring_size="
                f"{DSV4_SPEC_RINGS[ratio]} serves at most {most} draft tokens). Lower the "
                "draft count, or grow the ring in get_compress_state_ring_size().' "
                "(model_executor/pool_configurator.py lines 1291-1307); pass "
                f"num_speculative_tokens {most - 1} or fewer",
                field="speculative_config",
            )
    return steps


def dsv4_draft_note(steps: tuple[int, int, int]) -> str:
    """The plan's note on what SGLang runs and budgets for DeepSeek-V4's drafter."""
    s, topk, draft_tokens = steps
    return (
        f"speculative_config: SGLang --speculative-algorithm EAGLE --speculative-num-steps {s} "
        f"--speculative-eagle-topk {topk} for DeepSeek-V4 ({draft_tokens} draft tokens; NEXTN "
        "and other top-k fail its DeepSeek-V4 hook, deepseek_v4_hook.py lines 148-158); the "
        "drafter is one ratio-0 layer (sliding window only, "
        "models/deepseek_v4_nextn.py line 53) whose own pool holds SWA pages for the target's "
        "swa tokens and no c4 / c128 / state pools (kv_cache_configurator.py lines 546-556, "
        "2072-2081); the target budgets it as bytes_per_full_token x (layers + 1) / layers "
        "and keeps compressor-state rings of 16 (c4) and 256 (c128) rows "
        "(pool_configurator.py lines 1250-1257; deepseek_v4_memory_pool.py lines 60-91); "
        "max_running_requests keeps DeepSeek-V4's 256, declared before the speculative hook's 48"
    )


def dsv4_draft_layers(num_nextn_predict_layers: object) -> int:
    """SGLang's drafter has one layer whatever ``num_nextn_predict_layers`` says (the draft config
    is rewritten to ``DeepseekV4ForCausalLMNextN`` with 1, ``configs/model_config.py`` lines
    1041-1061); a checkpoint without an MTP layer has no ``mtp.0`` weights to load: refused."""
    n = num_nextn_predict_layers
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ConfigError(
            f"speculative_config: method mtp for deepseek_v4 with num_nextn_predict_layers {n!r}: "
            "SGLang's NextN drafter loads the checkpoint's mtp.0 layer (models/deepseek_v4_nextn.py "
            "lines 244-255), which this config does not declare; plan without --speculative-config",
            field="speculative_config",
        )
    return 1


def _moe_ranks(request: PlanRequest) -> int:
    """SGLang splits the drafter's experts as the target's, over ``--tp`` (``moe_tp_size =
    tp_size // moe_ep_size // moe_dp_size``, ``runtime_context.py`` line 154; ``FusedMoE``,
    ``layers/moe/fused_moe_triton/layer.py`` lines 390-392, 427-428), DP attention or not:
    vLLM's ``tp x dp`` (:mod:`kvbudget.capacity.moe_ranks`) is not SGLang's."""
    return request.tp


def dsv4_unpriced(
    request: PlanRequest, model: ModelSpec, compute_capability_major: int | None = None
) -> str | None:
    """The drafter part kvbudget cannot size here (None: all sized): what
    :func:`deepseek_v4_mtp_unpriced` cannot, and MXFP4 experts on a GPU where SGLang keeps
    float32 scales (:func:`sglang_mxfp4_scales_unpriced`, as for the target)."""
    part = deepseek_v4_mtp_unpriced(model, tp=request.tp, moe_ranks=_moe_ranks(request))
    return part or sglang_mxfp4_scales_unpriced(model, compute_capability_major)


def dsv4_drafter_layer_bytes(
    request: PlanRequest, model: ModelSpec, compute_capability_major: int | None = None
) -> int | None:
    """One GPU's bytes of the drafter's layer, projections, norms and (Pro) rotary table (module
    doc); None where :func:`dsv4_unpriced` names a part kvbudget cannot size (with this GPU's
    compute capability)."""
    moe_ranks = _moe_ranks(request)
    if dsv4_unpriced(request, model, compute_capability_major) is not None:
        return None
    own = sglang_dsv4_unpriced(
        model, tp=request.tp, compute_capability_major=compute_capability_major
    )
    if own is None:  # SGLang's own modules
        return sglang_dsv4_nextn_bytes(model, tp=request.tp)
    layer = deepseek_v4_mtp_bytes(model, tp=request.tp, moe_ranks=moe_ranks)
    return layer + deepseek_v4_mtp_rope_bytes(model)
