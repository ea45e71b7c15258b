"""Which decoder layers of a MoE config are MoE layers, counted in closed form.

A config's pattern is arithmetic: layers below ``first_k_dense_replace`` are dense; with
``decoder_sparse_step`` (or ``interleave_moe_layer_step``) ``s > 1`` layer ``i`` is MoE only when
``(i + 1) % s == 0``; then ``expert_layer_period`` / ``expert_layer_offset`` (Jamba: ``i % p ==
offset``) or else ``moe_layer_freq``: ``i % f == 0`` as vLLM 0.32.0's DeepSeek-V2/V3
(``deepseek_v2.py``, ``DeepseekV2DecoderLayer``), GLM-4-MoE-Lite and AXK1 read it, ``(i -
first_k_dense_replace) % f == 0`` for Sarvam (``sarvam.py``); layers listed in ``mlp_only_layers``
are dense. A pattern written out per layer (``moe_layer_freq`` as a list, ``mlp_layer_types``) is
read entry by entry. Each condition is a congruence, so the layers of a ``range`` that
pass them all are counted by the Chinese remainder theorem: O(1) arithmetic plus one look at each
``mlp_only_layers`` entry, whatever the number of layers or the pattern's period.
"""

from __future__ import annotations

import math

from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec

#: architectures whose ``moe_layer_freq`` counts from ``first_k_dense_replace`` (vLLM 0.32.0
#: ``sarvam.py``: ``(layer_idx - first_k_dense) % moe_layer_freq == 0``)
_FREQ_FROM_FIRST_DENSE = frozenset({"SarvamMoEForCausalLM", "SarvamMLAForCausalLM"})


def _int(spec: ModelSpec, key: str, default: int) -> int:
    value = spec.raw_config.get(key) or default
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(
            f"{key}: {value!r} is not one integer; kvbudget reads a MoE pattern from integer "
            "fields only (a per-layer list is not modelled); fix the config or pass --weights-bytes",
            field=key,
        )
    return value


def _freq_residue(spec: ModelSpec, freq: int) -> int:
    """``i % freq`` of the MoE layers (see the module doc)."""
    if spec.architecture in _FREQ_FROM_FIRST_DENSE:
        return _int(spec, "first_k_dense_replace", 0) % freq
    return 0


def _listed_dense(spec: ModelSpec) -> set[int]:
    listed = spec.raw_config.get("mlp_only_layers") or []
    return {i for i in listed if isinstance(i, int) and not isinstance(i, bool)}


def _sparse_step(spec: ModelSpec) -> int:
    return _int(spec, "decoder_sparse_step", 0) or _int(spec, "interleave_moe_layer_step", 0) or 1


def _per_layer(spec: ModelSpec) -> list[bool] | None:
    """A pattern written layer by layer, or ``None``: ``moe_layer_freq`` as a list (MiniMax-M3:
    vLLM 0.32.0 ``models/minimax_m3/nvidia/model.py`` ``_is_moe_layer``: ``moe_layer_freq
    [layer_id] != 0``) or transformers' ``mlp_layer_types`` (``"sparse"`` / ``"dense"``, which
    ``MiniMaxM3VLTextConfig`` derives from that list)."""
    types = spec.raw_config.get("mlp_layer_types")
    if isinstance(types, list):
        return [t == "sparse" for t in types]
    freq = spec.raw_config.get("moe_layer_freq")
    if isinstance(freq, list):
        return [bool(f) for f in freq]
    return None


def is_moe_layer(spec: ModelSpec, index: int) -> bool:
    """Whether decoder layer ``index`` is a MoE layer (``mlp_only_layers`` included)."""
    if not spec.num_experts or index in _listed_dense(spec):
        return False
    listed = _per_layer(spec)
    if listed is not None:
        if index >= len(listed):
            raise ConfigError(
                f"moe_layer_freq: {len(listed)} entries for at least {index + 1} layers; give "
                "one entry per decoder layer",
                field="moe_layer_freq",
            )
        return listed[index]
    return _moe_by_pattern(spec, index)


def _moe_by_pattern(spec: ModelSpec, index: int) -> bool:
    """The config's MoE pattern at ``index``, ``mlp_only_layers`` aside."""
    first_dense = _int(spec, "first_k_dense_replace", 0)
    if index < first_dense:
        return False
    step = _sparse_step(spec)
    if step > 1 and (index + 1) % step != 0:
        return False
    period = spec.raw_config.get("expert_layer_period")
    if period:
        return index % int(period) == _int(spec, "expert_layer_offset", 0)
    freq = abs(_int(spec, "moe_layer_freq", 1))
    return index % freq == _freq_residue(spec, freq)


def _congruences(spec: ModelSpec) -> list[tuple[int, int]] | None:
    """The pattern past ``first_k_dense_replace`` as ``index % m == a`` pairs (``None``: no layer)."""
    out: list[tuple[int, int]] = []
    step = _sparse_step(spec)
    if step > 1:
        out.append((step - 1, step))
    period = spec.raw_config.get("expert_layer_period")
    if period:
        p, offset = int(period), _int(spec, "expert_layer_offset", 0)
        # Python's ``i % p`` lies in [0, p) for p > 0 and in (p, 0] for p < 0
        if not (0 <= offset < p or p < offset <= 0):
            return None
        out.append((offset % abs(p), abs(p)))
    else:
        freq = abs(_int(spec, "moe_layer_freq", 1))
        out.append((_freq_residue(spec, freq), freq))
    return out


def _combine(a1: int, m1: int, a2: int, m2: int) -> tuple[int, int] | None:
    """``x % m1 == a1 and x % m2 == a2`` as one ``x % m == a`` (``None``: no solution)."""
    g = math.gcd(m1, m2)
    if (a2 - a1) % g:
        return None
    m = m1 // g * m2
    # x = a1 + m1 * t with m1 * t == a2 - a1 (mod m2): t == (a2 - a1) / g * inv(m1 / g) (mod m2 / g)
    n2 = m2 // g
    t = (a2 - a1) // g * pow(m1 // g, -1, n2) % n2 if n2 > 1 else 0
    return (a1 + m1 * t) % m, m


def _count_congruent(indices: range, a: int, m: int) -> int:
    """How many ``i`` of ``indices`` (positive step) have ``i % m == a``."""
    start, step, n = indices.start, indices.step, len(indices)
    # start + k * step == a (mod m): k * step == a - start
    g = math.gcd(step, m)
    if (a - start) % g:
        return 0
    mk = m // g
    k1 = (a - start) // g * pow(step // g, -1, mk) % mk if mk > 1 else 0
    return 0 if k1 >= n else (n - 1 - k1) // mk + 1


def count_moe_layers(spec: ModelSpec, indices: range) -> int:
    """How many layers of ``indices`` are MoE layers, in closed form (see the module doc)."""
    if not spec.num_experts or not indices:
        return 0
    if _per_layer(spec) is not None:  # written out layer by layer: count it
        return sum(is_moe_layer(spec, i) for i in indices)
    if indices.step < 0:
        indices = indices[::-1]
    first_dense = _int(spec, "first_k_dense_replace", 0)
    tail = indices[max(0, -(-(first_dense - indices.start) // indices.step)) :]
    rules = _congruences(spec)
    if not tail or rules is None:
        return 0
    a, m = 0, 1
    for a2, m2 in rules:
        both = _combine(a, m, a2, m2)
        if both is None:
            return 0
        a, m = both
    dense = {i for i in _listed_dense(spec) if i in tail and _moe_by_pattern(spec, i)}
    return _count_congruent(tail, a, m) - len(dense)
