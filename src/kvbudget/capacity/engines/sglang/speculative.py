"""``--speculative-config`` (vLLM's JSON, kvbudget's one vocabulary) with ``--engine sglang``.

Read from the sglang 0.5.23 wheel (paths under ``sglang/srt/``):

* vLLM's MTP methods (``mtp``, ``deepseek_mtp``, ``glm4_moe_mtp``, ...) are SGLang's
  ``--speculative-algorithm NEXTN``, which SGLang runs as ``EAGLE``
  (``arg_groups/speculative_hook.py`` lines 109-115). For DeepSeek-V3 / V3.2, GLM-4.5
  (``Glm4MoeForCausalLM``) and GLM-5 (``GlmMoeDsaForCausalLM``) SGLang takes the draft from the
  target's own checkpoint (``--speculative-draft-model-path`` defaults to ``--model-path``, lines
  1120-1157) and rewrites it to the NextN architecture (``configs/model_config.py`` lines
  1032-1039, 1063-1064); other models need a draft path kvbudget does not take: refused.
* The draft's KV layers are ``num_nextn_predict_layers`` of the draft config
  (``model_executor/model_runner_components/spec_aux_hidden_state.py`` lines 132-176,
  ``eagle_draft_num_layers``). The target prices them into its own cell before sizing the pool
  (``model_executor/pool_configurator.py`` lines 259-314): ``cell += int(cell x draft_layers /
  layers)``; a DSA model adds ``int(latent_cell x draft_layers / layers)`` plus a full indexer
  row per draft layer (lines 273-309, ``_compute_dsa_indexer_cell_size(allocate_all_layers=True)``
  lines 560-635). So ``max_total_num_tokens = rest // (target + draft cell)``, and the draft
  worker allocates its pool from the target's ``memory_pool_config`` (the same token count:
  ``mem_cache/kv_cache_configurator.py`` lines 470-476; ``managers/scheduler.py`` lines
  1098-1111).
* The draft worker and its weights are built before the target's pool is sized
  (``managers/scheduler.py`` lines 1128-1137: ``maybe_init_draft_worker`` then
  ``init_memory_pools``), so they come out of the target's rest; SGLang shares the target's
  embedding and head only afterwards (``speculative/eagle_worker_v2.py`` lines 243-258, 336-379),
  so at sizing time the NextN drafter holds its own ``embed_tokens`` and ``lm_head``
  (``models/deepseek_nextn.py`` lines 83-88, 294-300; ``models/glm4_moe_nextn.py`` lines 60,
  139), each ``vocab / tp x hidden``, besides ``enorm``, ``hnorm``, ``eh_proj`` (``2 x hidden x
  hidden``), ``shared_head.norm`` and one decoder layer (lines 90-139, the layer at 126-135).
* The default ``mem_fraction_static`` has no speculative term in 0.5.23
  (``arg_groups/memory_hook.py`` lines 281-345; it runs before the speculative hook,
  ``arg_groups/pipeline.py`` lines 218 and 306). ``max_running_requests`` defaults to 48 with
  EAGLE / NEXTN and NGRAM (``arg_groups/speculative_hook.py`` lines 1086-1094, 1294-1298), then
  ``min(48, tokens // 2)`` (``mem_cache/kv_cache_configurator.py`` lines 3127-3131).
* DeepSeek-V4 (read in 0.5.23 whatever the version, as its pools are) prices its drafter in its
  own configurator: 16 / 256-row compressor rings, ``bytes_per_full_token x (layers + 1) /
  layers``, SGLang's draft-token assertion, its 256 running requests kept
  (:mod:`kvbudget.capacity.engines.sglang.dsv4_spec`).

sglang 0.5.4 (the wheel; kvbudget's rule for releases before 0.5.23, the change not pinned), for
DeepSeek-V3 and GLM-4.5 (``server_args.py`` lines 1314-1327 default their draft to the target):

* ``_handle_gpu_memory_settings`` (line 544, before the NEXTN -> EAGLE rename at lines
  1280-1282) reserves 2 GiB more for EAGLE / NEXTN, after the 10 GiB floor (lines 786-795);
  ``max_running_requests`` defaults to 48 (lines 1289-1294); the steps / top-k / draft tokens
  default to (3, 1, 4) for DeepSeek and (5, 4, 8) for the rest (lines 1329-1339, 3805-3835),
  draft tokens ``steps + 1`` with top-k 1 (lines 1349-1358).
* The target's pool is sized before the draft worker exists (``managers/scheduler.py`` lines
  311-319, 566-574), from its own layers; then ``draft_runner_cache_size = tokens + R x steps x
  topk + R x draft_tokens + 100`` (``R = max_running_requests``) and both pools hold that many
  tokens (``model_executor/model_runner.py`` lines 1667-1687; cap and page floor after, lines
  1689-1703): the raise, the draft's pool (its ``num_nextn_predict_layers`` layers, lines
  1390-1395) and the draft's weights come out of the ``1 - mem_fraction_static`` headroom.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvbudget.capacity.draft import (
    MTP_METHODS,
    NO_KV_METHODS,
    draft_method,
    parse_speculative_config,
)
from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.engines.sglang.dsv4_spec import (
    dsv4_draft_layers,
    dsv4_draft_note,
    dsv4_draft_tokens,
    dsv4_drafter_layer_bytes,
    dsv4_unpriced,
)
from kvbudget.capacity.layouts.sglang import sglang_dsa_cell_bytes
from kvbudget.capacity.mtp_draft import MTP_SNAPSHOT_NOTE, mtp_weights_bytes
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.weights import WeightsEstimate
from kvbudget.errors import ConfigError
from kvbudget.spec.layers import MLA, ParallelHybrid
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.mtp import DEEPSEEK_MTP_TYPES
from kvbudget.spec.state_layers import StateLayer

#: the first SGLang release whose speculative pools kvbudget read
SPECULATIVE_VERSION = (0, 5, 23)
#: model types whose NextN draft SGLang 0.5.23 takes from the target's checkpoint
#: (``arg_groups/speculative_hook.py`` lines 1120-1157) and kvbudget prices
SGLANG_NEXTN_TYPES = DEEPSEEK_MTP_TYPES | {"glm4_moe", "deepseek_v4"}

SPEC = "speculative_config"
#: ``max_running_requests`` reset for EAGLE / NEXTN and NGRAM: 0.5.23 ``arg_groups/
#: speculative_hook.py`` lines 1086-1094, 1294-1298; 0.5.4 ``server_args.py`` lines 1289-1294, 1374-1375
SPEC_MAX_RUNNING = 48


def _refuse(message: str) -> ConfigError:
    return ConfigError(f"{SPEC}: {message}", field=SPEC)


@dataclass(frozen=True, slots=True)
class SglangDraft:
    """SGLang's NextN drafter: its KV layers (priced into the target's cell) and its weights."""

    num_layers: int
    weights_bytes: int  # per GPU, resident when the target's pool is sized (0: already held)
    dsa: bool
    notes: tuple[str, ...]
    #: 0.5.4's rule: the pool raised by ``extra_tokens``, the draft's KV and weights outside the
    #: rest, ``reserve_mib`` more reserved in the default ``mem_fraction_static``
    legacy: bool = False
    extra_tokens: int = 0
    reserve_mib: int = 0
    #: ``max_running_requests`` by default with a drafter or NGRAM (both versions)
    max_running: int | None = SPEC_MAX_RUNNING
    #: DeepSeek-V4's ``speculative_num_draft_tokens`` (its pools price the draft: dsv4_spec.py)
    dsv4_draft_tokens: int = 0

    def legacy_tokens(self, rest_bytes: int, cell: int, page_size: int, cap: int | None) -> int:
        """0.5.4: ``rest // cell + extra``, capped by ``--max-total-tokens``, page-floored."""
        tokens = max(0, rest_bytes) // cell + self.extra_tokens if cell else 0
        if cap is not None:
            tokens = min(tokens, cap)
        return tokens // page_size * page_size

    def mem_fraction(self, reserved_mib: float | None, gpu_mib: float) -> float | None:
        """0.5.4's default ``mem_fraction_static`` with the draft's reserve (None: unchanged)."""
        if not self.reserve_mib or reserved_mib is None:
            return None
        return round((gpu_mib - (reserved_mib + self.reserve_mib)) / gpu_mib, 3)

    def cell_bytes(self, target_cell: int, num_layers: int, latent_cell: int) -> int:
        """Bytes per token the draft adds to the target's cell (``pool_configurator.py`` lines
        259-314); ``latent_cell``: the target's DSA cell without its indexer rows."""
        if not self.dsa:
            return int(target_cell * self.num_layers / num_layers)
        indexer = DSA_INDEXER_ROW_BYTES * self.num_layers
        return int(latent_cell * self.num_layers / num_layers) + indexer

    def weights(self, weights: WeightsEstimate) -> WeightsEstimate:
        """The target's weights plus the drafter's, on the (one) stage."""
        if not self.weights_bytes:
            return weights
        per_rank = list(weights.per_rank_bytes)
        per_rank[-1] += self.weights_bytes
        return replace(
            weights,
            per_rank_bytes=tuple(per_rank),
            method=f"{weights.method}; + SGLang NextN drafter {self.weights_bytes:,} B per GPU",
        )


#: ``index_head_dim + index_head_dim // 128 * 4`` uint8 bytes (128 + 4), per draft layer
DSA_INDEXER_ROW_BYTES = 132


def sglang_draft(
    request: PlanRequest,
    model: ModelSpec,
    version: tuple[int, int, int],
    weights: WeightsEstimate,
    *,
    compute_capability_major: int | None = None,
) -> SglangDraft | None:
    """The drafter ``--speculative-config`` asks SGLang for (None: none, or one without KV);
    ``compute_capability_major``: the GPU's, which decides how SGLang builds some experts."""
    if request.speculative_config is None:
        return None
    config = parse_speculative_config(request.speculative_config)
    method = draft_method(config)
    if any(isinstance(x, StateLayer | ParallelHybrid) for x in model.layer_seq.distinct()):
        raise _refuse(
            f"method {method or 'unknown'!r} for {model.model_type} (a state pool): SGLang then "
            "reserves speculative intermediate states in the mamba pool "
            "(mem_cache/kv_cache_configurator.py lines 3294-3390), not modelled; plan without "
            "--speculative-config and pass --kv-cache-memory from the server log"
        )
    if method == "ngram":
        return SglangDraft(
            0,
            0,
            False,
            (
                "speculative_config: SGLang's NGRAM keeps no draft KV and no draft weights; "
                f"max_running_requests defaults to {SPEC_MAX_RUNNING}",
            ),
        )
    if method in NO_KV_METHODS or method not in MTP_METHODS:
        raise _refuse(
            f"method {method or 'unknown'!r}: with --engine sglang kvbudget prices the NextN (MTP) "
            "drafter that SGLang takes from the target's checkpoint; a separate draft (EAGLE with "
            "--speculative-draft-model-path, STANDALONE) is a checkpoint kvbudget does not take; "
            "plan without --speculative-config and pass --kv-cache-memory from the server log"
        )
    # DeepSeek-V4 is read in 0.5.23 whatever the version (its pools too: dsv4.py)
    legacy = version < SPECULATIVE_VERSION and model.model_type != "deepseek_v4"
    if legacy and (version < LEGACY_FROM or model.model_type not in LEGACY_TYPES):
        raise _refuse(
            f"method mtp for {model.model_type} with SGLang {'.'.join(map(str, version))}: "
            "kvbudget reads 0.5.4's rule (draft_runner_cache_size, model_executor/model_runner.py "
            "lines 1667-1687) for deepseek_v3 and glm4_moe from 0.5.3 on, and 0.5.23's for "
            "deepseek_v3, deepseek_v32, deepseek_v4, glm4_moe, glm_moe_dsa; pass --engine-version "
            "0.5.23"
        )
    if model.model_type not in SGLANG_NEXTN_TYPES:
        raise _refuse(
            f"method mtp for {model.model_type!r}: SGLang 0.5.23 takes the NextN draft from the "
            "target's checkpoint only for DeepSeek-V3/V3.2/V4, GLM-4.5, GLM-5 and a few others "
            "(arg_groups/speculative_hook.py lines 1120-1157); kvbudget prices deepseek_v3, "
            "deepseek_v32, deepseek_v4, glm4_moe and glm_moe_dsa; plan without "
            "--speculative-config and pass --kv-cache-memory from the server log"
        )
    n = model.raw_config.get("num_nextn_predict_layers")
    if model.model_type == "deepseek_v4":
        n = dsv4_draft_layers(n)  # SGLang builds one whatever the checkpoint says
    if not isinstance(n, int) or isinstance(n, bool) or n != 1:
        raise _refuse(
            f"method mtp for {model.model_type} with num_nextn_predict_layers {n!r}: SGLang's "
            "NextN drafter builds one decoder layer (models/deepseek_nextn.py lines 126-135) while "
            "its pool is priced for num_nextn_predict_layers; kvbudget prices 1"
        )
    draft_kv = config.get("kv_cache_dtype")
    if draft_kv is not None and str(draft_kv).strip().lower() != request.kv_dtype.strip().lower():
        raise _refuse(
            f"kv_cache_dtype {draft_kv!r} for the drafter (SGLang's "
            "--speculative-draft-kv-cache-dtype) is not modelled; drop it"
        )
    if request.pp > 1:
        raise _refuse("an SGLang NextN drafter with --pp > 1 is not priced; plan with --pp 1")
    notes = [
        f"speculative_config: SGLang NEXTN (EAGLE) with {n} draft layer(s) from the target's "
        "checkpoint; the draft's KV is priced into the target's cell, so both pools hold "
        "max_total_num_tokens (pool_configurator.py lines 259-314); SGLang's default "
        "mem_fraction_static has no speculative term in 0.5.23; num_speculative_tokens (SGLang's "
        "--speculative-num-steps) does not change the pools"
    ]
    dsv4_steps = dsv4_draft_tokens(model, config) if model.model_type == "deepseek_v4" else None
    if dsv4_steps is not None:
        notes = [dsv4_draft_note(dsv4_steps)]
    if legacy:
        notes = [_legacy_note(request, model, config, n)]
    held = weights.source in ("flag", "read")
    draft_weights = 0
    if held:
        notes.append(
            MTP_SNAPSHOT_NOTE
            if weights.source == "read"
            else "speculative_config: --weights-bytes taken as target and NextN drafter together "
            "(add the draft worker's 'Load weight end' figure to the target's)"
        )
    else:
        layers = (
            dsv4_drafter_layer_bytes(request, model, compute_capability_major)
            if model.model_type == "deepseek_v4"
            else mtp_weights_bytes(request, model)
        )
        if layers is None and request.kv_cache_memory_bytes is not None:
            notes.append(  # the pool is the flag's: only the weights shown leave it out
                "speculative_config: weights leave the NextN drafter out (not estimated for "
                "this checkpoint); --kv-cache-memory sets the pool"
            )
        elif layers is None:
            why = (
                "kvbudget's DeepSeek-V4 MTP estimate, read in vLLM 0.32, cannot size "
                + str(dsv4_unpriced(request, model, compute_capability_major))
                if model.model_type == "deepseek_v4"
                else "a ModelOpt exclude list"
            )
            raise _refuse(
                f"the NextN drafter's weights of {model.model_type} are not estimated here "
                f"({why}); pass --weights-bytes or --kv-cache-memory"
            )
        else:
            vocab = model.vocab_size or 0
            embed = -(-vocab // request.tp) * (model.hidden_size or 0) * (model.dtype_bytes or 2)
            draft_weights = layers + 2 * embed  # its own embed_tokens and lm_head at sizing time
    dsa = any(isinstance(x, MLA) and x.index_head_dim for x in model.layer_seq.distinct())
    if dsv4_steps is not None:  # DeepSeek-V4's 256 running requests stand (dsv4_spec.py)
        return SglangDraft(
            n, draft_weights, False, tuple(notes), max_running=None, dsv4_draft_tokens=dsv4_steps[2]
        )
    if not legacy:
        return SglangDraft(n, draft_weights, dsa, tuple(notes))
    steps, topk, draft_tokens = _legacy_steps(model, config)
    running = request.max_num_seqs or SPEC_MAX_RUNNING
    extra = running * steps * topk + running * draft_tokens + LEGACY_BUFFER_TOKENS
    return SglangDraft(
        n,
        draft_weights,
        dsa,
        tuple(notes),
        legacy=True,
        extra_tokens=extra,
        reserve_mib=LEGACY_RESERVE_MIB,
    )


#: 0.5.4's rule is read from 0.5.3 on (the PR #10975 mem_fraction_static heuristic it builds on)
LEGACY_FROM = (0, 5, 3)
#: 0.5.4 defaults the draft path to the target for these (``server_args.py`` lines 1314-1327);
#: DSA (``deepseek_v32``) pools before 0.5.23 are not read with a drafter
LEGACY_TYPES = frozenset({"deepseek_v3", "glm4_moe"})
#: the "buffer" of ``draft_runner_cache_size`` (``model_runner.py`` lines 1682-1683)
LEGACY_BUFFER_TOKENS = 100
#: reserved for EAGLE / NEXTN drafts and their graphs (``server_args.py`` lines 793-795)
LEGACY_RESERVE_MIB = 2 * 1024


def _legacy_steps(model: ModelSpec, config: dict[str, object]) -> tuple[int, int, int]:
    """``(steps, topk, draft tokens)``: vLLM's ``num_speculative_tokens`` k is SGLang's
    ``--speculative-num-steps k --speculative-eagle-topk 1`` (draft tokens ``k + 1``,
    ``server_args.py`` lines 1349-1358); without it 0.5.4's auto choice (lines 3805-3835)."""
    k = config.get("num_speculative_tokens")
    if isinstance(k, int) and not isinstance(k, bool) and k >= 1:
        return k, 1, k + 1
    return (3, 1, 4) if model.model_type == "deepseek_v3" else (5, 4, 8)


def _legacy_note(request: PlanRequest, model: ModelSpec, config: dict[str, object], n: int) -> str:
    steps, topk, draft_tokens = _legacy_steps(model, config)
    running = request.max_num_seqs or SPEC_MAX_RUNNING
    return (
        f"speculative_config: SGLang 0.5.4's NEXTN (EAGLE) rule with {n} draft layer(s): "
        f"steps {steps}, topk {topk}, draft tokens {draft_tokens}; the target's pool is sized "
        f"from its own layers, then raised by {running} x {steps} x {topk} + {running} x "
        f"{draft_tokens} + 100 tokens (draft_runner_cache_size, model_runner.py lines "
        "1667-1687); the raise, the draft's pool of as many tokens and the draft's weights "
        "(its own embedding and head while loading) come out of the 1 - mem_fraction_static "
        f"headroom, for which SGLang reserves {LEGACY_RESERVE_MIB} MiB more by default "
        "(server_args.py lines 786-795)"
    )


def dsa_latent_cell(model: ModelSpec, kv_dtype: KvDtype) -> int:
    """The target's DSA cell without its indexer rows (``target_kv_size``, pool_configurator.py
    lines 273-301): every layer's latent."""
    return sum(
        sglang_dsa_cell_bytes(replace(x, index_head_dim=0), kv_dtype) * len(r)
        for x, r in model.layer_runs()
        if isinstance(x, MLA)
    )
