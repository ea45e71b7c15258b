"""The engine registry (issue #33 step 2): an engine is one folder under ``capacity/engines/`` that
registers its layout and planner; ``calc``'s ``run_layout`` and ``plan``'s ``make_plan`` look it up.

The proof: a fake engine written into a fresh folder (and nowhere else) is found, and both
``run_layout`` and ``make_plan`` go through it. Its arithmetic is the fake's own, so the expected
figures are hand arithmetic on Llama-3.1-8B's config.json (32 layers, 8 KV heads, head_dim 128
= 4096 / 32 heads, bf16): K and V of 2 bytes, 2 x 32 x 8 x 128 x 2 = 131,072 bytes per token.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kvbudget.capacity import engines
from kvbudget.capacity.engines import registry
from kvbudget.capacity.kvbytes import run_layout
from kvbudget.capacity.layouts.base import LAYOUTS
from kvbudget.capacity.plan_types import PLAN_ENGINES, PlanRequest
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model

MODEL = "meta-llama/Llama-3.1-8B"
LLAMA_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # 131,072

#: the whole fake engine: one folder, one ``__init__.py`` that registers it
FAKE_ENGINE = '''
"""A fake engine: one cell per token, K and V of every attention layer; a fixed 1 GiB pool."""

from dataclasses import replace

from kvbudget.capacity.engines.registry import RegisteredEngine, register_engine
from kvbudget.capacity.layouts.base import GroupBytes, LayoutResult, StageBytes
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.spec.layer_runs import LayerIndices

POOL_BYTES = 1 << 30


def _per_token(spec):
    return sum(2 * layer.num_kv_heads * layer.head_dim * 2 for layer in spec.layers)


def layout(spec, load):
    per_token = _per_token(spec)
    group = GroupBytes(
        "full",
        LayerIndices.of(range(spec.num_layers)),
        load.tokens,
        per_token,
        per_token * load.tokens,
        per_token * load.tokens * load.seqs,
    )
    stage = StageBytes(0, 0, spec.num_layers, (group,))
    return LayoutResult("fake", "bf16", load.tokens, load.seqs, 1, 1, load.dp, (stage,))


class FakePlanner:
    pool_without_device = False

    def check_request(self, request):
        if request.tp != 1:
            raise ValueError("tp: the fake engine is one GPU")

    def plan(self, request, model, gpu, weights, max_model_len, device_given):
        per_token = _per_token(model)
        tokens = POOL_BYTES // per_token
        return PlanResult(
            model_id=model.model_id, engine="fake", engine_version="fake 1.0", gpu=gpu,
            tp=1, pp=1, kv_dtype="bf16", max_model_len=max_model_len,
            max_num_batched_tokens=max_model_len, max_num_seqs=1, block_size=1, groups=(),
            group_size=0, num_padding_layers=0, page_size_bytes=per_token, num_blocks=tokens,
            num_usable_blocks=tokens, kv_cache_tokens=tokens,
            max_concurrency=tokens / max_model_len, available_kv_bytes=POOL_BYTES,
            fits=tokens >= max_model_len, needed_bytes=per_token * max_model_len,
            estimated_max_model_len=None, error=None, log_lines=(), kv_bytes_per_token_per_rank=per_token,
            kv_bytes_per_token_replica=per_token, weights=weights, ranks=(),
        )

    def flag_conflicts(self, request):
        if request.block_size is None:
            return []
        return [("block_size", "block_size: the fake engine has no blocks")]


register_engine(RegisteredEngine("fake", layout, FakePlanner()))
'''


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fake engine's folder beside the built-in ones, and the folders scanned again."""
    folder = tmp_path / "fake"
    folder.mkdir()
    (folder / "__init__.py").write_text(textwrap.dedent(FAKE_ENGINE))
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path)])
    monkeypatch.setattr(registry, "_REGISTRY", registry.registered_engines())
    monkeypatch.setattr(registry, "_scanned", [])
    yield
    sys.modules.pop(f"{engines.__name__}.fake", None)


def _llama() -> ModelSpec:
    spec = resolve_model(MODEL).spec
    assert spec is not None
    return spec


def test_every_layout_and_plan_engine_is_registered() -> None:
    found = registry.registered_engines()
    assert set(found) == set(LAYOUTS)
    assert {name for name, e in found.items() if e.planner is not None} == set(PLAN_ENGINES)


def test_an_unknown_engine_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        registry.engine_entry("tgi")
    assert "'tgi' is unknown" in str(caught.value) and "\n" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        registry.engine_planner("llamacpp")
    assert "choose one of sglang, vllm" in str(caught.value)


def test_registering_a_name_twice_is_refused() -> None:
    hf = registry.engine_entry("hf")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_engine(registry.RegisteredEngine("hf", hf.layout))


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_for_calc() -> None:
    assert "fake" in registry.registered_engines()
    layout = run_layout(
        _llama(),
        "fake",  # type: ignore[arg-type]  # a name the Layout type does not list yet
        tokens=1024,
        seqs=2,
        kv_dtype="auto",
        v_dtype=None,
        tp=1,
        pp=1,
        dp=1,
        block_size=None,
    )
    assert layout.engine == "fake"
    assert layout.bytes_per_token == LLAMA_BYTES_PER_TOKEN
    assert layout.total_bytes == LLAMA_BYTES_PER_TOKEN * 1024 * 2  # 268,435,456


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_for_plan() -> None:
    request = PlanRequest(model=MODEL, gpu="H100", max_model_len=4096, block_size=32)
    request = request.model_copy(update={"engine": "fake"})  # past the flag's Literal
    plan = make_plan(request)
    # the fake's 1 GiB pool: 2**30 // 131,072 = 8,192 tokens; 4,096-token sequences: 2 at once
    assert (plan.engine, plan.engine_version) == ("fake", "fake 1.0")
    assert (plan.kv_cache_tokens, plan.max_concurrency, plan.fits) == (8192, 2.0, True)
    # the shared steps still run: the fake's flag conflict is noted, its request check is asked
    assert plan.notes == ("block_size: the fake engine has no blocks",)
    assert engine_flag_conflicts(request) == [
        ("block_size", "block_size: the fake engine has no blocks")
    ]
    with pytest.raises(ValueError, match="one GPU"):
        make_plan(request.model_copy(update={"tp": 2}))
