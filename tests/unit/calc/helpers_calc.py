"""Run ``kvbudget`` in-process and capture what a user would see (shared by the calc tests)."""

from __future__ import annotations

import contextlib
import io

import pytest

from kvbudget.cli.main import main


def run_main(argv: list[str]) -> tuple[int, str, str]:
    """``(exit code, stdout, stderr)`` of ``kvbudget *argv``; the CLI always exits via SystemExit."""
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as exc,
    ):
        main(argv)
    code = exc.value.code
    return (code if isinstance(code, int) else 1), out.getvalue(), err.getvalue()
