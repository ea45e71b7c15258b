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


def _cases() -> list[dict[str, Any]]:
    rng = random.Random(SEED)
    cases: list[dict[str, Any]] = []
    for path, base in BASELINES.items():
        for opt in _options(_command(path)):
            flag = max(opt.opts, key=len)
            if path in SERVERS:  # only what must be refused before anything listens
                pool = [v for v in ALWAYS_INVALID if _must_fail(opt, v)]
            else:
                pool = rng.sample(ALWAYS_INVALID, 2)
                if not isinstance(opt.type, click.Choice):
                    pool += rng.sample(MAYBE_VALID, 3)
            for value in pool:
                cases.append(
                    {
                        "argv": [*base, flag, value],
                        "limit_s": 30,
                        "must_fail": _must_fail(opt, value),
                        "server": path in SERVERS,
                    }
                )
    return cases


@pytest.mark.timeout(1500)
def test_no_traceback_no_hang_no_exit0_on_invalid_flags() -> None:
    cases = _cases()
    outcomes = run_cases(cases, total_timeout_s=1400)
    assert len(outcomes) == len(cases)
    bad = []
    for case, outcome in zip(cases, outcomes, strict=True):
        found = problems(outcome, must_fail=case["must_fail"])
        if case["server"] and outcome.hang:
            found.append("a server started with an invalid value")
        if found:
            bad.append(f"{' '.join(a[:60] for a in outcome.argv)}: {'; '.join(found)}")
    assert not bad, f"{len(bad)} of {len(cases)} cases misbehaved:\n" + "\n".join(bad[:40])
