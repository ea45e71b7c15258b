"""The bundled catalog: real ``config.json`` files shipped with kvbudget.

Catalog ids are Hugging Face repo ids (``meta-llama/Llama-3.1-8B``); the file for ``org/name`` is
``models/org--name.json``. ``sources.json`` records where each copy came from and how well it was
verified (copied from ``models/SOURCES.md``). A ModelOpt checkpoint whose ``config.json`` has no
``quantization_config`` ships its ``hf_quant_config.json`` too: ``models/hf_quant_config/org--name.json``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

CATALOG_DIR = Path(__file__).resolve().parent
MODELS_DIR = CATALOG_DIR / "models"
#: the ``hf_quant_config.json`` of catalog models that have one (same file names as ``MODELS_DIR``)
HF_QUANT_DIR = MODELS_DIR / "hf_quant_config"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    """One bundled model config."""

    model_id: str
    path: Path
    status: str
    note: str

    @property
    def hf_quant_config_path(self) -> Path | None:
        """The bundled copy of the model's ``hf_quant_config.json``, if it has one."""
        path = HF_QUANT_DIR / self.path.name
        return path if path.is_file() else None


@cache
def _sources() -> dict[str, dict[str, str]]:
    data = json.loads((CATALOG_DIR / "sources.json").read_text(encoding="utf-8"))
    models: dict[str, dict[str, str]] = data["models"]
    return models


def _model_id(path: Path) -> str:
    return path.stem.replace("--", "/", 1)


def list_catalog() -> list[CatalogEntry]:
    """Every bundled config, sorted by id."""
    entries = []
    for path in sorted(MODELS_DIR.glob("*.json")):
        model_id = _model_id(path)
        info = _sources().get(model_id, {})
        entries.append(
            CatalogEntry(model_id, path, info.get("status", "unknown"), info.get("note", ""))
        )
    return entries


def find_catalog_entry(model_id: str) -> CatalogEntry | None:
    """The entry for ``model_id`` (case-insensitive), or None."""
    wanted = model_id.strip().lower()
    for entry in list_catalog():
        if entry.model_id.lower() == wanted:
            return entry
    return None
