"""``kvbudget plan`` / ``kvbudget gpus``: JSON fields, exit codes, YAML + flags, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.cli.plan import gpus, plan
from kvbudget.errors import ConfigError

#: Llama-3.1-8B on an H100 with 10 GiB of KV and a 32,768-token max_model_len
LLAMA_H100_10GIB = ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"]
LLAMA_H100_10GIB += ["--kv-cache-memory", "10GiB", "--max-model-len", "32768"]


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(plan, args)
    return result.exit_code, result.stdout, result.stderr if result.stderr_bytes is not None else ""


def test_plan_json_fields() -> None:
    code, out, _ = run(
        [
            *LLAMA_H100_10GIB,
            "--json",
        ]
    )
    assert code == 0
    doc = json.loads(out)
    for key in (
        "num_blocks",
        "kv_cache_tokens",
        "max_concurrency",
        "available_kv_bytes",
        "estimated_max_model_len",
        "fits",
        "breakdown",
        "budgets",
        "scenarios",
        "groups",
    ):
        assert key in doc
    # page 65536 B, 32 layers: 10 GiB // 65536 // 32 = 5120
    assert doc["num_blocks"] == 5120
    assert doc["fits"] is True and doc["estimated_max_model_len"] is None
    assert doc["figure"] == "computed"


def test_plan_does_not_fit_exits_3_with_engine_text() -> None:
    code, out, _ = run(
        [
            "--model",
            "meta-llama/Llama-3.1-8B",
            "--gpu",
            "H100",
            "--kv-cache-memory",
            "1GiB",
            "--max-model-len",
            "131072",
            "--json",
        ]
    )
    assert code == 3
    doc = json.loads(out)
    assert doc["fits"] is False
    # needed = 32 x 8192 x 65536 = 16 GiB; estimate = floor(1 GiB / (32 x 65536)) x 16 = 8192
    assert doc["estimated_max_model_len"] == 8192
    assert "(16.0 GiB KV cache is needed" in doc["error"]


def test_yaml_file_and_flag_override(tmp_path: Path) -> None:
    cfg = tmp_path / "plan.yaml"
    cfg.write_text(
        "model: meta-llama/Llama-3.1-8B\ngpu: H100\nkv_cache_memory_bytes: 10GiB\nmax_model_len: 32768\n"
        "scenarios:\n  - name: mine\n    lengths: {median_tokens: 1000, p95_tokens: 4000}\n"
        "    concurrency: 100\n    duration_s: 60\n    quality_gate: canary\n",
        "utf-8",
    )
    code, out, _ = run(["--config", str(cfg), "--tp", "2", "--json"])
    assert code == 0
    doc = json.loads(out)
    assert doc["tp"] == 2 and doc["num_blocks"] == 10240
    assert [s["scenario"]["name"] for s in doc["scenarios"]] == ["mine"]
    sc = doc["scenarios"][0]
    # p95 4000 tokens = cdiv(4000, 16) = 250 blocks; usable 10239 -> 40 sequences; 100 -> 3 replicas
    assert sc["per_replica_capacity"] == 10239 // 250 == 40
    assert sc["replicas_needed"] == 3 and sc["gpus_needed"] == 6


def test_table_output_runs() -> None:
    code, out, _ = run(["--model", "openai/gpt-oss-120b", "--gpu", "H100", "--tp", "2"])
    assert code == 0
    assert "GPU KV cache size" in out and "Three budgets" in out


def test_bad_input_one_line() -> None:
    for args in (
        ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "nope"],
        ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--kv-cache-memory", "lots"],
        ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--gpu-memory-utilization", "1.5"],
        # auto-fit is vLLM's (-1); SGLang has none, so it is refused rather than ignored
        [
            *("--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100"),
            *("--engine", "sglang", "--max-model-len", "auto"),
        ],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "kvbudget", "plan", *args],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2, proc.stderr
        lines = [line for line in proc.stderr.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("ConfigError:"), proc.stderr
        assert "Traceback" not in proc.stderr


def test_gpus_json() -> None:
    result = CliRunner().invoke(gpus, ["--json"])
    assert result.exit_code == 0
    doc = json.loads(result.stdout)
    assert len(doc["gpus"]) >= 15
    assert all(g["memory_source"] for g in doc["gpus"])


def test_lengths_flag_scenario() -> None:
    code, out, _ = run(
        [
            *LLAMA_H100_10GIB,
            "--lengths",
            "1000,8000",
            "--concurrency",
            "50",
            "--cpu-kv-tokens",
            "1000",
            "--json",
        ]
    )
    assert code == 0
    (sc,) = json.loads(out)["scenarios"]
    # p95 8000 tokens = 500 blocks; 5119 usable -> 10 per replica -> 5 replicas
    assert sc["per_replica_capacity"] == 10 and sc["replicas_needed"] == 5
    # 1000 tokens -> 63 blocks x 16 x 131072 B per token
    assert sc["cpu_kv_host_bytes"] == 1008 * 131072
    # the command raises the one-line ConfigError that kvbudget's main prints (not any crash)
    bad = CliRunner().invoke(
        plan, ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", "--lengths", "9000,2000"]
    )
    assert isinstance(bad.exception, ConfigError)
    assert bad.exception.field == "lengths"
    assert str(bad.exception).startswith("lengths: p95 (2000) is below the median (9000)")


def test_other_engines_knob_refused_on_the_command_line() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "kvbudget",
            "plan",
            "--model",
            "Qwen/Qwen3-8B",
            "--gpu",
            "H100",
            "--engine",
            "sglang",
            "--gpu-memory-utilization",
            "0.8",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("ConfigError: gpu_memory_utilization:")


def test_docs_list_every_plan_request_field() -> None:
    from kvbudget.capacity.plan_types import PlanRequest

    doc = (Path(__file__).resolve().parents[3] / "docs" / "commands" / "plan.md").read_text("utf-8")
    missing = [name for name in PlanRequest.model_fields if f"`{name}`" not in doc]
    assert not missing, missing


@pytest.mark.parametrize(
    ("flag", "field"), [("--concurrency", "concurrency"), ("--cpu-kv-tokens", "cpu_kv_tokens")]
)
def test_scenario_flags_without_lengths_are_refused_not_ignored(flag: str, field: str) -> None:
    bad = CliRunner().invoke(
        plan, ["--model", "meta-llama/Llama-3.1-8B", "--gpu", "H100", flag, "0"]
    )
    assert isinstance(bad.exception, ConfigError)
    assert bad.exception.field == field
    assert "--lengths" in str(bad.exception) and "\n" not in str(bad.exception)


def test_unknown_yaml_key_names_the_fix(tmp_path: Path) -> None:
    cfg = tmp_path / "plan.yaml"
    cfg.write_text("model: meta-llama/Llama-3.1-8B\ngpu: H100\nmax_model_lenn: 4096\n", "utf-8")
    bad = CliRunner().invoke(plan, ["--config", str(cfg)])
    assert isinstance(bad.exception, ConfigError)
    text = str(bad.exception)
    assert text.startswith("max_model_lenn: Extra inputs are not permitted (got 4096)")
    assert "remove it or check the spelling" in text and "\n" not in text


def test_uncached_model_error_names_a_flag_that_exists(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15 item 7: plan has no --download; the fix it is told must be a real command."""
    import click
    import huggingface_hub.constants

    from kvbudget.cli.calc import calc
    from kvbudget.cli.main import main
    from kvbudget.cli.plan import plan

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", "acme/not-cached", "--gpu", "H100"])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "kvbudget calc --model acme/not-cached --download" in err, err
    names = {n for p in calc.params if isinstance(p, click.Option) for n in p.opts}
    assert "--download" in names
    assert "--download" not in {
        n for p in plan.params if isinstance(p, click.Option) for n in p.opts
    }


def test_an_incomplete_config_names_its_fix_once(tmp_path: Path) -> None:
    """A config lacking the structure fields: the one line names them and the --set fix once."""
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "llama"}))
    result = CliRunner().invoke(plan, ["--model", str(config), "--gpu", "H100"])
    assert result.exit_code != 0
    line = str(result.exception)  # the SpecError the entry point prints as one line
    assert "is not_applicable" in line
    assert "num_hidden_layers" in line and "--set num_hidden_layers=..." in line
    assert line.count("supply") == 1, line
