"""``fingerprint`` refuses what ``calc`` and ``plan`` refuse (issue 30 item 9): the same
validation, the same one-line message, never exit 0 on such an input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 2,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "hidden_size": 512,
    "intermediate_size": 1024,
    "vocab_size": 1000,
    "max_position_embeddings": 4096,
    "torch_dtype": "bfloat16",
}


def _kvbudget(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _last_line(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines, proc.stdout[-300:]
    return lines[-1]


@pytest.mark.timeout(300)
@pytest.mark.parametrize(
    ("config", "flags", "words"),
    [
        ({}, ["--tp", "3"], "ConfigError: tp: 3 neither divides the 8 KV heads"),
        ({}, ["--kv-dtype", "bogus"], "ConfigError: kv dtype 'bogus' is not supported by vllm"),
        ({"num_key_value_heads": 0}, [], "SpecError: num_key_value_heads: expected a positive"),
    ],
    ids=["tp-3-with-8-kv-heads", "kv-dtype-bogus", "zero-kv-heads"],
)
def test_fingerprint_refuses_what_calc_and_plan_refuse(
    tmp_path: Path, config: dict[str, object], flags: list[str], words: str
) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**CONFIG, **config}))
    model = ["--model", str(path)]
    fingerprint = _kvbudget("fingerprint", *model, *flags)
    calc = _kvbudget("calc", *model, "--tokens", "1024", *flags)
    plan = _kvbudget("plan", *model, "--gpu", "H100-SXM", *flags)
    for proc in (fingerprint, calc, plan):
        assert proc.returncode == 2, proc.stdout[-300:]
        assert _last_line(proc).startswith(words), _last_line(proc)
    assert _last_line(fingerprint) == _last_line(calc)


def test_a_valid_deployment_still_fingerprints(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(CONFIG))
    proc = _kvbudget("fingerprint", "--model", str(path), "--tp", "4", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["identity"]["tensor_parallel_size"] == 4
