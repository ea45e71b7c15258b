"""One-line errors (issue 30 item 9): the kind is printed once, an echoed value is cut with an
ellipsis and its length, over the CLI's own error paths."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from kvbudget.errors import ConfigError, SpecError, cap_long_runs, shown_value

REPO = Path(__file__).resolve().parents[2]
DOUBLE = re.compile(r"^(\w+Error): (\w+Error): ")
LONG = "x" * 5000


def test_a_message_built_from_another_errors_line_has_one_kind() -> None:
    inner = SpecError("model: 'm' is not a file")
    assert SpecError(inner.one_line()).one_line() == "SpecError: model: 'm' is not a file"
    assert ConfigError(f"{inner.one_line()} (more)").one_line() == (
        "ConfigError: model: 'm' is not a file (more)"
    )
    # a field that merely ends in "Error" is not a kind
    assert ConfigError("MyError: x").one_line() == "ConfigError: MyError: x"


def test_echoed_values_are_cut_with_the_length() -> None:
    assert shown_value(LONG) == "'" + "x" * 60 + "'... (5,000 characters)"
    assert shown_value("short") == "'short'"
    assert shown_value(list(range(100))).endswith("... (390 characters)")
    assert cap_long_runs(f"--tp: {LONG} is bad") == f"--tp: {'x' * 60}... (5,000 characters) is bad"
    assert ConfigError(f"--tp: {LONG!r} is bad").one_line().endswith("(5,002 characters) is bad")


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=cwd,
    )


@pytest.mark.timeout(300)
def test_cli_error_paths_print_one_kind_and_no_long_value(tmp_path: Path) -> None:
    plan = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    plan["lock"]["model"]["id"] = "nonexistent/model-x"  # deploy's weights lookup re-raises
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(plan))
    cases = [
        ["deploy", "p.yaml", "--out", "d"],
        ["plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100-SXM", "--tp", LONG],
        ["sim", "--requests", "2", "--max-model-len", LONG],
        ["bench", "--base-url", "http://127.0.0.1:9", "--model", "m", "--arrival", LONG],
        ["fingerprint", "--model", "meta-llama/Llama-3.1-8B", "--engine", LONG],
        ["calc", "--model", "meta-llama/Llama-3.1-8B", "--tokens", "1", "--kv-dtype", LONG[:4000]],
    ]
    for argv in cases:
        proc = _run(*argv, cwd=tmp_path)
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert proc.returncode != 0 and lines, (argv[0], proc.stderr[-300:])
        last = lines[-1]
        assert not DOUBLE.match(last), last[:300]
        assert "x" * 200 not in last, (argv[0], last[:300])
        assert len(last) < 1200, (argv[0], len(last))
