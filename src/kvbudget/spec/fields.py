"""Read config fields and record each one in the ledger.

:class:`FieldReader` looks a key up in this order: a ``--set`` override (source ``user``), the
config (``config`` or ``catalog``), then a default the caller names (``architecture_default`` or
``default``). A required field that is found nowhere is collected in ``missing`` instead of being
guessed; the resolver turns that into status ``not_applicable``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from kvbudget import __version__
from kvbudget.errors import SpecError
from kvbudget.safety.limits import MAX_LAYERS, MAX_MODEL_DIM, MAX_TOKENS
from kvbudget.spec.provenance import LedgerEntry, SourceKind

_MISSING: Any = object()


def int_field_bound(key: str) -> int:
    """Largest value a config integer may have (docs/limits.md): layer counts
    :data:`~kvbudget.safety.limits.MAX_LAYERS`, lengths and windows
    :data:`~kvbudget.safety.limits.MAX_TOKENS`, every other dimension
    :data:`~kvbudget.safety.limits.MAX_MODEL_DIM`."""
    low = key.lower()
    if "layers" in low:
        return MAX_LAYERS
    if any(word in low for word in ("position", "window", "len", "chunk", "ctx", "token")):
        return MAX_TOKENS
    return MAX_MODEL_DIM


class FieldReader:
    """Looks up config keys with provenance; one per resolution."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        prefix: str = "",
        location: str = "config.json",
        config_source: SourceKind = "config",
        sha256: str | None = None,
        revision: str | None = None,
        overrides: dict[str, Any] | None = None,
    ) -> None:
        self.config = config
        self.prefix = prefix
        self.location = location
        self.config_source: SourceKind = config_source
        self.sha256 = sha256
        self.revision = revision
        self.overrides = dict(overrides or {})
        self.used_overrides: set[str] = set()
        self.read_at = datetime.now(UTC).isoformat(timespec="seconds")
        self.entries: dict[str, LedgerEntry] = {}
        self.missing: list[str] = []
        self.notes: list[str] = []
        #: config keys looked up with :meth:`get` (read, not just peeked at)
        self.read_keys: set[str] = set()

    # -- raw access -------------------------------------------------------------------------
    def has(self, key: str) -> bool:
        return key in self.overrides or self.config.get(key) is not None

    def peek(self, key: str, default: Any = None) -> Any:
        """The effective value without recording it (an override counts as used)."""
        if key in self.overrides:
            self.used_overrides.add(key)
            return self.overrides[key]
        value = self.config.get(key)
        return default if value is None else value

    # -- recording --------------------------------------------------------------------------
    def record(
        self, name: str, value: Any, source: SourceKind, *, location: str = "", note: str = ""
    ) -> None:
        self.entries[name] = LedgerEntry(
            field=name,
            value=value,
            source=source,
            location=location,
            config_sha256=self.sha256,
            revision=self.revision,
            tool_version=__version__,
            read_at=self.read_at,
            note=note,
        )

    def flag_conflict(self, name: str, text: str) -> None:
        entry = self.entries.get(name)
        if entry is not None:
            self.entries[name] = entry.with_conflict(text)

    def get(
        self,
        key: str,
        *,
        default: Any = _MISSING,
        default_source: SourceKind = "default",
        note: str = "",
        required: bool = True,
        name: str | None = None,
        null_is_value: bool = False,
    ) -> Any:
        """Value of ``key`` with its provenance recorded under ``name`` (default: ``key``).

        ``null_is_value``: an explicit ``null`` in the config is the answer (e.g. "no window"),
        not a reason to fall back to the default.
        """
        name = name or key
        self.read_keys.add(key)
        where = f"{self.location}:{self.prefix}{key}"
        config_value = self.config.get(key)
        if (
            null_is_value
            and key not in self.overrides
            and key in self.config
            and config_value is None
        ):
            self.record(
                name, None, self.config_source, location=where, note=note or "explicit null"
            )
            return None
        if key in self.overrides:
            value = self.overrides[key]
            self.used_overrides.add(key)
            self.record(name, value, "user", location=f"--set {key}", note=note)
            if config_value is not None and config_value != value:
                self.flag_conflict(
                    name,
                    f"config says {config_value!r}, --set says {value!r}; --set wins (user > config > defaults)",
                )
            return value
        if config_value is not None:
            self.record(name, config_value, self.config_source, location=where, note=note)
            return config_value
        if default is not _MISSING:
            self.record(name, default, default_source, location=where + " (absent)", note=note)
            return default
        if required and key not in self.missing:
            self.missing.append(key)
        return None

    def get_int(self, key: str, **kwargs: Any) -> int | None:
        """Like :meth:`get` for a positive integer; a wrong type is a :class:`SpecError`."""
        value = self.get(key, **kwargs)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise SpecError(
                f"{self.prefix}{key}: expected a positive integer, got {str(value)[:40]!r}; fix the config or --set {key}=N",
                field=key,
            )
        bound = int_field_bound(key)
        if value > bound:
            raise SpecError(
                f"{self.prefix}{key}: {str(value)[:40]} is beyond the limit of {bound:,} "
                "(docs/limits.md); fix the config or --set "
                f"{key}=N",
                field=key,
            )
        return value

    def derive(self, name: str, value: Any, note: str) -> None:
        self.record(name, value, "derived", note=note)

    def unused_overrides(self) -> list[str]:
        return sorted(set(self.overrides) - self.used_overrides)
