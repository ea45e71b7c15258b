"""Peer test for architectures with no bundled checkpoint config: pure Mamba and Mamba2.

The configs below are small synthetic ones (no real checkpoint is claimed); transformers builds
them on the ``meta`` device and its returned cache is the independent oracle for the ``hf`` layout.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path
from typing import Any

import pytest

from kvbudget.capacity.layouts.hf import hf_layout
from kvbudget.spec.resolve import resolve_model

torch = importlib.import_module("torch")
transformers = importlib.import_module("transformers")

CONFIGS: dict[str, dict[str, Any]] = {
    "mamba": {
        "model_type": "mamba",
        "architectures": ["MambaForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 3,
        "state_size": 16,
        "conv_kernel": 4,
        "expand": 2,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    },
    "mamba2": {
        "model_type": "mamba2",
        "architectures": ["Mamba2ForCausalLM"],
        "hidden_size": 256,
        "num_hidden_layers": 3,
        "num_heads": 8,
        "head_dim": 64,
        "state_size": 16,
        "n_groups": 2,
        "conv_kernel": 4,
        "expand": 2,
        "vocab_size": 1000,
        "torch_dtype": "bfloat16",
    },
}


def cache_bytes(cache_obj: Any) -> int:
    total = 0
    for layer in cache_obj.layers:
        for name in ("keys", "values"):
            tensor = getattr(layer, name, None)
            if isinstance(tensor, torch.Tensor):
                total += tensor.numel() * tensor.element_size()
        for name in ("conv_states", "recurrent_states"):
            for tensor in (getattr(layer, name, None) or {}).values():
                if isinstance(tensor, torch.Tensor):
                    total += tensor.numel() * tensor.element_size()
    return total


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hf_layout_matches_transformers_for_state_models(name: str, tmp_path: Path) -> None:
    raw = CONFIGS[name]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None and spec.kind_counts() == {"state": 3}
    with torch.device("meta"):
        model = transformers.AutoModelForCausalLM.from_config(
            transformers.AutoConfig.for_model(**raw), dtype=torch.bfloat16
        )
    for tokens in (5, 70):
        for seqs in (1, 2):
            ids = torch.zeros((seqs, tokens), dtype=torch.long, device="meta")
            with torch.no_grad():
                out = model(input_ids=ids, use_cache=True)
            expected = cache_bytes(out.past_key_values)
            assert hf_layout(spec, tokens=tokens, seqs=seqs).total_bytes == expected
