"""Which of a model's matrices a ModelOpt checkpoint leaves unquantized (``exclude_modules``).

vLLM 0.32.0 reads the list from ``hf_quant_config.json``'s ``quantization.exclude_modules`` or,
for a ``config.json`` ``quantization_config`` without that nesting, from ``ignore``
(``model_executor/layers/quantization/modelopt.py`` lines 320-355, ``from_config``). A model
class with an ``hf_to_vllm_mapper`` (Llama, Qwen2/3, Qwen2/3-MoE; not DeepSeek-V2/V3) first
rewrites each ``X*`` pattern whose ``X`` does not end in ``.`` into ``X`` and ``X.*``
(``apply_vllm_mapper``, lines 262-281; ``model_loader/utils.py`` line 379; the rename mapper of
those classes keeps names as they are). Each linear layer is then asked
``is_layer_excluded(prefix)`` with its vLLM module name (lines 187-221), true when any of:

1. ``is_layer_skipped(prefix, patterns, packed_modules_mapping)`` in exact mode
   (``quantization/utils/quant_utils.py`` lines 617-690): a fused layer (``qkv_proj``,
   ``gate_up_proj``, DeepSeek's ``fused_qkv_a_proj``) is skipped when its name, or every one of
   its shards' names, is listed verbatim (some shards only: vLLM refuses to load); a name with
   ``experts`` is skipped when it is a substring of a listed pattern that names ``experts``;
   any other name when listed verbatim;
2. a pattern other than the name itself is a substring of it (or of it without
   ``language_model.``);
3. ``fnmatch(prefix, pattern)``.

An excluded layer gets ``UnquantizedLinearMethod`` (or the unquantized fused-MoE method): its
weights are stored in the model dtype. kvbudget names its matrices as vLLM's module tree does
for the families in :data:`_FAMILIES` and applies those three rules to each.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatch
from typing import Any

from kvbudget.capacity.model_dtype import vllm_quant_name
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec


@dataclass(frozen=True, slots=True)
class _Family:
    """vLLM's module names for one model family (relative to ``model.layers.{i}``)."""

    #: whether the model class has an ``hf_to_vllm_mapper`` (``X*`` -> ``X``, ``X.*``)
    mapper: bool
    #: the shared experts' module (``shared_experts`` in DeepSeek, ``shared_expert`` in Qwen)
    shared: str
    #: whether attention is MLA (DeepSeek-V2/V3 names)
    mla: bool = False


#: model_type -> names, read from vLLM 0.32.0 ``models/llama.py`` (``LlamaModel``, lines 347-
#: 356, 475-478), ``qwen2.py`` / ``qwen3.py``, ``qwen2_moe.py`` / ``qwen3_moe.py`` (``gate``,
#: ``shared_expert``, ``experts``: qwen3_moe.py lines 174-212) and ``deepseek_v2.py``
#: (``gate``, ``shared_experts``, ``experts``: lines 321-386; ``fused_qkv_a_proj`` /
#: ``kv_a_proj_with_mqa``, ``q_b_proj``, ``kv_b_proj``, ``o_proj``: lines 1053-1112; packed
#: mapping lines 1880-1912; no ``hf_to_vllm_mapper``)
_FAMILIES: dict[str, _Family] = {
    "llama": _Family(mapper=True, shared="shared_expert"),
    "qwen2": _Family(mapper=True, shared="shared_expert"),
    "qwen3": _Family(mapper=True, shared="shared_expert"),
    "qwen2_moe": _Family(mapper=True, shared="shared_expert"),
    "qwen3_moe": _Family(mapper=True, shared="shared_expert"),
    "deepseek_v2": _Family(mapper=False, shared="shared_experts", mla=True),
    "deepseek_v3": _Family(mapper=False, shared="shared_experts", mla=True),
}

#: modules outside the decoder layers that vLLM never quantizes in kvbudget's count (the
#: embedding and the norms are not linear layers; kvbudget prices lm_head in the model dtype)
_TOP_MODULES = ("lm_head", "model.embed_tokens", "model.norm")


def exclude_patterns(quant: Mapping[str, Any] | None) -> list[str]:
    """The ModelOpt exclusion list as vLLM reads it (empty for other methods)."""
    if not quant or not vllm_quant_name(quant).startswith("modelopt"):
        return []
    nested = quant.get("quantization")
    raw = nested.get("exclude_modules") if isinstance(nested, dict) else quant.get("ignore")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ConfigError(
            f"quantization_config: exclude_modules must be a list (vLLM refuses "
            f"{type(raw).__name__}); fix the config",
            field="quantization_config",
        )
    return [str(x) for x in raw]


def _expanded(patterns: Iterable[str]) -> list[str]:
    """``apply_vllm_mapper``'s rewrite of ``module_path*`` (modelopt.py lines 273-279)."""
    out: list[str] = []
    for p in patterns:
        if len(p) >= 2 and p[-1] == "*" and p[-2] != ".":
            out += [p[:-1], p[:-1] + ".*"]
        else:
            out.append(p)
    return out


def _exact_skipped(
    prefix: str, patterns: list[str], packed: Mapping[str, list[str]], strict: bool = True
) -> bool:
    """``is_layer_skipped`` in exact mode (quant_utils.py lines 617-690); ``strict=False``
    (one pattern tried alone) counts a listed shard as a hit instead of refusing."""
    proj = prefix.split(".")[-1]
    if proj in packed and prefix in patterns:
        return True
    if proj in packed:
        shards = [prefix.replace(proj, shard) in patterns for shard in packed[proj]]
        if not strict:
            return any(shards)
        if any(shards) and not all(shards):
            raise ConfigError(
                f"quantization_config: exclude_modules lists some but not all shards of {prefix} "
                "(vLLM refuses to load it: all shards of a fused layer need one precision); "
                "fix the list",
                field="quantization_config",
            )
        return all(shards)
    if "experts" in prefix:
        return any(prefix in p for p in patterns if "experts" in p)
    return prefix in patterns


def is_layer_excluded(
    prefix: str, patterns: list[str], packed: Mapping[str, list[str]], strict: bool = True
) -> bool:
    """``ModelOptQuantConfigBase.is_layer_excluded`` (modelopt.py lines 187-221)."""
    if not patterns:
        return False
    if _exact_skipped(prefix, patterns, packed, strict):
        return True
    for p in patterns:
        if p != prefix and (
            p in prefix
            or (
                prefix.startswith("language_model.") and p in prefix.removeprefix("language_model.")
            )
        ):
            return True
    return any(fnmatch(prefix, p) for p in patterns)


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A checkpoint's exclusion list resolved against kvbudget's matrices."""

    patterns: list[str]
    family: _Family | None
    packed: dict[str, list[str]]
    #: one line per pattern that names nothing kvbudget can place (empty: every one understood)
    unmapped: tuple[str, ...]

    def module(self, spec: ModelSpec, index: int, matrix: str) -> str | None:
        """vLLM's module name of kvbudget matrix ``matrix`` in layer ``index``."""
        if self.family is None:
            return None
        return f"model.layers.{index}.{_leaf(self.family, spec, matrix)}"

    def excluded(self, spec: ModelSpec, index: int, matrix: str) -> bool:
        name = self.module(spec, index, matrix)
        return name is not None and is_layer_excluded(name, self.patterns, self.packed)


def _leaf(family: _Family, spec: ModelSpec, matrix: str) -> str:
    q_lora = bool(spec.raw_config.get("q_lora_rank"))
    names = {
        "q_proj": "self_attn.q_proj" if family.mla else "self_attn.qkv_proj",
        "k_proj": "self_attn.qkv_proj",
        "v_proj": "self_attn.qkv_proj",
        "o_proj": "self_attn.o_proj",
        "q_a_proj": "self_attn.fused_qkv_a_proj",
        "kv_a_proj": "self_attn.fused_qkv_a_proj" if q_lora else "self_attn.kv_a_proj_with_mqa",
        "q_b_proj": "self_attn.q_b_proj",
        "kv_b_proj": "self_attn.kv_b_proj",
        "mlp.gate_up": "mlp.gate_up_proj",
        "mlp.down": "mlp.down_proj",
        "experts.gate_up": "mlp.experts",
        "experts.down": "mlp.experts",
        "router": "mlp.gate",
        "shared.gate_up": f"mlp.{family.shared}.gate_up_proj",
        "shared.down": f"mlp.{family.shared}.down_proj",
    }
    return names.get(matrix, matrix)


def _packed(family: _Family, spec: ModelSpec) -> dict[str, list[str]]:
    out = {"gate_up_proj": ["gate_proj", "up_proj"]}
    if family.mla:
        if spec.raw_config.get("q_lora_rank"):
            out["fused_qkv_a_proj"] = ["q_a_proj", "kv_a_proj_with_mqa"]
    else:
        out["qkv_proj"] = ["q_proj", "k_proj", "v_proj"]
    return out


_LAYER = re.compile(r"^model\.layers\.(\d+)(?:[.*]|$)")


def resolve_exclusion(
    spec: ModelSpec, layer_names: Mapping[int, Iterable[str]]
) -> Exclusion | None:
    """The checkpoint's exclusion list against the matrices ``layer_names`` (kvbudget names per
    decoder layer index); ``None`` when nothing beyond ``lm_head`` is listed."""
    raw = exclude_patterns(spec.quantization_config)
    if not [p for p in raw if p != "lm_head"]:
        return None
    family = _FAMILIES.get(spec.model_type)
    if family is None:
        return Exclusion(
            patterns=raw,
            family=None,
            packed={},
            unmapped=tuple(
                f"{p}: vLLM's module names of model_type {spec.model_type!r} are not mapped"
                for p in raw
                if p != "lm_head"
            ),
        )
    packed = _packed(family, spec)
    modules = [
        f"model.layers.{i}.{_leaf(family, spec, m)}"
        for i, names in layer_names.items()
        for m in names
    ]
    modules += [
        f"model.layers.{i}.{norm}"
        for i in layer_names
        for norm in ("input_layernorm", "post_attention_layernorm")
    ]
    modules += _TOP_MODULES
    unmapped: list[str] = []
    for p in raw:
        forms = _expanded([p]) if family.mapper else [p]
        if any(is_layer_excluded(m, forms, packed, strict=False) for m in modules):
            continue
        hit = _LAYER.match(p)
        if hit and int(hit.group(1)) >= spec.num_layers:
            continue  # an MTP layer: DeepSeek's load_weights skips it (deepseek_v2.py line 1653)
        unmapped.append(f"{p}: names none of the modules kvbudget counts")
    return Exclusion(
        patterns=_expanded(raw) if family.mapper else raw,
        family=family,
        packed=packed,
        unmapped=tuple(unmapped),
    )
