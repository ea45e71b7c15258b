"""Click options generated from a pydantic request model's fields, and the flags read back.

``kvbudget plan`` declares no request flag by hand: every field of
:class:`~kvbudget.capacity.plan_types.PlanRequest` is one option, named, typed, constrained and
documented by the field itself (guidellm takes its CLI defaults from its arguments model and
validates the flags with it; here the whole declaration comes from the field). A new field with
a ``description`` is a new flag with no edit to the command.

From the field:

* **name**: ``--field-name``. A name the shared vocabulary knows (:data:`kvbudget.cli.vocab.
  SHARED_FLAGS`, canonical or vLLM's alias: ``data_parallel_size`` is ``--dp`` /
  ``--data-parallel-size``) takes the vocabulary's declarations and help, so one concept keeps
  one flag name and one definition in every command.
* **type**: ``int`` is a count with vLLM's suffixes (``32k`` = 32,000, ``32K`` = 32,768; the
  minimum from ``ge``/``gt``); an ``int`` named ``*_bytes`` a size (``80G`` = 80 GiB as vLLM
  reads ``--kv-cache-memory-bytes``, ``80g`` = 80 x 10^9); ``float`` a real; a ``Literal`` its
  choices, and so do a field's registered names (``NameChoices`` metadata: ``--engine``);
  ``bool | None`` an on/off pair ``--x/--no-x``; a ``bool`` a flag that flips the
  field's default; anything else text.
* **help**: the field's ``description``.
* **default**: none on the command line. A flag not given leaves the field to the plan file or
  to the model's default; the other constraints (``gt``, ``le``, ...) are the model's, checked
  once on the merged request.

Extra CLI metadata, where the field alone does not say it:
``Field(json_schema_extra={"cli": {...}})`` with the keys of :data:`CLI_KEYS`.
"""

from __future__ import annotations

import functools
import os
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar, Union, get_args, get_origin

import click
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from kvbudget.cli.vocab import COUNT, SIZE, Count, RegisteredChoice, shared_flag
from kvbudget.engine_name import NameChoices
from kvbudget.units import parse_bytes, parse_count

_F = TypeVar("_F", bound=Callable[..., Any])

#: the keys of a field's ``json_schema_extra["cli"]``
CLI_KEYS: Final[dict[str, str]] = {
    "flags": "the option's names, canonical first (default ``--field-name``); [] for no flag",
    "help": "the --help text when it is not the description (a flag that flips a default)",
    "help_suffix": "words added to a shared flag's help for this command",
    "choices": "the values a text field's flag takes",
    "words": "flag values that switch a bool field on instead of setting this one",
    "env": "an environment variable (1 or true) that sets a bool field nothing else set",
}

if TYPE_CHECKING:  # click >= 8.2 types ParamType by its value; 8.1 is not subscriptable
    _CountOrWordType = click.ParamType[int | str, Any]
else:
    _CountOrWordType = click.ParamType


class CountOrWord(_CountOrWordType):
    """A count, or one of a few words (``auto``, ``-1``) that mean something else."""

    name = "count"

    def __init__(self, count: Count, words: tuple[str, ...]) -> None:
        self.count = count
        self.words = words

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "N"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> int | str:
        word = str(value).strip().lower()
        if word in self.words:
            return word
        return self.count.convert(value, param, ctx)


@dataclass(frozen=True, slots=True)
class FieldFlag:
    """One model field as a command-line option (or as no option: ``decls == ()``)."""

    name: str
    decls: tuple[str, ...]
    help: str | None
    type: click.ParamType[Any, Any] | None
    #: the field's value when a plain flag (``is_flag``) is given: its default flipped
    flag_sets: bool | None = None
    words: dict[str, str] = field(default_factory=dict)
    env: str | None = None

    def option(self) -> Callable[[_F], _F]:
        attrs: dict[str, Any] = {"help": self.help}
        if self.flag_sets is not None or "/" in self.decls[0]:
            attrs.update(default=None, is_flag=True)  # not given: None, not False
        elif self.type is not None:
            attrs["type"] = self.type
        return click.option(*self.decls, self.name, **attrs)


def _cli_meta(name: str, info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    meta = extra.get("cli", {}) if isinstance(extra, dict) else {}
    if not isinstance(meta, dict):
        raise TypeError(f"{name}: json_schema_extra['cli'] must be a mapping, got {meta!r}")
    unknown = set(meta) - set(CLI_KEYS)
    if unknown:
        raise TypeError(f"{name}: unknown CLI metadata {sorted(unknown)}; keys: {sorted(CLI_KEYS)}")
    return meta


def _value_type(annotation: Any) -> tuple[Any, bool]:
    """``annotation`` without ``None``, and whether ``None`` was allowed."""
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        optional = len(args) < len(get_args(annotation))
        return (args[0] if len(args) == 1 else annotation), optional
    return annotation, False


def _minimum(info: FieldInfo) -> int:
    for item in info.metadata:  # annotated_types.Ge / Gt, as pydantic keeps ge= / gt=
        ge, gt = getattr(item, "ge", None), getattr(item, "gt", None)
        if isinstance(ge, int):
            return ge
        if isinstance(gt, int):
            return gt + 1
    return 0


def is_size(name: str, info: FieldInfo) -> bool:
    """A byte count: an ``int`` field named ``*_bytes``."""
    return name.endswith("_bytes") and _value_type(info.annotation)[0] is int


def _click_type(
    name: str, info: FieldInfo, meta: dict[str, Any]
) -> click.ParamType[Any, Any] | None:
    kind, _ = _value_type(info.annotation)
    if meta.get("choices"):
        return click.Choice([str(c) for c in meta["choices"]])
    registered = next((m for m in info.metadata if isinstance(m, NameChoices)), None)
    if registered is not None:
        return RegisteredChoice(registered.names)
    if get_origin(kind) is Literal:
        return click.Choice([str(c) for c in get_args(kind)])
    if is_size(name, info):
        return SIZE
    if kind is int:
        minimum = _minimum(info)
        count = COUNT if minimum == 1 else Count(minimum=minimum)
        words = tuple(meta.get("words", {}))
        return CountOrWord(count, words) if words else count
    if kind is float:
        return click.FLOAT
    return None


def field_flag(name: str, info: FieldInfo) -> FieldFlag:
    """How field ``name`` is spelled, typed and documented on the command line."""
    meta = _cli_meta(name, info)
    decls: tuple[str, ...] = tuple(meta.get("flags", (f"--{name.replace('_', '-')}",)))
    kind, optional = _value_type(info.annotation)
    if "env" in meta and kind is not bool:
        raise TypeError(f"{name}: an environment variable can set only a bool field")
    if not decls:
        return FieldFlag(name, (), None, None, env=meta.get("env"))
    names = [name for decl in decls for name in decl.split("/")]
    shared = next((s for s in map(shared_flag, names) if s is not None), None)
    help_text: str | None = meta.get("help", info.description)
    if shared is not None:
        if not set(names) <= set(shared.names):  # one concept, one set of names
            raise TypeError(f"{name}: {decls} mixes names of the shared {shared.decls[0]}")
        decls = shared.decls
        help_text = shared.help or help_text
    if help_text is not None and "help_suffix" in meta:
        help_text += meta["help_suffix"]
    if not help_text:
        raise TypeError(f"{name}: give the field a description (it is the flag's --help)")
    if kind is bool:
        if optional:  # three states: on, off, or the engine's default
            if shared is None:
                flag = decls[0].removeprefix("--")
                decls = (f"--{flag}/--no-{flag}",)
            return FieldFlag(name, decls, help_text, None)
        return FieldFlag(name, decls, help_text, None, flag_sets=not info.default)
    return FieldFlag(
        name,
        decls,
        help_text,
        _click_type(name, info, meta),
        words={word: target for word, target in meta.get("words", {}).items()},
    )


@functools.cache
def model_flags(model: type[BaseModel]) -> tuple[FieldFlag, ...]:
    """Every field of ``model`` as :class:`FieldFlag`, in the model's order."""
    flags = tuple(field_flag(name, info) for name, info in model.model_fields.items())
    for flag in flags:
        for target in flag.words.values():
            info = model.model_fields.get(target)
            if info is None or _value_type(info.annotation)[0] is not bool:
                raise TypeError(f"{flag.name}: CLI word target {target!r} is no bool field")
    return flags


def model_options(model: type[BaseModel]) -> Callable[[_F], _F]:
    """Decorator: one click option per field of ``model`` that has a flag, in field order; the
    command receives each under the field's name (``None`` when not given)."""
    options = [flag.option() for flag in model_flags(model) if flag.decls]

    def apply(func: _F) -> _F:
        for option in reversed(options):
            func = option(func)
        return func

    return apply


def fields_from_flags(model: type[BaseModel], given: Mapping[str, Any]) -> dict[str, Any]:
    """The field values the flags the user gave set (a command's keyword arguments in, fields out):
    a flag's word (``--max-model-len auto``) switches its bool field on instead."""
    out: dict[str, Any] = {}
    for flag in model_flags(model):
        value = given.get(flag.name)
        if value is None or not flag.decls:
            continue
        if isinstance(value, str) and value in flag.words:
            out[flag.words[value]] = True
        elif flag.flag_sets is not None:
            if value:
                out[flag.name] = flag.flag_sets
        else:
            out[flag.name] = value
    return out


def fields_from_env(
    model: type[BaseModel], environ: Mapping[str, str] | None = None
) -> dict[str, bool]:
    """The bool fields an environment variable turns on (``1`` or ``true``, as vLLM reads its
    ``envs.py`` flags); a variable unset or anything else sets nothing."""
    env = os.environ if environ is None else environ
    out: dict[str, bool] = {}
    for flag in model_flags(model):
        if flag.env is not None and env.get(flag.env, "0").strip().lower() in ("1", "true"):
            out[flag.name] = True
    return out


def parse_file_value(model: type[BaseModel], key: str, value: Any) -> Any:
    """A plan file's value for field ``key``: sizes (``20GiB``) and counts (``32K``) written as
    text are read as the flags read them; everything else is left to the model."""
    info = model.model_fields.get(key)
    if info is None or not isinstance(value, str):
        return value
    if is_size(key, info):
        return parse_bytes(value, field=key)
    if _value_type(info.annotation)[0] is int:
        return parse_count(value, field=key, minimum=_minimum(info))
    return value
