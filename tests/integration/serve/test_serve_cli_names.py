"""`kvbudget serve` without --gpu says its pool and timing are manual; --served-model-name."""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request


def test_manual_serve_says_so_and_serves_the_served_name() -> None:
    cmd = [sys.executable, "-m", "kvbudget", "serve", "--model", "meta-llama/Llama-3.1-8B"]
    cmd += ["--served-model-name", "llama", "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        with urllib.request.urlopen(url + "/v1/models", timeout=10) as resp:
            ids = [m["id"] for m in json.loads(resp.read())["data"]]
        assert ids == ["llama"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=20)
    note = next(line for line in err.splitlines() if line.startswith("note:"))
    assert "no --gpu" in note and "manual" in note
    assert "not those of meta-llama/Llama-3.1-8B" in note and "Add --gpu" in note
