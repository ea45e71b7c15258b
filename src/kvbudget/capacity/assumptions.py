"""The assumption checklist behind the structural formula, and the status it implies.

The seed formula ``2 x layers x kv_heads x head_dim x tokens x bytes x seqs`` is exact only when
every item below holds. In the explicit mode the user confirms each item with a flag; in the model
mode each is derived from the resolved structure and the engine layout. Any item that does not
hold (or is not confirmed) makes the result a ``structural_reference`` and says why; a structure
the layout cannot map is ``not_applicable`` ("the formula does not apply; measure").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvbudget.capacity.dtypes import KvDtype
from kvbudget.capacity.layouts.base import LayoutResult
from kvbudget.spec.layers import MLA
from kvbudget.spec.model import ModelSpec

Status = Literal["exact", "structural_reference", "not_applicable"]

CHECKLIST: dict[str, str] = {
    "full_attention": "every cached layer is full attention (K and V per KV head)",
    "identical_layers": "every layer has the same KV heads and head size",
    "independent_sequences": "sequences share nothing (no prefix sharing counted)",
    "no_sliding_window": "no sliding-window or chunked-local layer",
    "no_hybrid_state": "no hybrid/state cache (Mamba, linear attention, KV-shared layers)",
    "no_quant_metadata": "no quantization metadata (scales, block headers)",
    "no_block_padding": "no block or context padding",
}


@dataclass(frozen=True, slots=True)
class Assumption:
    name: str
    text: str
    holds: bool | None  # None: not confirmed (explicit mode)
    basis: str  # "confirmed by --assume", "derived from the model", "not confirmed"
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "text": self.text,
            "holds": self.holds,
            "basis": self.basis,
            "reason": self.reason,
        }


def explicit_assumptions(confirmed: set[str]) -> list[Assumption]:
    """Explicit mode: an item holds only when the user confirmed it (``--assume NAME`` or ``all``)."""
    every = "all" in confirmed
    out = []
    for name, text in CHECKLIST.items():
        if every or name in confirmed:
            out.append(Assumption(name, text, True, "confirmed by --assume"))
        else:
            out.append(
                Assumption(name, text, None, "not confirmed", f"confirm with --assume {name}")
            )
    return out


def model_assumptions(
    spec: ModelSpec, layout: LayoutResult, dtypes: list[KvDtype]
) -> list[Assumption]:
    """Model mode: derive each item from the structure and the layout."""
    kinds = spec.kind_counts()
    shapes = {
        (
            layer.kind,
            getattr(layer, "num_kv_heads", 0),
            getattr(layer, "head_dim", 0),
            getattr(layer, "latent_dim", 0),
        )
        for layer, _ in spec.layer_runs()
    }
    sliding_mla = sum(  # Dots3-Note's sliding MLA layers (kind "mla" with a window)
        len(idx) for x, idx in spec.layer_runs() if isinstance(x, MLA) and x.sliding_window
    )
    checks: dict[str, tuple[bool, str]] = {
        "full_attention": (set(kinds) == {"full"}, _kinds_text(kinds)),
        "identical_layers": (len(shapes) == 1, f"{len(shapes)} distinct layer shapes"),
        "independent_sequences": (
            True,
            "calc counts each sequence's own KV; prefix sharing is not subtracted",
        ),
        "no_sliding_window": (
            not ({"sliding", "chunked"} & set(kinds)) and not sliding_mla,
            f"sliding x{kinds.get('sliding', 0)}, chunked x{kinds.get('chunked', 0)}"
            + (f", sliding mla x{sliding_mla}" if sliding_mla else ""),
        ),
        "no_hybrid_state": (
            not ({"state", "shared", "none", "hybrid"} & set(kinds)),
            f"state x{kinds.get('state', 0)}, shared x{kinds.get('shared', 0)}"
            + (f", attention+state x{kinds['hybrid']}" if "hybrid" in kinds else ""),
        ),
        "no_quant_metadata": (
            not any(d.has_metadata for d in dtypes),
            ", ".join(
                f"{d.name}: {'scales/blocks' if d.has_metadata else 'plain'}" for d in dtypes
            ),
        ),
        "no_block_padding": (
            not layout.padding,
            layout.padding,
        ),
    }
    out = [
        Assumption(name, CHECKLIST[name], holds, "derived from the model", "" if holds else why)
        for name, (holds, why) in checks.items()
    ]
    if not spec.rules_verified:
        out.append(
            Assumption(
                "verified_architecture",
                VERIFIED_TEXT,
                False,
                "derived from the model",
                f"model_type {spec.model_type} was read with generic rules that no oracle has "
                "checked for it (see the architecture_rules ledger line)",
            )
        )
    return out


VERIFIED_TEXT = "the architecture's layer rules were checked against transformers' cache"


def _kinds_text(kinds: dict[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in kinds.items())


def status_from(assumptions: list[Assumption]) -> tuple[Status, list[str]]:
    """``exact`` when every item holds, else ``structural_reference`` with the reasons."""
    reasons = [
        f"{a.name}: {'not confirmed' if a.holds is None else 'does not hold'}"
        + (f" ({a.reason})" if a.reason else "")
        for a in assumptions
        if a.holds is not True
    ]
    return ("exact" if not reasons else "structural_reference"), reasons
