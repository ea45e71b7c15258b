"""`kvbudget sim --engine llamacpp`: the slot engine behind the sim command."""

from __future__ import annotations

import json
import subprocess
import sys


def sim(*args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "kvbudget", "sim", "--engine", "llamacpp", *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


def test_slot_layout_follows_llamacpp_padding() -> None:
    # -c 8192 -np 3: 8192 / 3 = 2730 -> padded to 2816 cells per slot (the server's own log
    # says "2816 cells" for these flags: shared/reference/llamacpp.md section 2)
    r = sim(
        "--slots",
        "3",
        "--ctx-size",
        "8192",
        "--requests",
        "12",
        "--concurrency",
        "6",
        "--input-tokens",
        "256",
        "--output-tokens",
        "8",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert (out["num_slots"], out["n_ctx_slot"]) == (3, 2816)
    assert out["requests_completed"] == 12 and out["num_preemptions"] == 0
    # 6 clients on 3 slots: 3 requests wait at the start
    assert out["num_deferred_peak"] == 3
    assert out["timing_model"] == "roofline"


def test_prompt_longer_than_a_slot_is_a_one_line_error() -> None:
    r = sim(
        "--slots",
        "4",
        "--ctx-size",
        "8192",
        "--requests",
        "4",
        "--input-tokens",
        "3000",
        "--output-tokens",
        "8",
    )
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ConfigError: no request could run")
    assert "2048 cells" in lines[0] and "--ctx-size" in lines[0]
