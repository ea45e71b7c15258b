"""One name per serving engine, and every spelling of it kvbudget reads.

kvbudget plans, simulates, deploys and measures three engines. Their one name,
:data:`EngineName`, is how the ``--engine`` flags spell them (``vllm``, ``sglang``,
``llamacpp``). Elsewhere an engine arrives spelled otherwise: llama.cpp reports itself as
``llama.cpp`` (what ``kvbudget calibrate`` and the load identity record, kept as written so
recorded files do not change), its server binary is ``llama-server``, a lock file may say
``llama-cpp``, and a calibration profile's ``engine`` carries a version after the name
(``llama.cpp b4500``). Code that compares engines asks :func:`engine_of` or :func:`is_engine`
instead of comparing those strings.

A name that is none of the three (``kvbudget-serve``, ``unknown``, ``hf`` for the
transformers layout of ``calc``) is no engine here: :func:`engine_of` gives ``None`` and
:func:`parse_engine` refuses it in one line. ``calc``'s layouts are their own type,
``kvbudget.capacity.layouts.base.Layout`` (``hf`` and these names); the engines ``plan`` models
are ``kvbudget.capacity.plan_types.Engine`` (vLLM and SGLang). A flag or a request field is parsed
into one of these types once, where it enters; inside, code compares the typed names, which
mypy --strict checks (a misspelt ``engine == "llama.cpp"`` is a non-overlapping comparison).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

from kvbudget.errors import ConfigError, shown_value

EngineName = Literal["vllm", "sglang", "llamacpp"]
#: the engines, in the order kvbudget lists them
ENGINE_NAMES: Final[tuple[EngineName, ...]] = get_args(EngineName)

#: every spelling kvbudget reads (lower case), to its one name
ALIASES: Final[dict[str, EngineName]] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llamacpp",
    "llama.cpp": "llamacpp",
    "llama-cpp": "llamacpp",
    "llama_cpp": "llamacpp",
    "llama-server": "llamacpp",
    "llamaserver": "llamacpp",
}

#: how engine identities and calibration profiles write each engine (recorded files keep it)
REPORTED: Final[dict[EngineName, str]] = {
    "vllm": "vllm",
    "sglang": "sglang",
    "llamacpp": "llama.cpp",
}


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
        choices = ", ".join(ENGINE_NAMES)
        raise ConfigError(
            f"{field}: {shown_value(text)} is no engine kvbudget knows; use one of {choices}",
            field=field,
        )
    return name
