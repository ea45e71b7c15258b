"""Bounded YAML: billion laughs, cycles, deep nesting and bad encodings are one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kvbudget.errors import ConfigError
from kvbudget.safety.yamlload import MAX_YAML_NODES, load_yaml_file, load_yaml_text

LAUGHS = "\n".join(
    ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"{chr(98 + i)}: &{chr(98 + i)} [{','.join(['*' + chr(97 + i)] * 9)}]" for i in range(8)]
)


def test_billion_laughs_is_refused() -> None:
    assert len(LAUGHS) < 1024  # a 1 KB file that expands to 9**9 strings
    with pytest.raises(ConfigError, match=f"more than {MAX_YAML_NODES:,} nodes"):
        load_yaml_text(LAUGHS, source="plan")


def test_small_aliases_still_load() -> None:
    data = load_yaml_text("base: &b {x: 1}\nother: *b\n", source="plan")
    assert data == {"base": {"x": 1}, "other": {"x": 1}}


def test_cycle_and_depth_are_refused() -> None:
    with pytest.raises(ConfigError, match="cycle"):
        load_yaml_text("a: &a [*a]\n", source="plan")
    with pytest.raises(ConfigError, match="deeper than"):
        load_yaml_text("[" * 5000 + "]" * 5000, source="plan")


def test_syntax_error_and_encodings(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("a: [1, 2\n")
    with pytest.raises(ConfigError, match="line 2, column 1"):
        load_yaml_file(bad, what="plan")
    utf16 = tmp_path / "u16.yaml"
    utf16.write_bytes("name: x\n".encode("utf-16"))
    with pytest.raises(ConfigError, match="UTF-16"):
        load_yaml_file(utf16, what="plan")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"name: \xff\xfe\xfa\n")
    with pytest.raises(ConfigError, match="not valid UTF-8"):
        load_yaml_file(latin, what="plan")
    with pytest.raises(ConfigError, match="not found"):
        load_yaml_file(tmp_path / "missing.yaml", what="plan")
    assert isinstance(yaml.YAMLError("x"), Exception)
