"""One name per serving engine, and every spelling of it kvbudget reads: a registered name.

An engine's one name (:data:`EngineName`) is how the ``--engine`` flags spell it (``vllm``,
``sglang``, ``llamacpp``). Elsewhere an engine arrives spelled otherwise: llama.cpp reports itself
as ``llama.cpp`` (what ``kvbudget calibrate`` and the load identity record, kept as written so
recorded files do not change), its server binary is ``llama-server``, a lock file may say
``llama-cpp``, and a calibration profile's ``engine`` carries a version after the name
(``llama.cpp b4500``). Code that compares engines asks :func:`engine_of` or :func:`is_engine`
instead of comparing those strings.

The names are **registered**, not a closed type: :func:`register_engine_name` adds a name, its
aliases and how it reports itself, and every lookup here (:func:`engine_names`, :func:`engine_of`,
:func:`parse_engine`) reads the register. The three built-in engines are registered below, at the
bottom layer, because the layers under ``capacity`` (``load``, ``spec``) read their spellings
without importing the engine folders; a new engine registers its name from its folder
(``kvbudget.capacity.engines.registry.register_engine`` does it for it) and is then an engine
everywhere. What differs between engines is asked of their registered entries
(``capacity/engines/``, ``deploy/engines/``); where code still names one engine it uses the
constants :data:`VLLM`, :data:`SGLANG` and :data:`LLAMACPP`.

A name that is none of them (``kvbudget-serve``, ``unknown``, ``hf`` for the transformers layout
of ``calc``) is no engine here: :func:`engine_of` gives ``None`` and :func:`parse_engine` refuses
it in one line naming the field, the value and the registered names.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final, TypeAlias

from kvbudget.errors import ConfigError, shown_value

#: an engine's registered name (validated where it enters: :func:`parse_engine`)
EngineName: TypeAlias = str

VLLM: Final[EngineName] = "vllm"
SGLANG: Final[EngineName] = "sglang"
LLAMACPP: Final[EngineName] = "llamacpp"
#: what kvbudget's own simulated server (``kvbudget serve``) reports as its engine: not a
#: registered engine (nothing is planned for it), the identity a measured run checks against
KVBUDGET_SERVE: Final = "kvbudget-serve"

#: every spelling kvbudget reads (lower case), to its one name; filled by registration
ALIASES: Final[dict[str, EngineName]] = {}
#: how engine identities and calibration profiles write each engine (recorded files keep it)
REPORTED: Final[dict[EngineName, str]] = {}


@dataclass(frozen=True, slots=True)
class NameChoices:
    """Field metadata: the registered names a field takes (``--engine``'s choices, read when the
    command line is parsed, so a name registered later is offered too)."""

    names: Callable[[], tuple[str, ...]]


def register_engine_name(
    name: str, *, aliases: Iterable[str] = (), reported: str | None = None
) -> EngineName:
    """Register ``name`` (lower case), its other spellings and how it reports itself; registering
    the same again is a no-op, a spelling claimed by another engine is refused."""
    if name != name.lower() or not name or " " in name:
        raise ValueError(f"engine name {name!r}: one lower-case word")
    spellings = {name, *(a.lower() for a in aliases)}
    for spelling in spellings:
        owner = ALIASES.get(spelling)
        if owner is not None and owner != name:
            raise ValueError(f"engine spelling {spelling!r} is registered to {owner!r}")
    for spelling in spellings:
        ALIASES[spelling] = name
    REPORTED[name] = reported or REPORTED.get(name, name)
    return name


register_engine_name(VLLM)
register_engine_name(SGLANG)
register_engine_name(
    LLAMACPP,
    aliases=("llama.cpp", "llama-cpp", "llama_cpp", "llama-server", "llamaserver"),
    reported="llama.cpp",
)


def engine_names() -> tuple[EngineName, ...]:
    """The registered engines, in the order kvbudget lists them (registration order)."""
    return tuple(REPORTED)


def engine_of(text: str | None) -> EngineName | None:
    """The engine ``text`` names: a name or alias, alone or before a version
    (``"llama.cpp b4500"``), in any case; ``None`` when it names none of them."""
    if not text:
        return None
    words = text.strip().lower().split(maxsplit=1)
    return ALIASES.get(words[0]) if words else None


def is_engine(text: str | None, name: EngineName) -> bool:
    """Whether ``text`` (a name, an alias or a profile's ``engine``) names engine ``name``."""
    return engine_of(text) == name


def parse_engine(text: str, field: str) -> EngineName:
    """``text``'s engine, or one line naming ``field``, the value and the choices."""
    name = engine_of(text)
    if name is None:
        choices = ", ".join(engine_names())
        raise ConfigError(
            f"{field}: {shown_value(text)} is no engine kvbudget knows; use one of {choices}",
            field=field,
        )
    return name
