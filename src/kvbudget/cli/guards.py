"""Bounds every command's flags share (docs/limits.md), applied once to each click command.

:func:`harden` walks a command's parameters (subcommands too) and wraps their types: a real
number must be finite and at most :data:`~kvbudget.safety.limits.MAX_FLOAT_FLAG` in magnitude
(``nan``/``inf`` never reach a timer or a loop), an integer at most
:data:`~kvbudget.safety.limits.MAX_INT_FLAG` (a 400-digit number is refused, not a crash), a
``--seed`` non-negative, a text value non-empty where given and at most
:data:`~kvbudget.safety.limits.MAX_TEXT_FLAG_CHARS` long. Each refusal is click's one-line
usage error naming the flag.
"""

from __future__ import annotations

import math
from typing import Any

import click

from kvbudget.safety.limits import MAX_FLOAT_FLAG, MAX_INT_FLAG, MAX_SEED, MAX_TEXT_FLAG_CHARS

_MARK = "_kvbudget_hardened"


class Bounded(click.ParamType[Any, Any]):
    """``inner``'s conversion, then the shared bounds."""

    def __init__(
        self, inner: click.ParamType[Any, Any], *, seed: bool = False, allow_empty: bool = False
    ) -> None:
        self.inner = inner
        self.seed = seed
        self.allow_empty = allow_empty
        self.name = inner.name

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str | None:
        return self.inner.get_metavar(param, ctx)

    def to_info_dict(self) -> Any:
        return self.inner.to_info_dict()

    def shell_complete(self, ctx: click.Context, param: click.Parameter, incomplete: str) -> Any:
        return self.inner.shell_complete(ctx, param, incomplete)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and len(value) > MAX_TEXT_FLAG_CHARS:
            self.fail(
                f"{len(value):,} characters is longer than the {MAX_TEXT_FLAG_CHARS:,} allowed",
                param,
                ctx,
            )
        if value == "" and not self.allow_empty:
            self.fail("is empty; give a value or leave the flag out", param, ctx)
        out = self.inner.convert(value, param, ctx)
        if isinstance(out, bool):
            return out
        if isinstance(out, float):
            if not math.isfinite(out):
                self.fail(f"{out!r} is not a finite number; give a finite value", param, ctx)
            if abs(out) > MAX_FLOAT_FLAG:
                self.fail(f"{out:g} is beyond the limit of {MAX_FLOAT_FLAG:g}", param, ctx)
        elif isinstance(out, int):
            if self.seed and not 0 <= out <= MAX_SEED:
                self.fail(
                    f"{out} is not a seed; give an integer 0 <= seed <= {MAX_SEED}", param, ctx
                )
            if not self.seed and abs(out) > MAX_INT_FLAG:
                self.fail(
                    f"{str(out)[:20]}... is beyond the limit of {MAX_INT_FLAG} (2**53)", param, ctx
                )
        return out


def _wrap(param: click.Parameter) -> None:
    kind = param.type
    if isinstance(kind, Bounded) or getattr(param, "is_flag", False):
        return
    if isinstance(kind, click.types.FloatParamType | click.types.IntParamType):
        param.type = Bounded(kind, seed=param.name == "seed")
    elif isinstance(kind, click.types.StringParamType | click.Path):
        param.type = Bounded(kind, allow_empty=param.default == "")


def harden(command: click.Command) -> click.Command:
    """Apply the shared bounds to ``command`` and its subcommands (idempotent)."""
    if getattr(command, _MARK, False):
        return command
    for param in command.params:
        _wrap(param)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            harden(sub)
    setattr(command, _MARK, True)
    return command
