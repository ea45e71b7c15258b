"""The ``hf`` oracle: every causal-LM model type transformers and vLLM both serve, byte for byte.

The list is computed, not hand-picked: every ``model_type`` of transformers'
``MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`` whose causal-LM class is in vLLM 0.32.0's model registry
(``fixtures/vllm_0.32.0_architectures.json``, recorded from vLLM by
``scripts/record_vllm_pools.py --registry``). For each, transformers builds a tiny variant of its
own default config (``tiny_configs.py``; the config class recomputes ``layer_types`` and every
derived field), then the model on the ``meta`` device (no memory, no weights). One forward of T
tokens for 1 and 2 sequences, T below and above every window the *transformers* config names,
returns a cache; the expected bytes are the sum of every floating-point tensor reachable from it
(``layers`` and anything outside them, e.g. MiniMax's ``linear_cache``). kvbudget resolves the
same ``config.json`` and ``calc --engine hf``'s layout must match exactly.

Model types transformers cannot run on the meta device are listed in :data:`META_FAIL` with the
reason (the test checks they still fail, so the list cannot go stale); types kvbudget refuses are
in :data:`NOT_MODELLED` with the reason and must resolve ``not_applicable`` (never a wrong number).
"""

from __future__ import annotations

import importlib
import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.spec.resolve import resolve_model
from tests.peer import tiny_configs

torch = importlib.import_module("torch")
transformers = importlib.import_module("transformers")

FIXTURES = Path(__file__).parent / "fixtures"

#: model types whose tiny meta-device forward fails inside transformers (reason as observed)
META_FAIL: dict[str, str] = {
    "dbrx": "DbrxAttention clamps the QKV with clip_qkv, which is None by default: clamp with "
    "neither bound raises; given a clip_qkv, the MoE calls torch.nonzero, which has no meta "
    "implementation (and the default DbrxAttentionConfig lacks the rope_theta the model reads); "
    "a tiny DBRX run on the CPU instead (tests/unit/spec/test_dbrx.py) held what calc --engine hf "
    "says",
    "gemma3n": "the wrapper builds a TimmWrapper vision tower that needs the timm package (not a "
    "test dependency); gemma3n_text, the same decoder, is checked",
    "gemma4": "the multimodal wrapper calls Tensor.item() on the meta device; gemma4_text, the "
    "same decoder, is checked",
    "gemma4_unified": "the multimodal wrapper calls Tensor.item() on the meta device; gemma4_text, "
    "the same decoder family, is checked",
    "kimi_linear": "the tiny variant's MoE top-k fails on the meta device (topk: k not in "
    "range); the published Kimi-K3 decoder (kimi_linear) is checked by test_calc_hf_peer.py",
    "longcat_flash": "its MoE's zero-computation experts call torch.nonzero, which has no "
    "meta-device implementation",
    **{
        name: "the default config leaves the QSA indexer fields (indexer_head_dim, ...) None and "
        "Qwen4ExpTextQSAIndexer divides indexer_budget by indexer_compress_ratio (TypeError; "
        "kvbudget refuses it naming indexer_head_dim); given them, the indexer calls "
        "torch.nonzero, which has no meta-device implementation; a tiny Qwen4-Exp with QSA and "
        "PLE layers ran on the CPU instead (tests/unit/spec/test_dots3_qwen4.py) and held what "
        "calc --engine hf says"
        for name in ("qwen4_exp", "qwen4_exp_text")
    },
}

#: model types kvbudget resolves as not_applicable, and why
NOT_MODELLED: dict[str, str] = {}

_DOTS3_VLLM = (
    "transformers' format refused: vLLM 0.32 reads Dots3-Note only in the checkpoint's flat "
    "format, model_type dots3_note with layer_types and swa_* keys (transformers_utils/config.py "
    "line 94, models/dots3_note/nvidia/model.py lines 306, 366-369, 526); that format is planned, "
    "worked by hand from the source (tests/unit/plan/test_plan_dots3_vllm.py): sliding-window MLA "
    "pages, DSA latents padded to the sliding rows (model.py lines 227-239) plus indexer keys, "
    "packed groups; no CPU pool (the model needs vllm_flash_attn's CUDA extensions, "
    "flashattn_mla_sparse.py line 33); SGLang 0.5.23 and llama.cpp 0c1e570 read the same flat "
    "format (tests/unit/plan/test_plan_sglang_dots3.py, test_llamacpp_dots3.py)"
)
_QWEN4_VLLM = (
    'vLLM 0.32 serves it (vllm/models/qwen4_exp; __init__.py lines 30-31: "CUDA and ROCm only"), so '
    "no CPU pool; worked by hand from the source (tests/unit/plan/test_plan_qwen4_exp_vllm.py): "
    "GDN and PLE mamba states padded to the attention page, each QSA layer's K/V plus its "
    "indexer's compressed keys (common/qsa_cache.py lines 865-876) in one group, the raw-key ring "
    "(lines 844-862) one page per request, packed groups; scripts/check_qwen4_exp_vllm_groups.py "
    "runs vLLM's own grouping on those specs; SGLang 0.5.23 serves it as "
    "Qwen4ExpForConditionalGeneration, its QSATokenToKVPool and GDN state pool worked by hand in "
    "tests/unit/plan/test_plan_sglang_qwen4_exp.py"
)
#: model types vLLM 0.32 serves whose vllm layout kvbudget refuses (checked below), and why
VLLM_LAYOUT_REFUSED: dict[str, str] = {
    "dots3_note": _DOTS3_VLLM,
    "dots3_note_text": _DOTS3_VLLM,
}
#: model types vLLM 0.32 serves but does not start on its CPU build, whose vllm layout is worked
#: by hand from the source (checked below: a number, not a refusal)
VLLM_BY_HAND: dict[str, str] = {
    "qwen4_exp": _QWEN4_VLLM,
    "qwen4_exp_text": _QWEN4_VLLM,
}
#: Qwen4-Exp's QSA indexer fields, absent from transformers' default config (None there)
QSA_FIELDS = {
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 32,
    "indexer_budget": 16,
    "indexer_compress_ratio": 4,
}


@cache
def served_types() -> list[tuple[str, str]]:
    """(model_type, causal-LM class) pairs transformers and vLLM 0.32.0 both serve."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    registry = json.loads((FIXTURES / "vllm_0.32.0_architectures.json").read_text("utf-8"))
    archs = set(registry["architectures"])
    return sorted(
        (mt, cls) for mt, cls in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.items() if cls in archs
    )


def _tensors(obj: Any, out: dict[int, Any], depth: int = 0) -> None:
    if isinstance(obj, torch.Tensor):
        out[id(obj)] = obj
    elif depth > 6 or isinstance(obj, torch.nn.Module | str | bytes | int | float):
        return
    elif isinstance(obj, list | tuple | set):
        for item in obj:
            _tensors(item, out, depth + 1)
    elif isinstance(obj, dict):
        for item in obj.values():
            _tensors(item, out, depth + 1)
    elif hasattr(obj, "__dict__"):
        for item in vars(obj).values():
            _tensors(item, out, depth + 1)


def cache_bytes(cache_obj: Any) -> int:
    """Bytes of every floating-point tensor reachable from a transformers cache object."""
    found: dict[int, Any] = {}
    _tensors(cache_obj, found)
    return sum(t.numel() * t.element_size() for t in found.values() if t.is_floating_point())


def token_counts(config: Any) -> list[int]:
    """Below and above every window the transformers config names (48 and 300 otherwise)."""
    text = config.get_text_config(decoder=True)
    windows = {
        w
        for w in (
            getattr(text, "sliding_window", None),
            getattr(text, "attention_chunk_size", None),
        )
        if isinstance(w, int) and w > 0
    }
    counts = {48}
    for window in windows:
        counts.update({window - 1, window + 16})
    if not windows:
        counts.add(300)
    return sorted(counts)


def meta_model(config: Any) -> Any:
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    return model.eval()


def expected_bytes(model: Any, tokens: int, seqs: int) -> int:
    ids = torch.zeros((seqs, tokens), dtype=torch.long, device="meta")
    with torch.no_grad():
        out = model(input_ids=ids, use_cache=True)
    return cache_bytes(out.past_key_values)


CASES = [pytest.param(mt, cls, id=mt) for mt, cls in served_types()]


@pytest.mark.slow
@pytest.mark.parametrize(("model_type", "arch"), CASES)
def test_hf_layout_matches_transformers(model_type: str, arch: str, tmp_path: Path) -> None:
    try:
        raw = tiny_configs.config_dict(model_type, tiny=True, architecture=arch)
    except Exception:  # a refused type whose tiny variant transformers rejects: use the default
        if model_type not in NOT_MODELLED:
            raise
        raw = tiny_configs.config_dict(model_type, tiny=False, architecture=arch)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    resolved = resolve_model(str(path))
    if model_type in NOT_MODELLED:
        assert resolved.status == "not_applicable", f"{model_type} now resolves: verify it"
        return
    config = tiny_configs.build_config(model_type, tiny=True)
    if model_type in META_FAIL:
        with pytest.raises(Exception):  # noqa: B017  (any failure inside transformers)
            expected_bytes(meta_model(config), 48, 1)
        return
    assert resolved.spec is not None, f"{model_type}: {resolved.reason}"
    model = meta_model(config)
    for tokens in token_counts(config):
        for seqs in (1, 2):
            expected = expected_bytes(model, tokens, seqs)
            got = hf_layout(resolved.spec, tokens=tokens, seqs=seqs, kv_dtype="bfloat16")
            assert got.total_bytes == expected, (
                f"{model_type} T={tokens} B={seqs}: kvbudget {got.total_bytes} != transformers {expected}"
            )


def test_coverage_target() -> None:
    """At least 60 served model types are exact against transformers; every other is listed."""
    types = [mt for mt, _ in served_types()]
    exact = [mt for mt in types if mt not in META_FAIL and mt not in NOT_MODELLED]
    assert len(exact) >= 60, f"only {len(exact)} of {len(types)} served types are checked exact"
    assert set(META_FAIL) | set(NOT_MODELLED) <= set(types)


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(VLLM_LAYOUT_REFUSED))
def test_vllm_layout_refusals(model_type: str, tmp_path: Path) -> None:
    """The vllm layout refuses these in one line (no partial number)."""
    from kvbudget.capacity.layouts.base import LayoutNotApplicable
    from kvbudget.capacity.layouts.vllm import vllm_layout

    arch = dict(served_types())[model_type]
    raw = tiny_configs.config_dict(model_type, tiny=True, architecture=arch)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    with pytest.raises(LayoutNotApplicable) as refused:
        vllm_layout(resolved.spec, tokens=48, seqs=1)
    assert "\n" not in refused.value.reason


@pytest.mark.slow
@pytest.mark.parametrize("model_type", sorted(VLLM_BY_HAND))
def test_vllm_layout_worked_by_hand(model_type: str, tmp_path: Path) -> None:
    """Qwen4-Exp's tiny config (with the QSA fields its default lacks) gets vLLM's packed groups:
    a number, not a refusal (the figures: tests/unit/plan/test_plan_qwen4_exp_vllm.py)."""
    from kvbudget.capacity.layouts.vllm import vllm_layout

    arch = dict(served_types())[model_type]
    raw = tiny_configs.config_dict(model_type, tiny=True, architecture=arch)
    text = raw.get("text_config") if isinstance(raw.get("text_config"), dict) else raw
    text.update(QSA_FIELDS)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw, default=str), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    assert vllm_layout(resolved.spec, tokens=48, seqs=1).total_bytes > 0
