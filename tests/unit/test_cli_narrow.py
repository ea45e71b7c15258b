"""The CLI as a user reads it in an 80-column terminal, and a ``--help`` that imports no command
(issue #32 item 7)."""

from __future__ import annotations

import inspect
import os
import subprocess
import sys

import click

from kvbudget.cli.main import SUMMARIES, available_commands, cli

TRUNCATED = "…"  # rich's ellipsis when a cell or header does not fit


def _run(*args: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns), "TERM": "dumb"}
    return subprocess.run(
        [sys.executable, "-m", "kvbudget", *args],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )


def _table_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line[:1] in "┏┃┡│└┌"]


def test_plan_scenario_table_fits_80_columns_without_truncation() -> None:
    proc = _run("plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm")
    assert proc.returncode == 0, proc.stderr
    assert TRUNCATED not in proc.stdout
    lines = _table_lines(proc.stdout)
    assert lines and all(len(line) <= 80 for line in lines)
    # the scenario table is drawn with one column per scenario, every field named in full
    for field in ("median/p95 tokens", "seqs/replica", "limited by", "CPU tier host"):
        assert any(line.startswith(f"│ {field}") for line in lines), field


def test_plan_scenario_table_is_one_row_per_scenario_when_wide() -> None:
    proc = _run("plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", columns=200)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in _table_lines(proc.stdout) if line.startswith("│ conservative")]
    assert len(rows) == 1


def test_gpus_table_fits_80_columns_and_keeps_every_source() -> None:
    proc = _run("gpus")
    assert proc.returncode == 0, proc.stderr
    assert TRUNCATED not in proc.stdout
    lines = _table_lines(proc.stdout)
    assert all(len(line) <= 80 for line in lines)
    rows = [line for line in lines if line.startswith("│ ")]
    json_proc = _run("gpus", "--json")
    assert json_proc.returncode == 0, json_proc.stderr
    import json

    catalog = json.loads(json_proc.stdout)
    gpus = catalog["gpus"] if isinstance(catalog, dict) else catalog
    assert len(rows) == len(gpus)  # one line per GPU: nothing wraps
    # each GPU's memory source is still printed, whole, on a line of its own
    for gpu in gpus:
        assert any(line.startswith(f"  {gpu['id']}: ") for line in proc.stdout.splitlines())


def test_help_imports_no_command_module() -> None:
    code = (
        "import sys\n"
        "from kvbudget.cli.main import main\n"
        "try:\n"
        "    main(['--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.startswith(('kvbudget.cli.', 'kvbudget.sim',"
        " 'kvbudget.capacity', 'scipy', 'fastapi')) and m != 'kvbudget.cli.main')\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert "HEAVY []" in proc.stderr, proc.stderr
    for name in available_commands():
        assert name in proc.stdout


def test_every_summary_is_the_start_of_its_commands_help() -> None:
    assert set(SUMMARIES) == set(available_commands())
    ctx = click.Context(cli)
    for name, summary in SUMMARIES.items():
        command = cli.get_command(ctx, name)
        assert command is not None and command.help is not None
        first = " ".join(inspect.cleandoc(command.help).split("\n\n")[0].split())
        assert first.startswith(summary), (name, summary, first[:80])


def test_plan_says_why_an_mla_pool_is_8x_its_structural_budget() -> None:
    """Issue #32 item 5: DeepSeek-V3 at TP 8 keeps its 70,272 B/token MLA latent (61 layers x
    (512 + 64) x 2 B) whole on each of the 8 ranks: 8.00x the structural bytes per token."""
    assert 61 * (512 + 64) * 2 == 70272
    proc = _run(
        "plan", "--model", "deepseek-ai/DeepSeek-V3", "--gpu", "h200", "--tp", "8", columns=400
    )
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("why the engine pool")]
    assert "8.00x of that is bytes per token" in line
    assert "562,176 B per token together against 70,272 B" in line


def test_plan_margin_reads_as_a_verdict() -> None:
    proc = _run("plan", "--model", "meta-llama/Llama-3.1-8B", "--gpu", "h100-sxm", columns=400)
    assert proc.returncode == 0, proc.stderr
    assert "ok: headroom >= the 2.54 GiB safety margin" in proc.stdout
    # the structural budget and the pool agree within 1.5x for a dense TP1 model: no note
    assert "why the engine pool" not in proc.stdout
