"""Run ``kvbudget`` in-process and capture what a user would see (shared by the CLI tests), the
calc arguments of a Llama-3.1-8B-shaped model the CLI tests share, and a tracemalloc peak."""

from __future__ import annotations

import contextlib
import io
import tracemalloc
from collections.abc import Callable
from typing import TypeVar

import pytest

from kvbudget.cli.main import main

#: ``kvbudget calc`` flags for 32 layers x 8 KV heads x head_dim 128 at 2 bytes, 4096 tokens
CALC_LLAMA_8B = ["--layers", "32", "--kv-heads", "8", "--head-dim", "128", "--dtype-bytes", "2"]
CALC_LLAMA_8B += ["--tokens", "4096"]


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


T = TypeVar("T")


def traced(function: Callable[[], T]) -> tuple[T, int]:
    """``function()`` and the peak bytes Python allocated while it ran."""
    tracemalloc.start()
    try:
        result = function()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
