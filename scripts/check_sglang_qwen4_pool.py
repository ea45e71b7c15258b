"""Run SGLang 0.5.23's own Qwen4-Exp sizing code on the tiny Qwen4-Exp (no GPU, no kvbudget).

As ``scripts/check_sglang_dsv4_pool.py`` (whose loader this reuses), SGLang's package does not
import without CUDA kernels, so this script loads the sizing source itself, unchanged:

* ``srt/configs/qwen4_exp.py``, ``qwen3_next.py``, ``qwen3_vl.py`` and ``mamba_utils.py`` (the
  config SGLang builds: ``mamba2_cache_params.mamba_cache_per_req``, ``short_conv_state_shape``,
  ``ngram_context_len``, the layer ids);
* ``srt/layers/attention/qsa/config.py`` (``parse_qsa_profile``, its refusals; ``msgspec.Struct``
  stubbed as a plain keyword class when msgspec is absent) and ``srt/mem_cache/qsa_kv_pool.py``
  (``QSATokenToKVPool``, built on the CPU over a stub ``HybridLinearKVPool`` to count its ring and
  compressed-key bytes);
* ``srt/model_executor/pool_configurator.py`` (``DefaultPoolConfigurator``: the cell and
  ``calculate_pool_sizes``);
* ``srt/mem_cache/ple_state_pool.py`` (``ShortConvPool`` / ``NGramPool`` on the CPU);
* from ``srt/mem_cache/kv_cache_configurator.py`` the methods ``_handle_max_mamba_cache``,
  ``_calculate_mamba_ratio`` and ``resolve_max_num_reqs`` (their ``def`` statements, taken from
  the file and run as written on a stand-in ``self``).

Only the runtime context is stubbed, with the default server settings for
``Qwen4ExpForConditionalGeneration`` on CUDA that ``tests/unit/plan/test_plan_sglang_qwen4_exp.py``
cites: page 64, radix cache on with the ``extra_buffer`` strategy and the overlap schedule, no
speculative decoding, ``--qsa-indexer-dtype auto``, ``mamba_full_memory_ratio`` 0.9, context 8,192;
``ModelConfig.get_num_kv_heads`` is its lines 1700-1711 (``max(1, kv_heads // tp)``, no DCP). It
prints, per case, what that test works by hand.

Run with a Python that has torch and transformers (``/work/main/.venv/bin/python``), the wheel
unpacked as the DeepSeek-V4 check wants it (``unzip sglang-0.5.23-*.whl 'sglang/srt/*'
'sglang/kernels/*'``): ``python scripts/check_sglang_qwen4_pool.py /tmp/sgl``. It printed (sglang
0.5.23, torch 2 on the CPU)::

    TP 1, 1 GiB: mamba_cache_per_req=14592 max_mamba_cache_size=34854 cell=144 tokens=3924544
      max_running_requests=4096 ring_bytes=1442144 ring_row=352 ple_slot=0 beside_budget=1442144
    TP 2, 1 GiB: mamba_cache_per_req=7296 max_mamba_cache_size=69710 cell=144 tokens=3924480 ...
    TP 4, 4 attention heads, 1 GiB: mamba_cache_per_req=3936 max_mamba_cache_size=129220 cell=144
      tokens=3924480 ...
    TP 1, 1 GiB, fp8_e4m3: ... cell=80 tokens=7064192 ...
    TP 1, 64 MiB: ... max_mamba_cache_size=2177 cell=144 tokens=245312 max_running_requests=435
    TP 1, 1 GiB, PLE on layers 1 and 3: ... tokens=3924544 ... ple_slot=9232
      beside_budget=323223504
    indexer_budget 16: ValueError: fast_topk_v2 requires indexer_budget / indexer_compress_ratio
      to be one of [512, 2048], got 4
"""

from __future__ import annotations

import ast
import importlib.util
import sys
import types
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

GiB = 1 << 30
MiB = 1 << 20
HERE = Path(__file__).resolve().parent
TINY: dict[str, Any] = {  # tests/unit/spec/test_dots3_qwen4.py ``_qwen4``, indexer_budget 2048
    "hidden_size": 64,
    "num_hidden_layers": 4,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "indexer_n_heads": 2,
    "indexer_kv_heads": 1,
    "indexer_head_dim": 32,
    "indexer_budget": 2048,
    "indexer_compress_ratio": 4,
    "vocab_size": 1000,
    # SGLang's Qwen3NextConfig reads it when layer_types is absent (configs/qwen3_next.py line
    # 264); transformers' Qwen4-Exp config defaults it to 4, as kvbudget derives the layers
    "full_attention_interval": 4,
}
PAGE = 64
CONTEXT = 8192
KV_METHODS = ("_handle_max_mamba_cache", "_calculate_mamba_ratio", "resolve_max_num_reqs")


def _dsv4_loader() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("check_dsv4", HERE / "check_sglang_dsv4_pool.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Struct:
    """``msgspec.Struct`` as far as ``QSAProfile`` uses it: keyword fields, properties."""

    def __init_subclass__(cls, **_kwargs: Any) -> None:
        super().__init_subclass__()

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


class _HybridLinearKVPool:
    """The base ``QSATokenToKVPool.__init__`` calls: the full K/V pool is counted by the cell,
    not here (its ``get_kv_size_bytes`` is (0, 0)), so only the QSA buffers are measured."""

    def __init__(self, **kwargs: Any) -> None:
        self.full_kv_pool = SimpleNamespace(
            memory_saver_adapter=SimpleNamespace(region=lambda _tag: nullcontext()),
            enable_custom_mem_pool=False,
            custom_mem_pool=None,
        )
        self.full_attention_layer_id_mapping = {
            layer: i for i, layer in enumerate(kwargs["full_attention_layer_ids"])
        }

    def get_kv_size_bytes(self) -> tuple[int, int]:
        return 0, 0


def _functions(path: Path, names: tuple[str, ...], namespace: dict[str, Any]) -> None:
    """Exec the ``def`` statements ``names`` (top level or in a class) of ``path`` as written."""
    found: list[ast.stmt] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef) and node.name in names:
            node.decorator_list = []
            found.append(node)
    assert {f.name for f in found if isinstance(f, ast.FunctionDef)} == set(names), path
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)


def setup(root: Path, tp: list[int], schedule: SimpleNamespace) -> dict[str, Any]:
    """Load SGLang's modules with the runtime context stubbed; ``tp[0]`` is the TP size."""
    dsv4 = _dsv4_loader()
    configurator = dsv4.setup(root, schedule)  # the stubs, pool_configurator.py unchanged
    srt = root / "sglang/srt"
    runtime = sys.modules["sglang.srt.runtime_context"]
    runtime.linear_attn_tp_size = lambda: tp[0]  # type: ignore[attr-defined]
    runtime.get_parallel = lambda: SimpleNamespace(  # type: ignore[attr-defined]
        attn_tp_size=tp[0], attn_dcp_size=1, tp_size=tp[0], pp_size=1
    )
    distributed: dict[str, Any] = {}
    _functions(srt / "distributed/utils.py", ("divide", "ensure_divisibility"), distributed)
    dsv4._stub("sglang.srt.distributed.utils", **distributed)
    dsv4._stub("sglang.srt.utils", is_cpu=lambda: False)
    dsv4._stub("sglang.srt.configs.update_config")
    dsv4._load("sglang.srt.configs.mamba_utils", srt / "configs/mamba_utils.py")
    qwen3_next = dsv4._load("sglang.srt.configs.qwen3_next", srt / "configs/qwen3_next.py")
    qwen3_next._is_cpu = False  # the GPU path (configs/qwen3_next.py line 32)
    dsv4._load("sglang.srt.configs.qwen3_vl", srt / "configs/qwen3_vl.py")
    qwen4 = dsv4._load("sglang.srt.configs.qwen4_exp", srt / "configs/qwen4_exp.py")
    if importlib.util.find_spec("msgspec") is None:
        dsv4._stub("msgspec", Struct=_Struct)
    qsa_config = dsv4._load(
        "sglang.srt.layers.attention.qsa.config", srt / "layers/attention/qsa/config.py"
    )
    dsv4._stub(
        "sglang.srt.mem_cache.memory_pool",
        GB=GiB,
        HybridLinearKVPool=_HybridLinearKVPool,
        MambaPool=object,
    )
    dsv4._stub("sglang.srt.constants", GPU_MEMORY_TYPE_KV_CACHE="kv_cache")
    qsa_pool = dsv4._load("sglang.srt.mem_cache.qsa_kv_pool", srt / "mem_cache/qsa_kv_pool.py")
    dsv4._stub(
        "sglang.srt.mem_cache.utils",
        maybe_init_custom_mem_pool=lambda device: (False, None, None),
    )
    dsv4._stub(
        "sglang.srt.utils.torch_memory_saver_adapter",
        TorchMemorySaverAdapter=SimpleNamespace(
            create=lambda enable: SimpleNamespace(region=lambda _tag: nullcontext())
        ),
    )
    ple = dsv4._load("sglang.srt.mem_cache.ple_state_pool", srt / "mem_cache/ple_state_pool.py")
    dsv4._stub(
        "sglang.srt.layers.cp.utils",
        get_glm_dsa_layer_split_effective_num_layers=lambda _kvc, n: n,  # no CP (lines 85-86)
    )
    configurator.get_model = lambda: SimpleNamespace(qsa_indexer_dtype="auto")
    configurator.get_parallel = runtime.get_parallel
    for name in ("is_deepseek_dsa", "is_minimax_sparse", "is_float4_e2m1fn_x2"):
        setattr(configurator, name, lambda *_a: False)
    configurator.compute_page_shard_scratch_bytes = lambda kvc, include_mtp=False: 0
    configurator.mambaish_config = lambda model_config: model_config.hf_text_config
    return {
        "configurator": configurator,
        "qwen4": qwen4,
        "qsa_config": qsa_config,
        "qsa_pool": qsa_pool,
        "ple": ple,
        "schedule": schedule,
        "envs": sys.modules["sglang.srt.environ"].envs,
    }


def _kv_methods(root: Path, mods: dict[str, Any]) -> dict[str, Any]:
    """``KVCacheConfigurator``'s three sizing methods as written, with the context they read."""
    schedule = mods["schedule"]

    def override(_name: str, **values: Any) -> None:
        schedule.__dict__.update(values)

    namespace: dict[str, Any] = {
        "get_schedule": lambda: schedule,
        "get_context": lambda: SimpleNamespace(override=override),
        "get_exec": lambda: SimpleNamespace(
            mamba=SimpleNamespace(
                enable_linear_replayssm_spec=False,
                enable_mamba_extra_buffer=True,
                enable_mamba_extra_buffer_lazy=False,
            )
        ),
        "get_memory": lambda: SimpleNamespace(disable_radix_cache=False),
        "get_spec": lambda: SimpleNamespace(speculative_num_draft_tokens=None),
        "envs": mods["envs"],
        "get_pp_indices": lambda *_a: (0, TINY["num_hidden_layers"]),
        "_pd_prefill_skips_mamba_spec_state": lambda: False,
        "MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO": 3,
        "MAMBA_CACHE_BASE_RATIO_DROP_ON_SKIP": 1,
        "MAMBA_CACHE_V2_ADDITIONAL_RATIO_NO_BUFFER": 1,
        "logger": SimpleNamespace(warning=lambda *_a, **_k: None),
    }
    alloc: dict[str, Any] = {}
    _functions(
        root / "sglang/srt/mem_cache/allocation_sizing.py", ("get_mamba_tracking_slots",), alloc
    )
    namespace.update(alloc)
    _functions(root / "sglang/srt/mem_cache/kv_cache_configurator.py", KV_METHODS, namespace)
    return namespace


def run_case(
    root: Path,
    mods: dict[str, Any],
    tp: list[int],
    name: str,
    rest: int,
    kv_dtype: torch.dtype = torch.bfloat16,
    **text: Any,
) -> None:
    qwen4, schedule = mods["qwen4"], mods["schedule"]
    config = qwen4.Qwen4ExpTextConfig(**{**TINY, **text})
    schedule.max_mamba_cache_size = None
    schedule.max_running_requests = None
    kv = _kv_methods(root, mods)
    params = config.mamba2_cache_params
    this = SimpleNamespace(
        mambaish_config=config,
        pp_size=1,
        model_config=SimpleNamespace(num_hidden_layers=TINY["num_hidden_layers"]),
        fused_entry_bytes=lambda _name: None,
        spec_algorithm=SimpleNamespace(is_none=lambda: True),
        hybrid_gdn_config=config,
        hybrid_kda_config=None,
        extra_mamba_cache_bytes_per_req=0,
        attn_dp_size=1,
    )
    this._calculate_mamba_ratio = lambda: kv["_calculate_mamba_ratio"](this)
    token_rest_gib = kv["_handle_max_mamba_cache"](this, rest / GiB)
    token_rest = int(token_rest_gib * GiB)  # _profile_available_bytes, line 3060
    model_config = SimpleNamespace(
        hf_config=config,
        hf_text_config=config,
        head_dim=config.head_dim,
        v_head_dim=config.head_dim,
        context_len=CONTEXT,
        # ModelConfig.get_num_kv_heads (configs/model_config.py lines 1700-1711), no DCP
        get_num_kv_heads=lambda t, dcp=1: max(1, config.num_key_value_heads // (t // dcp)),
    )
    kvc = SimpleNamespace(
        kv_cache_dtype_str="auto",
        kv_cache_dtype=kv_dtype,
        model_config=model_config,
        layer_info=SimpleNamespace(start_layer=0, end_layer=TINY["num_hidden_layers"]),
        server_args=SimpleNamespace(enable_hisparse=False),
        use_mla_backend=False,
        is_draft_worker=False,
        spec_algorithm=SimpleNamespace(
            is_eagle=lambda: False, is_standalone=lambda: False, is_dflash_family=lambda: False
        ),
        pp_size=1,
        page_size=PAGE,
    )
    schedule.max_total_tokens = None
    pool = mods["configurator"].DefaultPoolConfigurator(kvc)
    tokens = pool.calculate_pool_sizes(token_rest, PAGE).max_total_num_tokens
    this.model_config.context_len = CONTEXT
    this.attn_dp_size = 1
    running = kv["resolve_max_num_reqs"](this, tokens)
    mamba_size = schedule.max_mamba_cache_size
    profile = mods["qsa_config"].parse_qsa_profile(config)
    qsa = mods["qsa_pool"].QSATokenToKVPool(
        size=4096,
        dtype=torch.bfloat16,
        page_size=PAGE,
        head_num=1,
        head_dim=config.head_dim,
        full_attention_layer_ids=config.full_attention_layer_ids,
        device="cpu",
        mamba_pool=None,
        qsa_index_kv_heads=profile.kv_heads,
        qsa_index_head_dim=profile.head_dim,
        qsa_compress_ratio=profile.compress_ratio,
        qsa_token_topk=profile.budget,
        num_request_slots=running + 1,
    )
    ring = sum(t.nbytes for t in qsa.qsa_key_state_buffer_pool) + (
        qsa.qsa_rope_position_buffer.nbytes
    )
    short = mods["ple"].ShortConvPool(
        size=7,
        state_shape=config.short_conv_state_shape,
        layer_ids=config.short_conv_layer_ids,
        dtype=params.dtype.conv,
        device="cpu",
    )
    ngram = mods["ple"].NGramPool(
        size=7, context_len=config.ngram_context_len, eos_token_id=1, device="cpu"
    )
    per_slot = (0 if short.conv_state is None else short.conv_state.nbytes // 8) + (
        0 if ngram.context is None else ngram.context.nbytes // 8
    )
    print(
        f"{name}: mamba_cache_per_req={params.mamba_cache_per_req} "
        f"max_mamba_cache_size={mamba_size} cell={pool._cell_size} tokens={tokens} "
        f"max_running_requests={running} ring_bytes={ring} "
        f"ring_row={ring // (running + 1)} ple_slot={per_slot} "
        f"beside_budget={(mamba_size + 1) * per_slot + ring}"
    )


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else "/tmp/sgl")
    tp = [1]
    schedule = SimpleNamespace(
        max_running_requests=None,
        max_mamba_cache_size=None,
        mamba_full_memory_ratio=0.9,
        max_total_tokens=None,
        page_size=PAGE,
        disable_overlap_schedule=False,
        swa_full_tokens_ratio=None,
        chunked_prefill_size=8192,
    )
    mods = setup(root, tp, schedule)
    run_case(root, mods, tp, "TP 1, 1 GiB", GiB)
    tp[0] = 2
    run_case(root, mods, tp, "TP 2, 1 GiB", GiB)
    tp[0] = 1
    tp[0] = 4
    run_case(root, mods, tp, "TP 4, 4 attention heads, 1 GiB", GiB, num_attention_heads=4)
    tp[0] = 1
    run_case(root, mods, tp, "TP 1, 1 GiB, fp8_e4m3", GiB, torch.float8_e4m3fn)
    run_case(root, mods, tp, "TP 1, 64 MiB", 64 * MiB)
    run_case(root, mods, tp, "TP 1, 1 GiB, PLE on layers 1 and 3", GiB, ple_layer_ids=[1, 3])
    try:
        mods["qsa_config"].parse_qsa_profile(
            mods["qwen4"].Qwen4ExpTextConfig(**{**TINY, "indexer_budget": 16})
        )
    except ValueError as error:
        print(f"indexer_budget 16: ValueError: {error}")


if __name__ == "__main__":
    main()
