"""MTP draft layers vLLM 0.32 caches under ``--speculative-config`` method ``mtp`` (issue #34).

Expected layers worked by hand from vLLM 0.32.0's source (``site-packages/vllm``) and the published
configs: ``deepseek_mtp.py`` lines 147-165 (``num_nextn_predict_layers`` DeepseekV2DecoderLayers at
``num_hidden_layers + k``), ``deepseek_v2.py`` lines 1158-1168 (an MTP layer of a DSA model always
builds a full indexer), ``mimo_mtp.py`` lines 96-115 (Qwen2 layers of the target's attention),
``mimo_v2_mtp.py`` line 177 (``num_mtp_layers = 1``) and lines 81-100 (``swa_*`` heads, window
``sliding_window_size``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.spec.layers import MLA, FullAttention, SlidingWindow
from kvbudget.spec.mtp import vllm_mtp_layers
from kvbudget.spec.resolve import resolve_model

AIC = Path(__file__).resolve().parents[3] / "src" / "kvbudget" / "spec" / "catalog" / "models"


def _layers(name: str) -> tuple[object, ...] | None:
    path = AIC / f"{name}.json"
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    return vllm_mtp_layers(resolved.spec, json.loads(path.read_text("utf-8")))


@pytest.mark.parametrize(
    ("name", "index", "indexer"),
    [
        ("deepseek-ai--DeepSeek-V3", 61, 0),
        ("deepseek-ai--DeepSeek-V3.2", 61, 128),
        # GLM-5.2: MTP layers build the indexer whatever index_topk_freq says
        ("zai-org--GLM-5.2", 78, 128),
    ],
)
def test_deepseek_mtp_is_one_more_target_mla_layer(name: str, index: int, indexer: int) -> None:
    layers = _layers(name)
    assert layers is not None and len(layers) == 1  # num_nextn_predict_layers: 1
    layer = layers[0]
    assert isinstance(layer, MLA)
    assert (layer.layer_index, layer.kv_lora_rank, layer.qk_rope_head_dim) == (index, 512, 64)
    assert layer.index_head_dim == indexer


def test_mimo_v2_flash_mtp_is_one_sliding_layer() -> None:
    layers = _layers("XiaomiMiMo--MiMo-V2-Flash")
    want = SlidingWindow(48, 8, 192, 128, sliding_window=128)
    assert layers == (want,)


def test_models_without_mtp_have_none_and_unread_drafters_are_not_guessed() -> None:
    assert _layers("meta-llama--Llama-3.1-8B") == ()  # no num_nextn_predict_layers
    assert _layers("deepseek-ai--DeepSeek-V2-Lite") == ()
    path = AIC / "meta-llama--Llama-3.1-8B.json"
    resolved = resolve_model(str(path))
    assert resolved.spec is not None
    raw = {**json.loads(path.read_text("utf-8")), "num_nextn_predict_layers": 1}
    assert vllm_mtp_layers(resolved.spec, raw) is None  # no drafter rule read: no guess


def test_mimo_mtp_repeats_the_target_attention(tmp_path: Path) -> None:
    raw = {
        "architectures": ["MiMoForCausalLM"],
        "model_type": "mimo",
        "num_hidden_layers": 36,
        "hidden_size": 4096,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 11008,
        "vocab_size": 151680,
        "max_position_embeddings": 32768,
        "sliding_window": 32768,
        "max_window_layers": 32,
        "use_sliding_window": False,
        "num_nextn_predict_layers": 1,
        "torch_dtype": "bfloat16",
    }  # the published MiMo-7B-Base config's attention fields
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.spec is not None, resolved.reason
    assert all(type(x) is FullAttention for x in resolved.spec.layer_seq.distinct())
    assert vllm_mtp_layers(resolved.spec, raw) == (FullAttention(36, 8, 128),)
