"""Run SGLang 0.5.23's own ``HybridSWAPoolConfigurator`` (no GPU, no model, no kvbudget) on the
hybrid SWA model of ``tests/unit/plan/test_plan_sglang_hybrid_swa.py``: 21 full + 21 sliding
layers, 8 KV heads x (256 + 256), bfloat16, window 4096, ``swa_full_tokens_ratio`` 0.8.

The configurator source is loaded unchanged with the runtime context stubbed, as
``scripts/check_sglang_dsv4_pool.py`` does (its ``setup`` is reused); the configurator's
``get_parallel`` / ``get_memory`` / ``get_schedule`` are then set to one-GPU defaults: no unified
memory, no drafter, no fused draft entry. It prints ``calculate_pool_sizes`` for the budgets that
test works by hand.

``python scripts/check_sglang_hybrid_swa_pool.py /tmp/sgl`` (the 0.5.23 wheel unpacked).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

HERE = Path(__file__).resolve().parent


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sgl")
    spec = importlib.util.spec_from_file_location("check_dsv4", HERE / "check_sglang_dsv4_pool.py")
    assert spec is not None and spec.loader is not None
    dsv4 = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dsv4)
    schedule = SimpleNamespace(swa_full_tokens_ratio=0.8, max_running_requests=None)
    configurator = dsv4.setup(root, schedule)
    configurator.get_parallel = lambda: SimpleNamespace(attn_tp_size=1, attn_dcp_size=1)
    configurator.get_memory = lambda: SimpleNamespace(enable_unified_memory=False)
    configurator.get_schedule = lambda: schedule
    model_config = SimpleNamespace(
        attention_arch="MHA",  # not AttentionArch.MLA
        get_num_kv_heads=lambda tp: 8,
        get_swa_num_kv_heads=lambda tp: 8,
        head_dim=256,
        v_head_dim=256,
        swa_head_dim=256,
        swa_v_head_dim=256,
    )
    no_draft = SimpleNamespace(
        is_eagle=lambda: False, is_standalone=lambda: False, is_dflash_family=lambda: False
    )
    for page, available in ((64, 3_096_577_000), (1, 1_548_289_000)):
        kvc = SimpleNamespace(
            kv_cache_dtype_str="auto",
            kv_cache_dtype=torch.bfloat16,
            model_config=model_config,
            layer_info=SimpleNamespace(
                full_attention_layer_ids=list(range(1, 42, 2)),
                swa_attention_layer_ids=list(range(0, 42, 2)),
            ),
            sliding_window_size=4096,
            page_size=page,
            spec_algorithm=no_draft,
            is_draft_worker=False,
            fused_entry_bytes=lambda name: None,
        )
        c = configurator.HybridSWAPoolConfigurator(kvc)
        try:
            config = c.calculate_pool_sizes(available, page)
            print(
                f"page {page}, {available:,} B: cell_size={c._cell_size} "
                f"full={config.full_max_total_num_tokens} swa={config.swa_max_total_num_tokens}"
            )
        except ValueError as error:
            print(f"page {page}, {available:,} B: ValueError: {error}")


if __name__ == "__main__":
    main()
