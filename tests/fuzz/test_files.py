"""Seeded fuzz of the files kvbudget reads: model config.json files (calc, plan) and acceptance
plan files (accept --validate, then a short run of the mutants that validate).

Judged as the flag fuzz is: no traceback or InternalError, no hang, one-line errors; the
known-hostile files (alias bomb, cycle, UTF-16, invalid UTF-8, 1,000-deep nesting) must fail.
"""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fuzz.harness import problems, run_cases

SEED = 4242
REPO = Path(__file__).resolve().parents[2]
MODELS = REPO / "src" / "kvbudget" / "spec" / "catalog" / "models"
HOSTILE_JSON: list[Any] = [
    -1,
    0,
    10**400,
    1e18,
    1e308,
    0.5,
    "x",
    "",
    [],
    {},
    None,
    True,
    "nan",
    [1, 2],
    {"a": 1},
    2**63,
]
DEEP = "[" * 1000 + "]" * 1000
LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)


def _leaves(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out.append((*prefix, k))
            out.extend(_leaves(v, (*prefix, k)))
    elif isinstance(data, list):
        for i, v in enumerate(data[:3]):
            out.append((*prefix, i))
            out.extend(_leaves(v, (*prefix, i)))
    return out


def _set(data: Any, path: tuple[Any, ...], value: Any) -> None:
    for key in path[:-1]:
        data = data[key]
    data[path[-1]] = value


def _config_cases(tmp: Path, rng: random.Random) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    files = sorted(MODELS.glob("*.json"))
    for n in range(60):
        base = json.loads(rng.choice(files).read_text())
        config = base.get("config", base)
        mutated = copy.deepcopy(config)
        for _ in range(rng.randint(1, 3)):
            paths = _leaves(mutated)
            if not paths:
                break
            path = rng.choice(paths)
            if rng.random() < 0.2:
                parent = mutated
                for key in path[:-1]:
                    parent = parent[key]
                if isinstance(parent, dict):
                    parent.pop(path[-1], None)
                continue
            _set(mutated, path, copy.deepcopy(rng.choice(HOSTILE_JSON)))
        path = tmp / f"config-{n}.json"
        path.write_text(json.dumps(mutated))
        cases.append(
            {
                "argv": ["calc", "--model", str(path), "--tokens", "4096"],
                "limit_s": 30,
                "must_fail": False,
            }
        )
        if n % 3 == 0:
            cases.append(
                {
                    "argv": ["plan", "--model", str(path), "--gpu", "H100-SXM-80GB"],
                    "limit_s": 60,
                    "must_fail": False,
                }
            )
    hostile = {
        "deep.json": DEEP.encode(),
        "utf16.json": json.dumps({"model_type": "llama"}).encode("utf-16"),
        "latin.json": b'{"model_type": "ll\xffama"}',
        "empty.json": b"",
        "list.json": b"[1, 2]",
        "layers.json": json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2**31,  # one past the bound (docs/limits.md)
                "hidden_size": 4096,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
            }
        ).encode(),
        "intermediate.json": json.dumps(
            {
                "model_type": "llama",
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
                "intermediate_size": [],
            }
        ).encode(),
    }
    for name, data in hostile.items():
        path = tmp / name
        path.write_bytes(data)
        cases.append(
            {
                "argv": ["calc", "--model", str(path), "--tokens", "4096"],
                "limit_s": 30,
                "must_fail": True,
            }
        )
    huge = tmp / "huge-layers.json"  # 10^8 layers are answered per run of layers (issue 16)
    config = json.loads(hostile["layers.json"])
    huge.write_text(json.dumps({**config, "num_hidden_layers": 10**8}))
    for argv in (
        ["calc", "--model", str(huge), "--tokens", "4096"],
        ["plan", "--model", str(huge), "--gpu", "H100-SXM-80GB"],
    ):
        cases.append({"argv": argv, "limit_s": 60, "must_fail": False})
    return cases


def _small_plan() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    load = data["load"]
    load.update(repetitions=1, max_requests_per_cell=4)
    load["warmup"] = {"requests": 1, "input_tokens": 16, "output_tokens": 4}
    for tier in load["tiers"].values():
        tier.update(min_tokens=16, max_tokens=64, output_tokens=4)
    for tier in load["concurrency"].values():
        tier.update(duration_s=2)
    data["comparisons"] = []
    data["audits"] = {"isolation": False, "reuse": False}
    return data


def _plan_cases(tmp: Path, rng: random.Random) -> list[dict[str, Any]]:
    cases: list[dict[str, Any]] = []
    base = _small_plan()
    runs = 0
    for n in range(80):
        plan = copy.deepcopy(base)
        path_value = rng.choice(_leaves(plan))
        _set(plan, path_value, copy.deepcopy(rng.choice(HOSTILE_JSON)))
        path = tmp / f"plan-{n}.yaml"
        path.write_text(yaml.safe_dump(plan))
        cases.append(
            {"argv": ["accept", str(path), "--validate"], "limit_s": 30, "must_fail": False}
        )
        if runs < 8 and n % 10 == 0:
            runs += 1
            cases.append(
                {
                    "argv": ["accept", str(path), "--out", "{TMP}/out", "--quiet"],
                    "limit_s": 240,
                    "must_fail": False,
                }
            )
    for name, data in _hostile_yaml(base, prefix="", anchor_key="name").items():
        path = tmp / name
        path.write_bytes(data)
        cases.append(
            {"argv": ["accept", str(path), "--validate"], "limit_s": 30, "must_fail": True}
        )
        cases.append({"argv": ["sim", "--scenario", str(path)], "limit_s": 30, "must_fail": True})
    return cases


def _hostile_yaml(valid: dict[str, Any], *, prefix: str, anchor_key: str) -> dict[str, bytes]:
    """File name -> bytes of the YAML files every YAML reader must refuse in one line: an alias
    bomb, a cyclic alias, deep nesting, ``valid`` in UTF-16 and with invalid UTF-8 appended, and
    a bare scalar."""
    return {
        f"{prefix}laughs.yaml": LAUGHS.encode(),
        f"{prefix}cycle.yaml": f"{anchor_key}: &a [*a]\n".encode(),
        f"{prefix}deep.yaml": DEEP.encode(),
        f"{prefix}utf16.yaml": yaml.safe_dump(valid).encode("utf-16"),
        f"{prefix}latin.yaml": yaml.safe_dump(valid).encode() + b"\nnote: \xff\xfe\n",
        f"{prefix}scalar.yaml": b"just text\n",
    }


@pytest.mark.timeout(1500)
def test_config_and_plan_files(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    cases = _config_cases(tmp_path, rng) + _plan_cases(tmp_path, rng)
    outcomes = run_cases(cases, total_timeout_s=1400)
    assert len(outcomes) == len(cases)
    bad = []
    for case, outcome in zip(cases, outcomes, strict=True):
        found = problems(outcome, must_fail=case["must_fail"])
        if found:
            bad.append(f"{' '.join(a[-60:] for a in outcome.argv)}: {'; '.join(found)}")
    assert not bad, f"{len(bad)} of {len(cases)} cases misbehaved:\n" + "\n".join(bad[:40])


def _grid_cases(tmp: Path, rng: random.Random) -> list[dict[str, Any]]:
    """``kvbudget sweep`` grid files (issue 16): mutants of a one-point grid, and the hostile
    files. The grid is checked before Ray is joined, and the address is one where nothing
    listens, so a grid that passes ends in one TargetError line without starting Ray."""
    from tests.fuzz.test_cli_flags import SWEEP_GRID

    def argv(path: Path) -> list[str]:
        return ["sweep", str(path), "--out", "{TMP}/sweep", "--ray-address", "127.0.0.1:9"]

    cases: list[dict[str, Any]] = []
    for n in range(40):
        grid = copy.deepcopy(SWEEP_GRID)
        for _ in range(rng.randint(1, 2)):
            _set(grid, rng.choice(_leaves(grid)), copy.deepcopy(rng.choice(HOSTILE_JSON)))
        path = tmp / f"grid-{n}.yaml"
        path.write_text(yaml.safe_dump(grid))
        cases.append({"argv": argv(path), "limit_s": 60, "must_fail": True})  # never runs
    for name, data in _hostile_yaml(SWEEP_GRID, prefix="g-", anchor_key="base").items():
        path = tmp / name
        path.write_bytes(data)
        cases.append({"argv": argv(path), "limit_s": 60, "must_fail": True})
        # the same bytes as every JSON file a command reads: a result document (report,
        # deploy), a timing profile (sim), a fingerprint (--compare); bench --resume's run.json: tests/integration/load/test_bench_resume_corrupt.py
        doc = tmp / f"{name}.json"
        doc.write_bytes(data)
        for command in (
            ["report", str(doc)],
            ["deploy", str(doc), "--out", "{TMP}/deploy"],
            ["sim", "--requests", "2", "--input-tokens", "8", "--output-tokens", "2",
             "--timing-profile", str(doc)],
            ["fingerprint", "--model", "meta-llama/Llama-3.1-8B", "--compare", str(doc)],
        ):  # fmt: skip
            cases.append({"argv": command, "limit_s": 60, "must_fail": True})
    return cases


@pytest.mark.timeout(900)
def test_sweep_grid_and_json_input_files(tmp_path: Path) -> None:
    cases = _grid_cases(tmp_path, random.Random(SEED))
    outcomes = run_cases(cases, total_timeout_s=800)
    assert len(outcomes) == len(cases)
    bad = []
    for case, outcome in zip(cases, outcomes, strict=True):
        found = problems(outcome, must_fail=case["must_fail"])
        if found:
            bad.append(f"{' '.join(a[-60:] for a in outcome.argv)}: {'; '.join(found)}")
    assert not bad, f"{len(bad)} of {len(cases)} cases misbehaved:\n" + "\n".join(bad[:40])
