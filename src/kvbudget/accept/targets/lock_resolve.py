"""Resolve the object lock against what the started target observed.

* A field the target read back with the same value becomes ``confirmed`` (its source named);
  a different value is a ``mismatch`` — both values are shown and the field blocks.
* A field the target says is meaningless (a simulated GPU's driver) is ``not_applicable``.
* A field the plan does not give is shown as ``default`` with its source (the schema's default
  or the target's own setting), never as ``requested``; the target may still confirm it.
* Every field that ends neither ``confirmed`` nor ``not_applicable`` is on the blocking list.
"""

from __future__ import annotations

from typing import Any

from kvbudget.accept.plan.lock import ObjectLock, flatten_lock, given_fields, lock_value
from kvbudget.accept.result import LockEntry
from kvbudget.accept.targets.base import TargetInfo


def resolve_lock(
    lock: ObjectLock, info: TargetInfo, *, computed: dict[str, tuple[Any, str]] | None = None
) -> tuple[list[LockEntry], list[str]]:
    """Lock entries for the report and the blocking list (one line per field)."""
    computed = computed or {}
    entries: list[LockEntry] = []
    blocking: list[str] = []
    given = given_fields(lock)
    for name, locked in flatten_lock(lock).items():
        value = lock_value(locked.value)
        entry = LockEntry(
            field=name, value=value, status=locked.status, source=locked.source, note=locked.note
        )
        if name not in given:
            entry = entry.model_copy(
                update={
                    "status": "default",
                    "source": "not in the plan: kvbudget's default"
                    if value is not None
                    else "not in the plan: the target's own setting",
                    "note": "default (not in the plan)",
                }
            )
        if name in computed and (value in (None, "auto") or value == computed[name][0]):
            got, source = computed[name]
            entry = entry.model_copy(update={"value": got, "status": "confirmed", "source": source})
        elif name in computed and name in given:
            got, source = computed[name]
            entry = entry.model_copy(
                update={"status": "mismatch", "observed": lock_value(got), "source": source}
            )
        elif name in info.not_applicable and locked.status != "confirmed":
            entry = entry.model_copy(
                update={"status": "not_applicable", "note": info.not_applicable[name]}
            )
        elif name == "prefix_caching" and "prefix_caching.enabled" in info.observed:
            # the engine reports whether prefix caching is on; the salt policy is what
            # kvbudget itself sends with each request (cache_salt), so it is the plan's
            got, source = info.observed["prefix_caching.enabled"]
            want = (value or {}).get("enabled", True) if isinstance(value, dict) else None
            status = "confirmed" if want is None or bool(got) == bool(want) else "mismatch"
            shown = {**(value or {}), "enabled": bool(got)} if isinstance(value, dict) else value
            entry = entry.model_copy(
                update={
                    "value": shown if status == "confirmed" else value,
                    "status": status,
                    "source": f"{source}; salt policy sent by kvbudget",
                    "observed": {"enabled": bool(got)},
                }
            )
        elif name in info.observed:
            got, source = info.observed[name]
            got = lock_value(got)
            if value is None or got == value:
                entry = entry.model_copy(
                    update={"value": got, "status": "confirmed", "source": source, "observed": got}
                )
            else:
                entry = entry.model_copy(
                    update={"status": "mismatch", "observed": got, "source": source}
                )
        entries.append(entry)
        if entry.status == "mismatch":
            blocking.append(
                f"{name}: plan says {entry.value!r} but {entry.source} reports {entry.observed!r}"
            )
        elif entry.status == "default":
            shown = "" if entry.value is None else f" = {entry.value!r}"
            blocking.append(
                f"{name}{shown}: default, not in the plan and not confirmed by the target"
            )
        elif entry.status not in ("confirmed", "not_applicable"):
            why = entry.note or (
                "not known" if entry.value is None else "not confirmed by the target"
            )
            shown = "" if entry.value is None else f" = {entry.value!r}"
            blocking.append(f"{name}{shown}: {entry.status} ({why})")
    return entries, blocking
