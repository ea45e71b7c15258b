"""The llama.cpp test harness itself (runs in the default test run; needs no binary).

* the KV-log parser reads the lines llama.cpp prints (quoted verbatim from a `-lv 4` server log,
  ``shared/reference/llamacpp.md`` §2, and the iswa messages of ``src/llama-kv-cache-iswa.cpp``);
* without the cached binary, the real-engine tests FAIL with the command that builds it (they are
  selected explicitly with ``-m llamacpp``; a skip would hide that nothing was measured).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

LOG = """\
llama_kv_cache:        CPU KV buffer size =     4.25 MiB
llama_kv_cache: size =    4.25 MiB (  2048 cells,   4 layers,  4/4 seqs), K (q8_0):    2.12 MiB, V (q8_0):    2.12 MiB
llama_kv_cache_iswa: creating non-SWA KV cache, size = 2048 cells
llama_kv_cache:        CPU KV buffer size =     4.00 MiB
llama_kv_cache: size =    4.00 MiB (  2048 cells,   2 layers,  4/4 seqs), K (f16):    2.00 MiB, V (f16):    2.00 MiB
llama_kv_cache_iswa: creating     SWA KV cache, size = 768 cells
llama_kv_cache:        CPU KV buffer size =     1.50 MiB
llama_kv_cache: size =    1.50 MiB (   768 cells,   2 layers,  4/4 seqs), K (f16):    0.75 MiB, V (f16):    0.75 MiB
"""


def test_parse_kv_log_reads_engine_lines(llamacpp_launcher: ModuleType) -> None:
    lines = llamacpp_launcher.parse_kv_log(LOG)
    assert [(x.cache, x.cells, x.layers, x.seqs, x.streams) for x in lines] == [
        ("single", 2048, 4, 4, 4),
        ("non-SWA", 2048, 2, 4, 4),
        ("SWA", 768, 2, 4, 4),
    ]
    first = lines[0]
    assert (first.total_mib, first.k_type, first.k_mib, first.v_type, first.v_mib) == (
        "4.25",
        "q8_0",
        "2.12",
        "q8_0",
        "2.12",
    )
    assert [x.buffer_mib for x in lines] == ["4.25", "4.00", "1.50"]


def test_missing_binary_fails_with_the_build_command(tmp_path: Path) -> None:
    target = Path(__file__).with_name("test_llamacpp_prefix_cache.py")
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "empty-cache"))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-m",
            "llamacpp",
            "-o",
            "addopts=-q --import-mode=importlib",
            "-p",
            "no:cacheprovider",
            str(target),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-2000:]  # failed, not skipped (a skip exits 0)
    assert "llama-server is not built" in out
    assert "bash scripts/llama-server.sh" in out
    assert "1 error" in out or "1 failed" in out


@pytest.mark.llamacpp
def test_build_script_reuses_the_cached_binary(llamacpp: Any) -> None:
    """A second run of scripts/llama-server.sh finds the cache and prints the binary's path."""
    script = Path(__file__).resolve().parents[3] / "scripts" / "llama-server.sh"
    done = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == str(llamacpp.binary)
    assert "cached build found" in done.stderr
