"""One name per engine (``kvbudget.engine_name``): every spelling kvbudget reads maps to it."""

from __future__ import annotations

import pytest

from kvbudget.engine_name import REPORTED, engine_names, engine_of, is_engine, parse_engine
from kvbudget.errors import ConfigError


def test_the_names_are_the_engine_flags_spelling() -> None:
    # `kvbudget plan --engine vllm|sglang`, `kvbudget sim --engine vllm|llamacpp`
    assert engine_names() == ("vllm", "sglang", "llamacpp")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("vllm", "vllm"),
        ("vLLM", "vllm"),
        ("vllm 0.11.0", "vllm"),  # a calibration profile's engine: name and version
        ("sglang", "sglang"),
        ("llamacpp", "llamacpp"),  # /v1/models owned_by of llama-server
        ("llama.cpp", "llamacpp"),  # what calibrate and the load identity record
        ("llama.cpp b4500", "llamacpp"),
        ("  Llama.CPP  ", "llamacpp"),
        ("llama-cpp", "llamacpp"),
        ("llama_cpp", "llamacpp"),
        ("llama-server", "llamacpp"),  # the server binary
        ("llamaserver", "llamacpp"),
    ],
)
def test_every_spelling_is_one_engine(text: str, name: str) -> None:
    assert engine_of(text) == name
    assert is_engine(text, name)
    assert parse_engine(text, "lock.engine.name") == name


@pytest.mark.parametrize("text", [None, "", "  ", "kvbudget-serve", "unknown", "hf", "vllm-cpu"])
def test_what_is_no_engine_is_none(text: str | None) -> None:
    assert engine_of(text) is None
    assert not any(is_engine(text, n) for n in engine_names())


def test_recorded_files_keep_llamacpp_as_it_reports_itself() -> None:
    assert REPORTED["llamacpp"] == "llama.cpp"
    assert all(engine_of(REPORTED[n]) == n for n in engine_names())


def test_an_unknown_engine_is_one_line_naming_field_value_and_choices() -> None:
    with pytest.raises(ConfigError) as err:
        parse_engine("trtllm", "lock.engine.name")
    assert err.value.one_line() == (
        "ConfigError: lock.engine.name: 'trtllm' is no engine kvbudget knows; "
        "use one of vllm, sglang, llamacpp"
    )
    assert err.value.field == "lock.engine.name"
