"""``docs/architectures.md`` is generated from the oracle lists and the recorded vLLM pools."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

importlib.import_module("transformers")

ROOT = Path(__file__).resolve().parents[2]


def test_architectures_doc_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "architectures_doc.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
