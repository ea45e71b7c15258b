"""Find a model's ``config.json``: a path, a snapshot directory, the catalog or the HF cache.

Order: an existing path (file or directory) wins, then a bundled catalog id, then a repo id in
the local Hugging Face cache (``huggingface_hub.try_to_load_from_cache``). Nothing is downloaded
unless ``allow_download`` is true (the CLI's ``--download``).

A ModelOpt checkpoint (ModelOpt 0.29 and before) keeps its quantization in a separate
``hf_quant_config.json`` beside ``config.json``; vLLM reads it as the config's
``quantization_config`` when ``config.json`` has none (vLLM 0.32.0
``transformers_utils/config.py`` lines 889-900), and so does kvbudget: from a snapshot
directory, beside a file named ``config.json``, from the Hugging Face cache (not downloaded) and
from the catalog's bundled copy.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from kvbudget.errors import SpecError
from kvbudget.safety.limits import MAX_CONFIG_BYTES, MAX_JSON_DEPTH
from kvbudget.spec.catalog import find_catalog_entry

Origin = Literal["file", "snapshot", "catalog", "hf_cache", "download"]

_SNAPSHOT_RE = re.compile(
    r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/(?P<rev>[0-9a-f]{7,64})"
)
_REPO_ID_RE = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
#: the file a ModelOpt checkpoint keeps its quantization in when config.json has none
HF_QUANT_CONFIG = "hf_quant_config.json"


@dataclass(frozen=True, slots=True)
class ConfigSource:
    """A config file that was found and read."""

    model_id: str
    path: Path
    origin: Origin
    sha256: str
    revision: str | None
    raw: dict[str, Any] = field(repr=False)
    #: ``hf_quant_config.json`` read beside it (only when ``raw`` has no ``quantization_config``)
    quant_path: Path | None = None
    quant_raw: dict[str, Any] | None = field(default=None, repr=False)


def _depth(value: Any) -> int:
    """Nesting depth of parsed JSON (iterative: no recursion limit)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        deepest = max(deepest, level)
        if level > MAX_JSON_DEPTH:
            break
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return deepest


def _read(path: Path, model_id: str, origin: Origin) -> ConfigSource:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SpecError(
            f"model: cannot read {path}: {exc.strerror}; check the path", field="model"
        ) from None
    if len(data) > MAX_CONFIG_BYTES:
        raise SpecError(
            f"model: {path} is {len(data):,} bytes, more than the {MAX_CONFIG_BYTES:,} a "
            "config.json may have; pass the model's config.json",
            field="model",
        )
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        raise SpecError(
            f"model: {path} is UTF-16; save it as UTF-8 (e.g. iconv -f UTF-16 -t UTF-8)",
            field="model",
        )
    try:
        raw = json.loads(data.decode("utf-8-sig"))
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"model: {path} is not valid UTF-8 (byte {exc.start}); save it as UTF-8",
            field="model",
        ) from None
    except RecursionError:
        raise SpecError(
            f"model: {path} nests deeper than {MAX_JSON_DEPTH} levels; pass a config.json",
            field="model",
        ) from None
    except json.JSONDecodeError as exc:
        raise SpecError(
            f"model: {path} is not valid JSON (line {exc.lineno}: {exc.msg}); "
            + (
                "fix or remove it (vLLM reads it as the quantization config)"
                if path.name == HF_QUANT_CONFIG
                else "pass a Hugging Face config.json"
            ),
            field="model",
        ) from None
    if not isinstance(raw, dict):
        raise SpecError(
            f"model: {path} holds a JSON {type(raw).__name__}, not an object; pass a config.json",
            field="model",
        )
    if _depth(raw) > MAX_JSON_DEPTH:
        raise SpecError(
            f"model: {path} nests deeper than {MAX_JSON_DEPTH} levels; pass a config.json",
            field="model",
        )
    match = _SNAPSHOT_RE.search(path.resolve().as_posix())
    revision = match.group("rev") if match else None
    if match and origin in ("file", "snapshot"):
        model_id = f"{match.group('org')}/{match.group('name')}"
    return ConfigSource(model_id, path, origin, hashlib.sha256(data).hexdigest(), revision, raw)


def with_hf_quant_config(source: ConfigSource, quant_path: Path | None) -> ConfigSource:
    """``source`` with the ``hf_quant_config.json`` at ``quant_path`` when that file exists and
    the config has no ``quantization_config`` of its own (vLLM's order)."""
    has_own = source.raw.get("quantization_config") is not None
    if quant_path is None or has_own or not quant_path.is_file():
        return source
    quant = _read(quant_path, source.model_id, source.origin)
    return replace(source, quant_path=quant_path, quant_raw=quant.raw)


def _from_hf_cache(repo_id: str, allow_download: bool) -> ConfigSource | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return None
    cached = try_to_load_from_cache(repo_id, "config.json")
    if isinstance(cached, str):
        quant = try_to_load_from_cache(repo_id, HF_QUANT_CONFIG)
        return with_hf_quant_config(
            _read(Path(cached), repo_id, "hf_cache"),
            Path(quant) if isinstance(quant, str) else None,
        )
    if not allow_download:
        return None
    from huggingface_hub import hf_hub_download

    try:
        downloaded = hf_hub_download(repo_id, "config.json")
    except Exception as exc:
        raise SpecError(
            f"model: could not download config.json of {repo_id!r} ({type(exc).__name__}); check the id and network",
            field="model",
        ) from None
    return _read(Path(downloaded), repo_id, "download")


def locate_config(ref: str, *, allow_download: bool = False) -> ConfigSource:
    """Find and read the config for ``ref`` (path, snapshot dir, catalog id or cached repo id)."""
    text = ref.strip()
    if not text:
        raise SpecError(
            "model: empty reference; pass a config.json path, a catalog id or a repo id",
            field="model",
        )
    path = Path(text).expanduser()
    if path.is_dir():
        config = path / "config.json"
        if not config.is_file():
            raise SpecError(
                f"model: directory {path} has no config.json; pass the snapshot directory",
                field="model",
            )
        return with_hf_quant_config(_read(config, path.name, "snapshot"), path / HF_QUANT_CONFIG)
    if path.is_file():
        beside = path.parent / HF_QUANT_CONFIG if path.name == "config.json" else None
        return with_hf_quant_config(_read(path, path.parent.name or path.stem, "file"), beside)
    entry = find_catalog_entry(text)
    if entry is not None:
        return with_hf_quant_config(
            _read(entry.path, entry.model_id, "catalog"), entry.hf_quant_config_path
        )
    if _REPO_ID_RE.match(text):
        found = _from_hf_cache(text, allow_download)
        if found is not None:
            return found
    raise SpecError(
        f"model: {text!r} is not a file, not a bundled catalog id (see 'kvbudget models') and not in the "
        "local Hugging Face cache; pass a config.json path or snapshot directory, or fetch its "
        f"config once into that cache with 'kvbudget calc --model {text} --download'",
        field="model",
    )
