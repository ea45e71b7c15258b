"""SGLang's mamba state pool for hybrid mamba / linear-attention models: what one request's state
holds and the setup the planner sizes the pool from (``capacity.sglang_pool.mamba_state_pool``).
Every rule cites the sglang source it was read from (0.5.23 wheel, and 0.5.4 where it differs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvbudget.capacity.layouts.base import PpSplit, get_pp_indices, sglang_pp_split
from kvbudget.capacity.layouts.sglang import SGLANG_CONV_STATE_BYTES, SGLANG_TEMPORAL_STATE_BYTES
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.sglang_pool import (
    DEFAULT_MAMBA_FULL_MEMORY_RATIO,
    MAMBA_PADDING_SLOT_VERSION,
    MAMBA_SLOTS_PER_REQUEST,
)
from kvbudget.errors import ConfigError
from kvbudget.spec.layer_indices import LayerIndices
from kvbudget.spec.layers import ParallelHybrid
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.state_layers import StateLayer

#: the models sglang 0.5.4 gives a mamba state pool (``mambaish_config``: ``FalconH1Config``,
#: ``NemotronHConfig``, ``Qwen3NextConfig``; ``model_executor/model_runner.py`` lines 1482-1498)
MAMBA_POOL_MODEL_TYPES_054 = frozenset({"falcon_h1", "nemotron_h", "qwen3_next"})


@dataclass(slots=True)
class MambaSetup:
    """What the planner needs of the state pool before sizing it: whether this version keeps
    0.5.23's padding slot, one request's state bytes (0: no state pool modelled), the
    ``mamba_full_memory_ratio`` (None without a pool) and the notes saying so; ``slots``: state
    slots a running request takes (``slots_note`` says why, None: the radix cache's default 3)."""

    padded: bool
    state_per_req: int
    ratio: float | None
    notes: list[str] = field(default_factory=list)
    slots: int = MAMBA_SLOTS_PER_REQUEST
    slots_note: str | None = None


def mamba_setup(
    request: PlanRequest, model: ModelSpec, version: tuple[int, int, int], version_text: str
) -> MambaSetup:
    """The state pool's inputs for ``model`` under this SGLang version (see :class:`MambaSetup`)."""
    notes: list[str] = []
    padded = version >= MAMBA_PADDING_SLOT_VERSION
    ssm_name, ssm_bytes = _ssm_dtype(request.mamba_ssm_cache_dtype)
    state_per_req, state_kinds_unread = _state_bytes_per_request(
        model, request.tp, request.pp if padded else 1, ssm_bytes, sglang_pp_split(version)
    )
    if state_kinds_unread:
        notes.append(
            f"SGLang's state pool for {', '.join(state_kinds_unread)} layers is not modelled; "
            "only attention layers are in the token pool"
        )
        state_per_req = 0
    if state_per_req and not padded:
        if model.model_type not in MAMBA_POOL_MODEL_TYPES_054:
            notes.append(
                f"SGLang's mamba state pool for {model.model_type} before v0.5.23 is not "
                "modelled (0.5.4 builds it for falcon_h1, nemotron_h, qwen3_next only, "
                "model_executor/model_runner.py lines 1482-1498); only attention layers are in "
                "the token pool"
            )
            state_per_req = 0
        elif version > (0, 5, 4):
            notes.append(
                f"mamba state pool by sglang 0.5.4's rule (no padding slot) for v{version_text}; "
                "the change to 0.5.23's rule is not pinned to a release"
            )
    mamba_ratio = DEFAULT_MAMBA_FULL_MEMORY_RATIO if state_per_req else None
    if state_per_req:
        notes.append(
            f"SGLang mamba state pool: {state_per_req} B of state per request (conv bfloat16, "
            f"temporal {ssm_name}), given "
            f"mamba_full_memory_ratio {mamba_ratio} of the rest, rest*r/(1+r) ("
            + (
                "0.5.23 mem_cache/kv_cache_configurator.py lines 3352-3409"
                if padded
                else "0.5.4 model_executor/model_runner.py lines 1433-1480"
            )
            + "), before the token pool"
        )
    return MambaSetup(padded, state_per_req, mamba_ratio, notes)


def layers_in(indices: range, start: int, end: int) -> int:
    """Layers of ``indices`` in ``[start, end)``."""
    return len(LayerIndices([indices]).split(start, end))


#: state kinds whose SGLang shapes are read (``configs/mamba_utils.py``): ``Mamba2StateShape.create``
#: (lines 194-243: mamba2, and the gated delta net), ``create_full_rank`` (lines 245-291: Mamba-1),
#: ``KimiLinearStateShape.create`` (lines 323-368: KDA)
SGLANG_STATE_KINDS = frozenset({"mamba", "mamba2", "gdn", "kda"})


def _ssm_dtype(name: str) -> tuple[str, int]:
    """SGLang's temporal-state dtype from ``--mamba-ssm-cache-dtype`` (read as SGLang's
    ``--mamba-ssm-dtype``, which sets ``SGLANG_MAMBA_SSM_DTYPE``, ``arg_groups/serving_hook.py``
    lines 439-440): ``auto`` is SGLang's default float32 (``configs/mamba_utils.py`` lines
    46-105, which accept float32, bfloat16, float16)."""
    key = name.strip().lower()
    if key in ("auto", "float32", "float"):
        return "float32", SGLANG_TEMPORAL_STATE_BYTES
    if key in ("bfloat16", "float16", "half"):
        return "float16" if key == "half" else key, 2
    raise ConfigError(
        f"mamba_ssm_cache_dtype: {name!r} is not one of SGLang's --mamba-ssm-dtype values "
        "(float32, bfloat16, float16) or auto",
        field="mamba_ssm_cache_dtype",
    )


def _state_bytes_per_request(
    model: ModelSpec,
    tp: int,
    pp: int,
    temporal_bytes: int = SGLANG_TEMPORAL_STATE_BYTES,
    pp_split: PpSplit = get_pp_indices,
) -> tuple[int, list[str]]:
    """SGLang ``mamba_cache_per_req`` (``configs/mamba_utils.py`` lines 116-125: one layer's conv
    and temporal elements times their dtype sizes, times the state layers) scaled to the largest
    PP stage's share (``kv_cache_configurator.py`` lines 3234-3258), and the state kinds whose
    SGLang pool kvbudget has not read."""
    runs = [
        (x.state if isinstance(x, ParallelHybrid) else x, indices)
        for x, indices in model.layer_runs()
        if isinstance(x, StateLayer | ParallelHybrid)
    ]  # runs, never per layer (models of 10^8 layers)
    states = [(s, r) for s, r in runs if isinstance(s, StateLayer)]
    if not states:
        return 0, []
    unread: list[str] = sorted({s.state_kind for s, _ in states} - SGLANG_STATE_KINDS)
    if unread:
        return 0, unread
    first = states[0][0]
    per_layer = (
        first.conv_elements(tp) * SGLANG_CONV_STATE_BYTES + first.ssm_elements(tp) * temporal_bytes
    )
    num_states = sum(len(r) for _, r in states)
    per_req = per_layer * num_states
    if pp == 1:
        return per_req, []
    stage_max = max(
        sum(layers_in(r, start, end) for _, r in states)
        for start, end in (pp_split(model.num_layers, p, pp) for p in range(pp))
    )
    return int(per_req * (stage_max / num_states)), []
