"""The rollback drill with llama.cpp's llama-server as the baseline target (real engine, CPU):
time to ready (GET /health 200) and to the first successful completion, measured."""

from __future__ import annotations

import time
from typing import Any

import pytest

from kvbudget.accept.drill import run_drill
from kvbudget.accept.plan.checks import RollbackDrill

pytestmark = pytest.mark.llamacpp


def test_drill_restarts_llama_server_and_serves(llamacpp: Any) -> None:
    model = llamacpp.model("llama")
    command = [
        "/usr/bin/env", f"LD_LIBRARY_PATH={llamacpp.binary.parent}", str(llamacpp.binary),
        "-m", str(model), "--host", "127.0.0.1", "--port", "{port}", "-c", "2048", "-np", "1",
        "-t", "2",
    ]  # fmt: skip
    started = time.monotonic()
    result = run_drill(RollbackDrill(command=command, num_requests=2), model="m", max_restore_s=300)
    wall_s = time.monotonic() - started
    assert result["verdict"] == "pass", result
    assert result["kind"] == "measured"
    assert 0 < result["time_to_ready_s"] <= result["time_to_first_ok_s"] <= wall_s
    assert result["num_ok"] == 2
