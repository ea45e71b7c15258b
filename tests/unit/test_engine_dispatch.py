"""Every place that dispatches on an engine handles each :data:`EngineName` (and each ``calc``
layout) or refuses it in one line (issue #33 step 1: one name, parsed once at the boundary).

The names are registered (``engine_name.register_engine_name``, ``capacity/engines/``), and the
code that differs per engine asks the engine's registered entry (``capacity/engines/``,
``deploy/engines/``) instead of comparing names; ``tests/unit/plan/test_engine_registry.py``
adds a fake engine that way. These tests are the runtime side: a new member without a branch, or a
branch that falls through to another engine's, fails here.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.capacity.dtypes import ENGINE_DTYPES, get_kv_dtype
from kvbudget.capacity.engines.registry import layout_names, parse_layout, planned_engines
from kvbudget.capacity.kvbytes import calc_model
from kvbudget.capacity.plan_types import planned_engine
from kvbudget.cli.main import main
from kvbudget.cli.sim import SIM_ENGINES
from kvbudget.deploy.engines.registry import deploy_engines
from kvbudget.engine_name import REPORTED, EngineName, engine_names
from kvbudget.errors import ConfigError
from tests.unit.deploy.conftest import demo_plan_data

MODEL = "meta-llama/Llama-3.1-8B"
ENGINE_NAMES = engine_names()
LAYOUTS = layout_names()
PLAN_ENGINES = planned_engines()


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """``kvbudget ARGV`` in process: (exit code, stdout, stderr)."""
    try:
        main(argv)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out, captured.err.strip()


def assert_one_line_refusal(code: int, err: str, *needles: str) -> None:
    assert code == 2, err
    assert len(err.splitlines()) == 1, err
    assert "Traceback" not in err and "InternalError" not in err
    for needle in needles:
        assert needle in err, err


def test_the_layouts_are_transformers_and_the_engines() -> None:
    assert ("hf", *ENGINE_NAMES) == LAYOUTS


def test_every_table_keyed_by_engine_has_every_engine() -> None:
    assert set(REPORTED) == set(deploy_engines()) == set(ENGINE_NAMES)
    assert tuple(ENGINE_DTYPES) == LAYOUTS
    # the engines plan and sim model are engines (the others they refuse, tested below)
    assert set(PLAN_ENGINES) <= set(ENGINE_NAMES)
    assert set(SIM_ENGINES) <= set(ENGINE_NAMES)
    assert [planned_engine(name) for name in LAYOUTS] == [None, "vllm", "sglang", None]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_calc_applies_every_layout(layout: str) -> None:
    # Llama-3.1-8B's config.json: 32 layers, 8 KV heads, head_dim 128 (4096 / 32 heads); K and V
    # of 2-byte elements (bf16 on auto; llama.cpp's default cache type f16):
    # 2 x 32 x 8 x 128 x 2 = 131,072 bytes per token, x 1024 tokens = 134,217,728 per sequence
    result = calc_model(MODEL, engine=layout, tokens=1024, seqs=2)
    assert (result.engine, result.status) == (layout, "exact")
    assert (result.bytes_per_token, result.bytes_per_sequence) == (131_072, 134_217_728)
    assert result.to_dict()["engine"] == layout  # the JSON keeps the flag's spelling
    assert (
        get_kv_dtype("auto", engine=parse_layout(layout), model_dtype="bfloat16").element_bytes == 2
    )


def test_calc_refuses_an_unknown_layout_in_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        calc_model(MODEL, engine="llama.cpp", tokens=1024)
    assert err.value.one_line() == (
        "ConfigError: engine: 'llama.cpp' is unknown; choose one of hf, vllm, sglang, llamacpp"
    )


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_plan_plans_or_refuses_each_engine(
    engine: EngineName, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run_cli(
        ["plan", "--model", MODEL, "--engine", engine, "--gpu", "H100", "--json"], capsys
    )
    if engine in PLAN_ENGINES:
        assert code == 0, err
        assert json.loads(out)["engine"] == engine
    else:  # llama.cpp's slots are no block pool to plan
        assert_one_line_refusal(code, err, "--engine", engine)


@pytest.mark.parametrize("engine", [name for name in ENGINE_NAMES if name not in SIM_ENGINES])
def test_sim_refuses_the_engines_it_does_not_step(
    engine: EngineName, capsys: pytest.CaptureFixture[str]
) -> None:
    # the engines it does step run in tests/unit/sim (test_sim_cli, test_sim_slots_cli)
    code, _, err = run_cli(["sim", "--engine", engine, "--requests", "2"], capsys)
    assert_one_line_refusal(code, err, "--engine", engine)


def _plan_file(tmp_path: Path, engine: EngineName, **lock: Any) -> Path:
    data = demo_plan_data()
    engine_lock: dict[str, Any] = {"name": REPORTED[engine]}  # llama.cpp as it reports itself
    if engine != "llamacpp":  # a build number (b4500) is no version the memory budget reads
        engine_lock["version"] = {"vllm": "0.11.0", "sglang": "0.5.4"}[engine]
    data["lock"].update({"engine": engine_lock, **lock})
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


#: each engine's launch command, as its own docs start it (vLLM `vllm serve`, SGLang
#: `python3 -m sglang.launch_server`, llama.cpp `llama-server`)
LAUNCH = {
    "vllm": "vllm serve",
    "sglang": "python3 -m sglang.launch_server",
    "llamacpp": "llama-server",
}


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_deploy_renders_every_engine_on_one_node(
    engine: EngineName, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code, _, err = run_cli(["deploy", str(_plan_file(tmp_path, engine)), "--out", str(out)], capsys)
    assert code == 0, err
    deployment = yaml.safe_load((out / "deployment.yaml").read_text(encoding="utf-8"))
    command = " ".join(deployment["spec"]["template"]["spec"]["containers"][0]["command"])
    assert command.startswith(LAUNCH[engine]), command


@pytest.mark.parametrize("engine", ENGINE_NAMES)
def test_deploy_spreads_each_engine_over_nodes_or_refuses(
    engine: EngineName, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # TP 8 x PP 2 = 16 GPUs over 8-GPU nodes: a leader and one worker
    lock = {
        "tensor_parallel": 8,
        "pipeline_parallel": 2,
        "gpu": {"type": "H100-SXM-80GB", "count": 16},
    }
    out = tmp_path / "out"
    argv = ["deploy", str(_plan_file(tmp_path, engine, **lock)), "--out", str(out)]
    code, _, err = run_cli([*argv, "--gpus-per-node", "8"], capsys)
    if engine == "llamacpp":  # llama-server has no tensor/pipeline parallel flags
        assert code != 0 and len(err.splitlines()) == 1, err
        assert "lock.tensor_parallel" in err and "Traceback" not in err
        return
    assert code == 0, err
    lws = yaml.safe_load((out / "leaderworkerset.yaml").read_text(encoding="utf-8"))
    leader = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]["containers"][0]
    command = " ".join(leader["command"])
    # vLLM joins its nodes over Ray; SGLang with its own --nnodes/--node-rank flags
    wanted = {"vllm": "--distributed-executor-backend ray", "sglang": "--nnodes 2"}[engine]
    assert wanted in command, command
