"""``kvbudget sim``: bad output paths, bad scenario files and token counts < 1 are refused
up front with one-line ConfigErrors naming the flag/field, the value and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from kvbudget.cli.sim import sim
from kvbudget.errors import ConfigError

SMALL = ["--requests", "3", "--rate", "5", "--input-tokens", "64", "--output-tokens", "4"]


def _config_error(args: list[str]) -> ConfigError:
    result = CliRunner().invoke(sim, args)
    assert isinstance(result.exception, ConfigError), (result.exception, result.output)
    assert "\n" not in str(result.exception)
    return result.exception


@pytest.fixture
def no_simulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the simulation starts: the path check must come first."""

    def boom(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("simulate() ran before the output paths were checked")

    import kvbudget.sim.cluster

    monkeypatch.setattr(kvbudget.sim.cluster, "simulate", boom)


@pytest.mark.parametrize("flag", ["--trace-out", "--records-out", "--samples-out"])
def test_output_under_proc_is_refused_before_simulating(flag: str, no_simulation: None) -> None:
    err = _config_error([*SMALL, flag, "/proc/zz/t.json"])
    text = str(err)
    assert flag in text and "/proc/zz/t.json" in text
    assert "writable" in text


@pytest.mark.parametrize("flag", ["--trace-out", "--records-out", "--samples-out"])
def test_output_below_a_regular_file_is_refused(
    flag: str, tmp_path: Path, no_simulation: None
) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    target = blocker / "out.json"
    err = _config_error([*SMALL, flag, str(target)])
    assert flag in str(err) and str(target) in str(err)


def test_output_that_is_a_directory_is_refused(tmp_path: Path, no_simulation: None) -> None:
    result = CliRunner().invoke(sim, [*SMALL, "--records-out", str(tmp_path)])
    assert result.exit_code == 2  # click's usage error, before the command body runs
    assert "--records-out" in result.output and "is a directory" in result.output


# a read-only directory: tests/integration/hostile/test_read_only_out.py (runs the command
# without root's file-permission override, so it also holds when the suite runs as root)


def test_missing_parent_directories_are_created(tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / "records.jsonl"
    result = CliRunner().invoke(sim, [*SMALL, "--records-out", str(target)])
    assert result.exit_code == 0, result.output
    assert len(target.read_text().splitlines()) == 3


def test_unknown_scenario_field_names_file_field_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("replicas: 1\nfoo: 1\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert "unknown field 'foo'" in text and "scenario.yaml" in text
    assert "remove it" in text and "docs/simulator.md" in text


def test_unknown_nested_scenario_field_gives_the_path(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("replica_overrides:\n  - {gpu: H100-SXM, gpuu: 2}\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert "replica_overrides.0.gpuu" in text and "remove it" in text


def test_bad_scenario_value_names_field_value_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("tp: 0\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert "tp" in text and "0" in text and "scenario.yaml" in text
    assert "docs/simulator.md" in text


def test_yaml_syntax_error_gives_line_column_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("replicas: 1\ntp: [1\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert "scenario.yaml" in text and "line " in text and "column " in text
    assert "fix the YAML syntax" in text


def test_missing_scenario_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    text = str(_config_error(["--scenario", str(path)]))
    assert str(path) in text and "not found" in text


@pytest.mark.parametrize("flag", ["--output-tokens", "--input-tokens"])
@pytest.mark.parametrize("value", ["0", "-3"])
def test_token_counts_below_one_are_refused(flag: str, value: str, no_simulation: None) -> None:
    args = ["--requests", "3", "--rate", "5", flag, value]
    text = str(_config_error(args))
    assert flag in text and value in text and ">= 1" in text


def test_unknown_workload_field_in_scenario_names_file_and_fix(tmp_path: Path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("workload:\n  num_requests: 3\n  foo: 1\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert "unknown field 'workload.foo'" in text and "scenario.yaml" in text
    assert "remove it" in text and "docs/workloads.md" in text


@pytest.mark.parametrize("name", ["output_tokens", "input_tokens"])
def test_fixed_zero_tokens_in_scenario_is_refused(
    name: str, tmp_path: Path, no_simulation: None
) -> None:
    # without this check the workload's default min_tokens=1 clips 0 up to 1 token silently
    path = tmp_path / "scenario.yaml"
    path.write_text(f"workload:\n  num_requests: 3\n  {name}: {{kind: fixed, value: 0}}\n")
    text = str(_config_error(["--scenario", str(path)]))
    assert f"workload.{name}.value=0" in text and "scenario.yaml" in text and ">= 1" in text
