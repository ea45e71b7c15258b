"""Resolve a config dict the way a user's config.json is resolved (shared by the spec tests)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kvbudget.spec.model import ModelSpec
from kvbudget.spec.resolve import resolve_model


def spec_from_config(tmp_path: Path, raw: dict[str, Any]) -> ModelSpec:
    """``raw`` written as ``tmp_path/config.json`` and resolved; the test fails if it is not."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps(raw), encoding="utf-8")
    resolved = resolve_model(str(path))
    assert resolved.status == "resolved", resolved.reason
    assert resolved.spec is not None
    return resolved.spec
