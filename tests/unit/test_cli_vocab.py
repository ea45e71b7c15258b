"""docs/flags.md's vocabulary table against the real click commands.

The expected names come from the table (written from vLLM 0.32.0's ``vllm bench serve`` and
``vllm serve`` argument parsers, see docs/flags.md), never from kvbudget.cli.vocab.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import click
import pytest

from kvbudget.cli.main import available_commands, cli

REPO_ROOT = Path(__file__).resolve().parents[2]
FLAGS_MD = REPO_ROOT / "docs" / "flags.md"
_FLAG = re.compile(r"`(--[a-z0-9-]+)`")


def _commands() -> dict[str, click.Command]:
    ctx = click.Context(cli)
    out: dict[str, click.Command] = {}

    def walk(name: str, cmd: click.Command) -> Iterator[tuple[str, click.Command]]:
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                child = cmd.get_command(ctx, sub)
                assert child is not None
                yield from walk(f"{name} {sub}", child)
        else:
            yield name, cmd

    for name in available_commands():
        top = cli.get_command(ctx, name)
        assert top is not None
        out.update(walk(name, top))
    return out


COMMANDS = _commands()


def _names(opt: click.Option) -> set[str]:
    return set(opt.opts) | set(opt.secondary_opts)


def _option(cmd: click.Command, flag: str) -> click.Option | None:
    for p in cmd.params:
        if isinstance(p, click.Option) and flag in _names(p):
            return p
    return None


def _rows() -> list[dict[str, list[str] | str]]:
    text = FLAGS_MD.read_text(encoding="utf-8")
    body = text.split("## The table", 1)[1]
    rows: list[dict[str, list[str] | str]] = []
    for line in body.splitlines():
        if not line.startswith("| ") or line.startswith("| concept") or line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5:
            continue
        concept, flag, vllm, older, commands = cells
        rows.append(
            {
                "concept": concept,
                "flags": _FLAG.findall(flag),
                "vllm": _FLAG.findall(vllm),
                "older": _FLAG.findall(older),
                "commands": [] if commands == "—" else [c.strip() for c in commands.split(",")],
            }
        )
    return rows


ROWS = _rows()


def test_table_was_read() -> None:
    assert len(ROWS) >= 30
    assert all(row["flags"] for row in ROWS)
    for row in ROWS:
        for name in row["commands"]:
            assert name in COMMANDS, f"docs/flags.md names an unknown command {name!r}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: str(r["flags"][0]))
def test_each_listed_command_has_the_flag_and_vllms_names(row: dict[str, list[str]]) -> None:
    for name in row["commands"]:
        cmd = COMMANDS[name]
        for flag in row["flags"]:
            opt = _option(cmd, flag)
            assert opt is not None, f"{name} has no {flag} (docs/flags.md says it does)"
            assert flag in opt.opts[:1] + opt.secondary_opts[:1], (
                f"{name}: {flag} is only an alias of {opt.opts[0]}; the table's name is the canonical one"
            )
        owners = {id(_option(cmd, f)) for f in row["flags"]}
        for alias in row["vllm"]:
            opt = _option(cmd, alias)
            assert opt is not None and id(opt) in owners, f"{name} does not accept {alias}"


@pytest.mark.parametrize("row", ROWS, ids=lambda r: str(r["flags"][0]))
def test_no_other_command_has_the_flag(row: dict[str, list[str]]) -> None:
    for name, cmd in COMMANDS.items():
        if name in row["commands"]:
            continue
        for flag in row["flags"] + row["vllm"]:
            assert _option(cmd, flag) is None, (
                f"{name} has {flag}; add {name} to its row in docs/flags.md"
            )


@pytest.mark.parametrize("row", [r for r in ROWS if r["older"]], ids=lambda r: str(r["flags"][0]))
def test_older_names_only_alias_the_canonical_flag(row: dict[str, list[str]]) -> None:
    for old in row["older"]:
        holders = [(n, _option(c, old)) for n, c in COMMANDS.items() if _option(c, old)]
        assert holders, f"{old}: no command accepts it; drop it from docs/flags.md"
        for name, opt in holders:
            assert opt is not None
            assert name in row["commands"], f"{name} accepts {old} but is not in its row"
            assert set(row["flags"]) & _names(opt), (
                f"{name}: {old} is not an alias of {row['flags']}"
            )
            assert old not in (opt.opts[0], *opt.secondary_opts[:1]), f"{name}: {old} is canonical"


def test_every_shared_flag_is_in_the_table() -> None:
    users: dict[str, set[str]] = defaultdict(set)
    for name, cmd in COMMANDS.items():
        for p in cmd.params:
            if isinstance(p, click.Option):
                users[p.opts[0]].add(name)
    documented = {f for row in ROWS for f in row["flags"]}
    shared = {flag for flag, names in users.items() if len(names) > 1 and flag != "--help"}
    assert not shared - documented, (
        f"shared flags missing from docs/flags.md: {shared - documented}"
    )


COUNT_CASES = [("32k", 32_000), ("32K", 32_768), ("25.6k", 25_600), ("4096", 4096)]


@pytest.mark.parametrize(
    ("command", "flag"),
    [
        ("sim", "--max-model-len"),
        ("sim", "--num-requests"),
        ("sim", "--input-tokens"),
        ("bench", "--num-requests"),
        ("bench", "--input-tokens"),
        ("bench", "--output-tokens"),
        ("serve", "--max-model-len"),
        ("serve", "--max-num-batched-tokens"),
        ("audit reuse", "--input-tokens"),
        ("audit isolation", "--shared-prefix-tokens"),
    ],
)
def test_counts_take_vllm_suffixes(command: str, flag: str) -> None:
    cmd = COMMANDS[command]
    opt = _option(cmd, flag)
    assert opt is not None and opt.name is not None
    for text, expected in COUNT_CASES:
        # hand arithmetic / vLLM's human_readable_int docstring: k = 1000, K = 1024
        assert opt.type_cast_value(click.Context(cmd), text) == expected, (command, flag, text)


@pytest.mark.parametrize("text", ["1.5K", "2.5", "x"])
def test_sim_refuses_a_bad_count(capsys: pytest.CaptureFixture[str], text: str) -> None:
    from kvbudget.cli.main import main

    with pytest.raises(SystemExit) as info:
        main(["sim", "--max-model-len", text])
    assert info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("ConfigError: --max-model-len"), err
    assert "\n" not in err and text in err
