"""The engine registry (issue #33 steps 2 and 8): an engine is one folder under ``capacity/engines/``
that registers its name, layout and planner, and one module under ``deploy/engines/`` that
registers how ``deploy`` renders it; nothing else names it.

The proof: a fake engine written into fresh folders (and nowhere else) is found, takes its name in
``calc --engine`` and ``plan --engine`` (the choices are the registered names), passes the plan
request's validation, and goes through ``run_layout``, ``make_plan``, the ``plan`` command and a
``deploy`` render. Its arithmetic is the fake's own, so the expected figures are hand arithmetic
on Llama-3.1-8B's config.json (32 layers, 8 KV heads, head_dim 128 = 4096 / 32 heads, bf16): K
and V of 2 bytes, 2 x 32 x 8 x 128 x 2 = 131,072 bytes per token.
"""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget import engine_name
from kvbudget.capacity import dtypes, engines
from kvbudget.capacity.engines import registry
from kvbudget.capacity.kvbytes import run_layout
from kvbudget.capacity.plan_types import PlanRequest
from kvbudget.capacity.planner import engine_flag_conflicts, make_plan
from kvbudget.cli.main import main
from kvbudget.deploy import engines as deploy_engines
from kvbudget.deploy.engines import registry as deploy_registry
from kvbudget.errors import ConfigError
from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model
from kvbudget.web import backend as web_backend
from tests.unit.deploy.conftest import demo_plan_data

MODEL = "meta-llama/Llama-3.1-8B"
LLAMA_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # 131,072

#: the fake engine's capacity folder: one ``__init__.py`` that registers it
FAKE_ENGINE = '''
"""A fake engine: one cell per token, K and V of every attention layer; a fixed 1 GiB pool."""

from dataclasses import replace

from kvbudget.capacity.engines.registry import RegisteredEngine, register_engine
from kvbudget.capacity.layouts.base import GroupBytes, LayoutResult, StageBytes
from kvbudget.capacity.plan_types import PlanResult
from kvbudget.spec.layer_indices import LayerIndices

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


register_engine(RegisteredEngine("fake", layout, FakePlanner(), aliases=("fake-server",), kv_dtypes=("auto", "bfloat16")))
'''

#: the fake engine as ``deploy`` renders it: one module that registers it
FAKE_DEPLOY = '''
"""The fake engine's server: ``fake-server MODEL --port N --slots S``."""

from kvbudget.deploy.engine_args import lock_value
from kvbudget.deploy.engines.registry import DeployEngine, register_deploy_engine


def argv(lock, model, port, sources):
    slots = lock_value(lock, "max_num_seqs") or 1
    sources["--slots"] = "lock.max_num_seqs"
    return ["fake-server", model, "--port", str(port), "--slots", str(slots)]


register_deploy_engine(
    DeployEngine(
        "fake", argv, image="fake/server:{version}", health_path="/ready",
        series={"waiting": "fake:queue"},
    )
)
'''


@pytest.fixture
def fake_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fake engine's folders beside the built-in ones, and the folders scanned again (the
    registers are copies, so the fake leaves with the test)."""
    folder = tmp_path / "capacity" / "fake"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(textwrap.dedent(FAKE_ENGINE))
    (tmp_path / "deploy").mkdir()
    (tmp_path / "deploy" / "fake.py").write_text(textwrap.dedent(FAKE_DEPLOY))
    monkeypatch.setattr(dtypes, "ENGINE_DTYPES", dict(dtypes.ENGINE_DTYPES))
    monkeypatch.setattr(dtypes, "_RULES", dict(dtypes._RULES))
    monkeypatch.setattr(engine_name, "ALIASES", dict(engine_name.ALIASES))
    monkeypatch.setattr(engine_name, "REPORTED", dict(engine_name.REPORTED))
    monkeypatch.setattr(engines, "__path__", [*engines.__path__, str(tmp_path / "capacity")])
    monkeypatch.setattr(
        deploy_engines, "__path__", [*deploy_engines.__path__, str(tmp_path / "deploy")]
    )
    monkeypatch.setattr(registry, "_REGISTRY", registry.registered_engines())
    monkeypatch.setattr(registry, "_scanned", [])
    deploy_registry.deploy_engines()
    monkeypatch.setattr(deploy_registry, "_REGISTRY", dict(deploy_registry._REGISTRY))
    monkeypatch.setattr(deploy_registry, "_scanned", [])
    registry.registered_engines()  # the folders scanned: the fake's name registered
    yield
    sys.modules.pop(f"{engines.__name__}.fake", None)
    sys.modules.pop(f"{deploy_engines.__name__}.fake", None)


def _llama() -> ModelSpec:
    spec = resolve_model(MODEL).spec
    assert spec is not None
    return spec


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``kvbudget ARGV`` in process: (exit code, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def test_the_built_in_engines_are_registered() -> None:
    found = registry.registered_engines()
    assert tuple(found) == ("hf", "vllm", "sglang", "llamacpp")  # calc --engine's order
    assert registry.planned_engines() == ("vllm", "sglang")
    assert engine_name.engine_names() == ("vllm", "sglang", "llamacpp")  # hf serves nothing
    assert deploy_registry.deploy_engines() == engine_name.engine_names()


def test_an_unknown_engine_is_refused_in_one_line() -> None:
    with pytest.raises(ConfigError) as caught:
        registry.engine_entry("tgi")
    assert str(caught.value) == "engine: 'tgi' is unknown; choose one of hf, vllm, sglang, llamacpp"
    with pytest.raises(ConfigError) as caught:
        registry.engine_planner("llamacpp")
    assert "choose one of vllm, sglang" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        deploy_registry.deploy_engine("tgi")
    assert str(caught.value) == (
        "lock.engine.name: kvbudget deploy renders vllm, sglang or llamacpp (got 'tgi'); "
        "fix the engine name"
    )


def test_registering_a_name_twice_is_refused() -> None:
    hf = registry.engine_entry("hf")
    with pytest.raises(ValueError, match="registered twice"):
        registry.register_engine(registry.RegisteredEngine("hf", hf.layout))
    with pytest.raises(ValueError, match="registered to 'llamacpp'"):
        engine_name.register_engine_name("other", aliases=("llama.cpp",))


def test_a_request_names_only_a_planned_engine() -> None:
    with pytest.raises(ValueError, match="'llamacpp' is no engine kvbudget plans; choose one of"):
        PlanRequest(model=MODEL, engine="llamacpp")


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_name() -> None:
    assert engine_name.engine_names()[-1] == "fake"
    assert engine_name.engine_of("Fake-Server 1.0") == "fake"  # its registered alias
    assert engine_name.parse_engine("fake", "lock.engine.name") == "fake"


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_for_calc(capsys: pytest.CaptureFixture[str]) -> None:
    layout = run_layout(
        _llama(),
        "fake",
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
    argv = ["calc", "--model", MODEL, "--engine", "fake", "--tokens", "1024", "--seqs", "2"]
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["engine"], doc["bytes_per_token"]) == ("fake", LLAMA_BYTES_PER_TOKEN)
    code, out, _ = run_cli(["calc", "--help"], capsys)
    assert "[hf|vllm|sglang|llamacpp|fake]" in out


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_for_the_web_page() -> None:
    """The page's engine menu and its checks come from the registry (``/api/meta``
    ``engine_choices``): the fake is offered under its own name, as an engine ``plan`` models
    (a KV-memory override applies) without vLLM's ``max_model_len auto``."""
    choices = {choice["id"]: choice for choice in web_backend.meta()["engine_choices"]}
    assert list(choices) == ["hf", "vllm", "sglang", "llamacpp", "fake"]
    assert choices["fake"] == {
        "id": "fake",
        "label": "fake",
        "plans": True,
        "auto_fit": False,
        "default_version": None,
        "kv_dtype_since": {},
    }
    assert [c for c, v in choices.items() if v["plans"]] == ["vllm", "sglang", "fake"]
    assert [c for c, v in choices.items() if v["auto_fit"]] == ["vllm"]


@pytest.mark.usefixtures("fake_engine")
def test_a_new_folder_is_an_engine_for_plan(capsys: pytest.CaptureFixture[str]) -> None:
    request = PlanRequest(model=MODEL, gpu="H100", max_model_len=4096, block_size=32, engine="fake")
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
    argv = [
        "plan",
        "--model",
        MODEL,
        "--engine",
        "fake",
        "--gpu",
        "H100",
        "--max-model-len",
        "4096",
    ]
    code, out, err = run_cli([*argv, "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["engine"], doc["kv_cache_tokens"]) == ("fake", 8192)
    code, out, err = run_cli(argv, capsys)  # the text rendering too
    assert code == 0, err
    assert "8,192" in out


def _fake_plan_file(tmp_path: Path) -> Path:
    data = demo_plan_data()
    data["lock"].update({"engine": {"name": "fake", "version": "1.0"}})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


@pytest.mark.usefixtures("fake_engine")
def test_a_new_module_is_an_engine_for_deploy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(["deploy", str(_fake_plan_file(tmp_path)), "--out", str(out)], capsys)
    assert code == 0, err
    deployment = yaml.safe_load((out / "deployment.yaml").read_text(encoding="utf-8"))
    container: dict[str, Any] = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][0] == "fake-server", container["command"]
    assert container["image"] == "fake/server:1.0"
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"


def test_an_engine_deploy_does_not_render_is_refused_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(["deploy", str(_fake_plan_file(tmp_path)), "--out", str(out)], capsys)
    assert code != 0 and len(err.splitlines()) == 1, err
    assert "lock.engine.name" in err and "'fake'" in err and "vllm, sglang or llamacpp" in err
