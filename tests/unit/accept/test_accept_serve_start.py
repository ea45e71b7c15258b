"""``ServeTarget`` waits for its server with a deadline that holds when the child prints nothing.

The child here is a shell script that prints nothing and sleeps (before the fix the start-up
wait blocked in ``readline`` until the child exited; pytest's timeout would fail this test).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from kvbudget.accept.targets.base import TargetInfo
from kvbudget.accept.targets.http import ServeTarget
from kvbudget.errors import TargetError


def _silent_child(tmp_path: Path, body: str) -> str:
    script = tmp_path / "child.sh"
    script.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    script.chmod(0o755)
    return str(script)


def _start(startup_timeout_s: float) -> ServeTarget:
    return ServeTarget(
        serve_args=[],
        model="m",
        run_async=lambda coro: None,
        info=TargetInfo(kind="serve", source="simulated", label="test"),
        startup_timeout_s=startup_timeout_s,
    )


def test_a_silent_child_hits_the_start_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sys, "executable", _silent_child(tmp_path, "sleep 60"))
    with pytest.raises(TargetError, match=r"no URL from kvbudget serve within 1 s"):
        _start(1.0)


def test_a_child_that_exits_names_its_last_error_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    body = "echo 'Error: --gpu: unknown GPU XYZ' >&2; exit 2"
    monkeypatch.setattr(sys, "executable", _silent_child(tmp_path, body))
    with pytest.raises(TargetError, match=r"exited before listening: Error: --gpu: unknown GPU"):
        _start(30.0)
