"""A tiny model config written where a test resolves it (``kvbudget`` reads a config.json path)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_config(tmp_path: Path, config: dict[str, Any], **changes: Any) -> str:
    """``config`` with ``changes`` (a key given ``None`` is left out) as ``tmp_path/config.json``;
    its path."""
    merged = {k: v for k, v in {**config, **changes}.items() if v is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(merged), encoding="utf-8")
    return str(path)
