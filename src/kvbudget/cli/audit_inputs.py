"""``kvbudget audit``'s input files: the tenants' salts (``--salt-file``, secrets) and the prompts
of ``--prompts-file``."""

from __future__ import annotations

import json
from pathlib import Path

from kvbudget.errors import ConfigError


def load_salts(path: Path | None) -> dict[str, str] | None:
    if path is None:
        return None
    import yaml

    from kvbudget.safety.yamlload import load_yaml_text, read_text_file

    try:
        raw = load_yaml_text(read_text_file(path, what="--salt-file"), source="--salt-file")
    except (OSError, yaml.YAMLError, ConfigError) as exc:
        # never echo the file's content (it holds secrets)
        raise ConfigError(
            f"--salt-file {path}: cannot read it as YAML ({type(exc).__name__}); write "
            "'tenant-a: SALT' and 'tenant-b: SALT' lines",
            field="salt_file",
        ) from None
    if not isinstance(raw, dict) or not all(isinstance(k, str) for k in raw):
        raise ConfigError(
            f"--salt-file {path}: must be a YAML mapping of tenant name to salt string",
            field="salt_file",
        )
    from kvbudget.safety.redact import register_secret

    salts = {k: v for k, v in raw.items() if isinstance(v, str)}
    for salt in salts.values():
        register_secret(salt)  # salts are secrets too
    return salts


def read_prompts(path: Path) -> list[tuple[tuple[int, ...], str]]:
    from kvbudget.workload.tokenizer import get_tokenizer

    tok = get_tokenizer()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            f"--prompts-file {path}: cannot read it ({type(exc).__name__})", field="prompts_file"
        ) from None
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        text = obj.get("prompt") if isinstance(obj, dict) else None
        if not isinstance(text, str) or not text:
            raise ConfigError(
                f"--prompts-file {path}: line {i} is not a JSON object with a non-empty "
                '"prompt" string; write one {"prompt": "..."} per line',
                field="prompts_file",
            )
        out.append((tuple(tok.encode(text)), text))
    return out
