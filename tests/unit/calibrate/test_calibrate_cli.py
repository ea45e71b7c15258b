"""`kvbudget calibrate` command line: help and one-line errors (no engine needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", "calibrate", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_help_names_the_main_options() -> None:
    r = run("--help")
    assert r.returncode == 0
    for flag in ("--base-url", "--model", "--metrics-url", "--out", "--validate"):
        assert flag in r.stdout


def test_unset_api_key_variable_is_one_line_error(tmp_path: Path) -> None:
    # the output path is the test's own: a fixed one is locked by any other run writing it
    r = run(
        "--base-url",
        "http://127.0.0.1:9",
        "--model",
        "m",
        "--out",
        str(tmp_path / "never.json"),
        "--api-key-env",
        "KVBUDGET_TEST_UNSET_VARIABLE",
    )
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ConfigError:")
    assert lines[0].startswith("ConfigError: --api-key-env: the environment variable it names")
    assert "KVBUDGET_TEST_UNSET_VARIABLE" not in lines[0]  # never echoed (issue 30)


def test_unreachable_engine_is_one_line_error(tmp_path: Path) -> None:
    # port 9 (discard) on loopback: nothing listens; the series cannot start
    out = str(tmp_path / "never.json")
    r = run("--base-url", "http://127.0.0.1:9", "--model", "m", "--out", out)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("TargetError:") and "--base-url" in lines[0]
