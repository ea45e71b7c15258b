"""Seeded fuzz of every command's flags: hostile values, one flag at a time, from a fast
baseline command line; run in one resource-limited process (driver.py).

Judged: no traceback or InternalError, no hang (each case has a time limit), a one-line
``Kind: message`` error on every non-zero exit, and never exit 0 for a value that is invalid
for any flag (nan, inf, a 400-digit number, 5,000 characters).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import click
import pytest

from kvbudget.cli.main import cli
from tests.fuzz.harness import problems, run_cases
from tests.unit.calc.helpers_calc import CALC_LLAMA_8B

SEED = 20261201
#: the driver runs each case in a fresh temporary directory: file arguments are absolute
DEMO = str(Path(__file__).resolve().parents[2] / "examples" / "acceptance-demo.yaml")
#: hostile values tried for every option; the first group is invalid for every flag
ALWAYS_INVALID = ["nan", "inf", "-inf", "9" * 400, "x" * 5000]
MAYBE_VALID = [
    "-1",
    "0",
    "1e18",
    "1e-300",
    "",
    "-0",
    "1.5",
    "\u00e9\udcff".encode("utf-8", "surrogateescape").decode("utf-8", "replace"),
    "../../etc/passwd",
    "1K",
]
CLOSED = "http://127.0.0.1:9"  # nothing listens there: connect refused at once

BASELINES: dict[str, list[str]] = {
    "calc": ["calc", *CALC_LLAMA_8B],
    "models": ["models"],
    "gpus": ["gpus"],
    "plan": ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM-80GB"],
    "sim": ["sim", "--requests", "8", "--input-tokens", "64", "--output-tokens", "8"],
    "bench": [
        "bench",
        "--base-url",
        CLOSED,
        "--model",
        "m",
        "--num-requests",
        "2",
        "--no-progress",
        "--connect-timeout",
        "2",
        "--timeout",
        "2",
    ],
    "calibrate": ["calibrate", "--base-url", CLOSED, "--model", "m", "--out", "{TMP}/p.json"],
    "audit reuse": ["audit", "reuse", "--target", "sim"],
    "audit isolation": ["audit", "isolation", "--target", "sim", "--trials", "4"],
    "report": ["report", "{TMP}/missing/report.json"],
    "accept": ["accept", "--validate", DEMO],
    "deploy": ["deploy", DEMO, "--out", "{TMP}/deploy"],
    "fingerprint": ["fingerprint", "--model", "meta-llama/Llama-3.1-8B"],
    # servers: only values that must be refused before anything listens
    "serve": ["serve", "--port", "0"],
    "web": ["web", "--port", "0"],
}
SERVERS = {"serve", "web"}


def _command(path: str) -> click.Command:
    ctx = click.Context(cli)
    cmd: click.Command | None = cli
    for name in path.split():
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(ctx, name)
    assert cmd is not None
    return cmd


def _options(cmd: click.Command) -> list[click.Option]:
    out = []
    for p in cmd.params:
        if isinstance(p, click.Option) and not p.is_flag and p.name not in {"help"}:
            out.append(p)
    return out


def _must_fail(opt: click.Option, value: str) -> bool:
    """nan, inf and 400 digits are invalid for every number; 5,000 characters for every text
    or path value."""
    numeric = isinstance(opt.type, click.types.IntParamType | click.types.FloatParamType)
    return (numeric and value in ALWAYS_INVALID[:4]) or value == ALWAYS_INVALID[4]


def _cases(
    baselines: dict[str, list[str]] | None = None, *, num_valid: int = 3, limit_s: float = 30
) -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    cases: list[dict[str, Any]] = []
    for path, base in (BASELINES if baselines is None else baselines).items():
        for opt in _options(_command(path)):
            flag = max(opt.opts, key=len)
            if path in SERVERS:  # only what must be refused before anything listens
                pool = [v for v in ALWAYS_INVALID if _must_fail(opt, v)]
            else:
                pool = rng.sample(ALWAYS_INVALID, 2)
                if not isinstance(opt.type, click.Choice):
                    pool += rng.sample(MAYBE_VALID, num_valid)
            for value in pool:
                cases.append(
                    {
                        "argv": [*base, flag, value],
                        "limit_s": limit_s,
                        "must_fail": _must_fail(opt, value),
                        "server": path in SERVERS,
                    }
                )
    return cases


def _judge(cases: list[dict[str, Any]], total_timeout_s: float) -> None:
    outcomes = run_cases(cases, total_timeout_s=total_timeout_s)
    assert len(outcomes) == len(cases)
    bad = []
    for case, outcome in zip(cases, outcomes, strict=True):
        found = problems(outcome, must_fail=case["must_fail"])
        if case["server"] and outcome.hang:
            found.append("a server started with an invalid value")
        if found:
            bad.append(f"{' '.join(a[:60] for a in outcome.argv)}: {'; '.join(found)}")
    assert not bad, f"{len(bad)} of {len(cases)} cases misbehaved:\n" + "\n".join(bad[:40])


@pytest.mark.timeout(1500)
def test_no_traceback_no_hang_no_exit0_on_invalid_flags() -> None:
    _judge(_cases(), 1400)


#: a one-point grid: the sweep baseline joins a Ray "cluster" where nothing listens, which
#: kvbudget refuses after a plain TCP connect (no Ray start per case)
SWEEP_GRID = {
    "base": {
        "model": "meta-llama/Llama-3.1-8B",
        "max_model_len": 4096,
        "workload": {
            "num_requests": 4,
            "input_tokens": {"kind": "fixed", "value": 64},
            "output_tokens": {"kind": "fixed", "value": 4},
        },
    },
    "grid": {"gpu": ["H100-SXM"], "rate_per_s": [5]},
    "slos": [{"name": "chat", "ttft_s": {"p99": 0.5}}],
}


@pytest.mark.timeout(900)
def test_sweep_and_canary_flags(tmp_path_factory: pytest.TempPathFactory) -> None:
    """``sweep`` and ``canary`` (issue 16): the canary against a real, small accepted baseline
    so that flag values reach the run, not only the parser."""
    import yaml
    from click.testing import CliRunner

    from kvbudget.cli.accept import accept
    from tests.unit.deploy.conftest import small_plan_data

    root = tmp_path_factory.mktemp("fuzz-sweep-canary")
    plan = small_plan_data()
    plan["load"]["max_requests_per_cell"] = 3
    plan_path = root / "plan.yaml"
    plan_path.write_text(yaml.safe_dump(plan), encoding="utf-8")
    accepted = CliRunner().invoke(accept, [str(plan_path), "--out", str(root / "base"), "--quiet"])
    assert accepted.exit_code in (0, 1), accepted.output  # a verdict, not an error
    grid = root / "grid.yaml"
    grid.write_text(yaml.safe_dump(SWEEP_GRID), encoding="utf-8")
    baselines = {
        "sweep": ["sweep", str(grid), "--out", "{TMP}/sweep", "--ray-address", "127.0.0.1:9"],
        "canary": [
            *("canary", str(plan_path), "--baseline-report", str(root / "base" / "report.json")),
            *("--out", "{TMP}/canary", "--cells", "short/single", "--num-requests", "2"),
        ],
    }
    cases = _cases(baselines, num_valid=3, limit_s=60)
    assert len(cases) >= 30  # every option of both commands, several values each
    _judge(cases, 800)
