"""vLLM pages MiniCPM3's MLA layers as plain attention (vllm/model_executor/models/minicpm3.py).

The recorded tiny config (tests/peer/fixtures/vllm_pools_0.32.0.json) has 8 layers, 4 heads,
qk_nope 64 + qk_rope 32 = 96 per head, bf16. By hand: K 4 x 96 and V padded to 4 x 96 per layer,
(384 + 384) x 2 B = 1,536 B per token per layer, x 8 layers = 12,288 B per token; the latent
layout (hf) would hold (kv_lora_rank + qk_rope) x 2 B per layer instead.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.capacity.layouts.vllm import vllm_layout
from kvbudget.spec.resolve import resolve_model

FIXTURE = Path(__file__).resolve().parents[2] / "peer" / "fixtures" / "vllm_pools_0.32.0.json"


def test_minicpm3_is_paged_as_attention_on_vllm(tmp_path: Path) -> None:
    config = json.loads(FIXTURE.read_text(encoding="utf-8"))["cases"]["minicpm3"]["config"]
    assert (config["num_hidden_layers"], config["num_attention_heads"]) == (8, 4)
    assert (config["qk_nope_head_dim"], config["qk_rope_head_dim"]) == (64, 32)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    spec = resolve_model(str(path)).spec
    assert spec is not None
    layout = vllm_layout(spec, tokens=128, seqs=1, block_size=128)
    per_token = sum(g.bytes_per_token for st in layout.stages for g in st.groups)
    assert per_token == 8 * (4 * 96 + 4 * 96) * 2 == 12_288
    assert any("plain attention" in n for n in layout.notes)
