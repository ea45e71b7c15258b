"""Run SGLang 0.5.23's own ``DSV4PoolConfigurator`` on DeepSeek-V4 (no GPU, no model, no kvbudget).

SGLang's package does not import without CUDA kernels, so this script loads the sizing source
itself: ``srt/model_executor/pool_configurator.py`` (the configurator, unchanged), the pure
helpers of ``srt/mem_cache/deepseek_v4_memory_pool.py`` (their ``def`` statements, taken from the
file and run as written), ``kernels/ops/attention/dsv4/kv_layout.py`` (the ``KVLayout`` page
rule, unchanged) and every ``Env*`` default of ``srt/environ.py`` (read from the file). Only the
runtime context is stubbed, with the default server settings for ``deepseek_v4`` on CUDA that
``tests/unit/plan/test_plan_sglang_dsv4.py`` cites: flashmla backend, no HiSparse, no PD,
``max_running_requests`` 256, ``swa_full_tokens_ratio`` 0.1 (set), page 256, fp8_e4m3; without
speculative decoding, then with SGLang's EAGLE (the NextN drafter) at 4 draft tokens (and 11, which SGLang's
ring assertion refuses) for ``tests/unit/plan/test_plan_sglang_dsv4_mtp.py``. It prints
``calculate_pool_sizes`` for the figures those tests work by hand.

Run with a Python that has torch (``/work/main/.venv/bin/python``), the wheel unpacked:
``python scripts/check_sglang_dsv4_pool.py /tmp/sgl`` (a folder holding ``sglang/srt`` and
``sglang/kernels``; ``unzip sglang-0.5.23-*.whl 'sglang/srt/*' 'sglang/kernels/*'``).
"""

from __future__ import annotations

import ast
import importlib.abc
import importlib.util
import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

GiB = 1 << 30
CATALOG = Path(__file__).resolve().parents[1] / "src/kvbudget/spec/catalog/models"
MEM_POOL_HELPERS = (
    "get_dsv4_indexer_bytes_per_token",
    "get_compress_state_ring_size",
    "resolve_compress_state_ring_size",
    "collect_sources_by_ratio",
    "get_compress_state_write_pad",
    "uses_draft_swa_ring",
    "get_draft_swa_ring_size",
    "get_swa_ring_size",
    "_num_dsv4_physical_kv_pages",
    "resolve_compressed_kv_layout",
    "select_dsv4_kv_layout",
    "dsv4_unified_row_bytes",
)


class _Env:
    def __init__(self, default: Any) -> None:
        self.default = default

    def get(self) -> Any:
        return self.default

    def is_set(self) -> bool:
        return False


def _env_defaults(environ: Path) -> SimpleNamespace:
    """Every ``NAME = EnvX(default)`` of ``srt/environ.py``, as ``envs.NAME.get()``."""
    out: dict[str, _Env] = {}
    for node in ast.walk(ast.parse(environ.read_text())):
        if (
            isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call)
            and isinstance(node.value.func, ast.Name)
            and node.value.func.id.startswith("Env")
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
        ):
            try:
                default = ast.literal_eval(node.value.args[0]) if node.value.args else None
            except ValueError:
                continue
            out[node.targets[0].id] = _Env(default)
    return SimpleNamespace(**out)


class _Anything:
    """An import-time placeholder for names the DeepSeek-V4 path never calls."""

    def __call__(self, *args: Any, **kwargs: Any) -> _Anything:
        return self

    def __getattr__(self, name: str) -> _Anything:
        return self


def _stub(name: str, **attrs: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    module.__getattr__ = lambda _name: _Anything()  # type: ignore[method-assign]
    sys.modules[name] = module
    return module


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any other ``sglang.*`` module the configurator imports: a placeholder module (the
    DeepSeek-V4 sizing path never calls into them)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname.startswith("sglang.") and fullname not in sys.modules:
            return importlib.util.spec_from_loader(fullname, self, is_package=True)
        return None

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _stub(spec.name)
        module.__path__ = []  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _load(name: str, path: Path, namespace: dict[str, Any] | None = None) -> types.ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    module.__dict__.update(namespace or {})
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def setup(root: Path, schedule: SimpleNamespace, spec: SimpleNamespace) -> types.ModuleType:
    """Load the configurator with the runtime context stubbed; ``schedule`` is ``get_schedule()``,
    ``spec`` is ``get_spec()`` (``speculative_algorithm``, ``speculative_num_draft_tokens``)."""
    sglang = root / "sglang"
    sys.meta_path.append(_StubFinder())
    for package in ("sglang", "sglang.srt", "sglang.kernels", "sglang.srt.mem_cache"):
        _stub(package).__path__ = []  # type: ignore[attr-defined]
    envs = _env_defaults(sglang / "srt/environ.py")
    context = {
        "get_exec": lambda: SimpleNamespace(
            kernel=SimpleNamespace(
                dsv4_attn_backend="flashmla", enable_deepseek_v4_fp4_indexer=False
            ),
            features=SimpleNamespace(enable_encoder_swa_bounded_replay=False),
        ),
        "get_memory": lambda: SimpleNamespace(enable_hisparse=False, disable_radix_cache=False),
        "get_schedule": lambda: schedule,
        "get_spec": lambda: spec,
        "get_disagg": lambda: SimpleNamespace(
            disaggregation_mode="null", disaggregation_decode_extra_slots=0
        ),
        # runtime_context.py lines 1982-2000: the largest draft-token count (no adaptive tiers)
        "max_speculative_num_draft_tokens": lambda: spec.speculative_num_draft_tokens,
    }
    _stub("sglang.srt.runtime_context", **context)
    _stub("sglang.srt.environ", envs=envs)
    _stub(
        "sglang.srt.layers.attention.dsv4.unified_kv_gate",
        is_unified_kv_triton=lambda: False,
        is_unified_kv_fp8=lambda: False,
    )
    _stub(
        "sglang.srt.utils.common",
        ceil_align=lambda x, y: _ceil_div(x, y) * y,
        ceil_div=_ceil_div,
        is_hip=lambda: False,
        is_npu=lambda: False,
    )
    layout = _load(
        "sglang.kernels.ops.attention.dsv4.kv_layout",
        sglang / "kernels/ops/attention/dsv4/kv_layout.py",
    )
    pool_source = (sglang / "srt/mem_cache/deepseek_v4_memory_pool.py").read_text()
    helpers: list[ast.stmt] = [
        node
        for node in ast.parse(pool_source).body
        if isinstance(node, ast.FunctionDef) and node.name in MEM_POOL_HELPERS
    ]
    names = {h.name for h in helpers if isinstance(h, ast.FunctionDef)}
    assert names == set(MEM_POOL_HELPERS), "helpers moved: re-read the file"
    pool = _stub(
        "sglang.srt.mem_cache.deepseek_v4_memory_pool",
        envs=envs,
        torch=torch,
        KVLayout=layout.KVLayout,
        ceil_div=_ceil_div,
        _is_hip=False,
        ONLINE_C128=False,  # ``not _is_hip and SGLANG_OPT_USE_ONLINE_COMPRESS`` (off)
        DSV41_INDEX_PAGE_SIZE=64,
        Optional=Any,
        Sequence=Any,
        List=list,
        Tuple=tuple,
        Union=Any,
        **context,
    )
    code = compile(ast.Module(body=helpers, type_ignores=[]), str(pool.__name__), "exec")
    exec(code, pool.__dict__)  # the helpers exactly as written in SGLang's file
    return _load(
        "sglang.srt.model_executor.pool_configurator",
        sglang / "srt/model_executor/pool_configurator.py",
    )


def _kvc(model: str, start: int, end: int, eagle: bool = False) -> SimpleNamespace:
    raw = json.loads((CATALOG / f"{model}.json").read_text())
    cfg = SimpleNamespace(
        qk_rope_head_dim=raw["qk_rope_head_dim"],
        qk_nope_head_dim=raw["head_dim"] - raw["qk_rope_head_dim"],  # model_config.py 1425
        index_head_dim=raw["index_head_dim"],
        compress_ratios=raw["compress_ratios"],
        window_size=raw["sliding_window"],
        context_len=8192,
        hf_config=SimpleNamespace(kv_source_layer_ids=[]),  # configs/deepseek_v4.py line 106
    )
    algorithm = SimpleNamespace(
        is_dspark=lambda: False, is_none=lambda: not eagle, is_eagle=lambda: eagle
    )
    return SimpleNamespace(
        kv_cache_dtype_str="fp8_e4m3",
        model_config=cfg,
        layer_info=SimpleNamespace(start_layer=start, end_layer=end),
        pp_size=1 if (start, end) == (0, raw["num_hidden_layers"]) else 2,
        pp_group=SimpleNamespace(rank_in_group=0 if start == 0 else 1),
        spec_algorithm=algorithm,
        sliding_window_size=raw["sliding_window"],
        page_size=256,
        attn_dp_size=1,
    )


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sgl")
    schedule = SimpleNamespace(
        max_running_requests=256,
        swa_full_tokens_ratio=0.1,
        _swa_full_tokens_ratio_explicitly_set=True,
        chunked_prefill_size=8192,
        swa_prefix_tails=None,
    )
    spec = SimpleNamespace(speculative_algorithm=None, speculative_num_draft_tokens=None)
    configurator = setup(root, schedule, spec)
    cases = [
        ("Flash", "deepseek-ai--DeepSeek-V4-Flash", 0, 43, 256, 0.1, 10 * GiB),
        ("Pro", "deepseek-ai--DeepSeek-V4-Pro", 0, 61, 256, 0.1, 10 * GiB),
        ("Flash, 64 requests", "deepseek-ai--DeepSeek-V4-Flash", 0, 43, 64, 0.1, 10 * GiB),
        ("Flash, ratio 0.2", "deepseek-ai--DeepSeek-V4-Flash", 0, 43, 256, 0.2, 10 * GiB),
        # SGLang's split of 43 layers over 2 (distributed/utils.py lines 137-148): [0, 21), [21, 43)
        ("Flash, PP stage 0", "deepseek-ai--DeepSeek-V4-Flash", 0, 21, 256, 0.1, 10 * GiB),
        ("Flash, PP stage 1", "deepseek-ai--DeepSeek-V4-Flash", 21, 43, 256, 0.1, 10 * GiB),
    ]
    for name, model, start, end, running, ratio, available in cases:
        schedule.max_running_requests, schedule.swa_full_tokens_ratio = running, ratio
        c = configurator.DSV4PoolConfigurator(_kvc(model, start, end))
        config = c.calculate_pool_sizes(available, 256)
        print(
            f"{name}: bytes_per_full_token={c.bytes_per_full_token} "
            f"c128_state_fixed={c._get_c128_state_fixed_bytes(running)} "
            f"full={config.max_total_num_tokens} swa={config.swa_max_total_num_tokens} "
            f"c4={config.c4_max_total_num_tokens} c128={config.c128_max_total_num_tokens} "
            f"c4_state={config.c4_state_pool_size}"
        )
    schedule.max_running_requests, schedule.swa_full_tokens_ratio = 256, 0.1
    c = configurator.DSV4PoolConfigurator(_kvc("deepseek-ai--DeepSeek-V4-Flash", 0, 43))
    try:
        c.calculate_pool_sizes(2_715_811_840 + 4_096 * 7_087, 256)
    except ValueError as error:
        print(f"Flash, small budget: ValueError: {error}")
    # EAGLE with --speculative-num-steps 3 --speculative-eagle-topk 1: 4 draft tokens (what
    # kvbudget reads for num_speculative_tokens 3)
    spec.speculative_algorithm, spec.speculative_num_draft_tokens = "EAGLE", 4
    speculative = [
        ("Flash, EAGLE", "deepseek-ai--DeepSeek-V4-Flash", 256, 0.1),
        ("Pro, EAGLE", "deepseek-ai--DeepSeek-V4-Pro", 256, 0.1),
        ("Flash, EAGLE, 64 requests", "deepseek-ai--DeepSeek-V4-Flash", 64, 0.1),
    ]
    for name, model, running, ratio in speculative:
        schedule.max_running_requests, schedule.swa_full_tokens_ratio = running, ratio
        layers = json.loads((CATALOG / f"{model}.json").read_text())["num_hidden_layers"]
        c = configurator.DSV4PoolConfigurator(_kvc(model, 0, layers, eagle=True))
        config = c.calculate_pool_sizes(10 * GiB, 256)
        print(
            f"{name}: rings={c.ring_sizes} spec_infl={c._spec_infl} "
            f"bytes_per_full_token={c.bytes_per_full_token} "
            f"c128_state_fixed={c._get_c128_state_fixed_bytes(running)} "
            f"full={config.max_total_num_tokens} swa={config.swa_max_total_num_tokens} "
            f"c4={config.c4_max_total_num_tokens} c128={config.c128_max_total_num_tokens} "
            f"c4_state={config.c4_state_pool_size}"
        )
    schedule.max_running_requests = 256
    spec.speculative_num_draft_tokens = 11
    try:
        configurator.DSV4PoolConfigurator(_kvc("deepseek-ai--DeepSeek-V4-Flash", 0, 43, True))
    except AssertionError as error:
        print(f"Flash, EAGLE, 11 draft tokens: AssertionError: {error}")


if __name__ == "__main__":
    main()
