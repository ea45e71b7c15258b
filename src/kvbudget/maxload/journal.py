"""``kvbudget capacity --out DIR`` and ``--resume``: the probes a search measured, kept on disk.

A search against a running server takes minutes; one interrupted (Ctrl-C, a crash, a spent
``--max-duration-s``) keeps every probe that finished, and ``--resume`` continues it. Files in
``DIR`` (``kvbudget bench --out``'s conventions):

* ``capacity-run.json`` — what the search was started with: its options (without the budgets,
  which may change on resume), the resolved scenario (simulator) or workload (server), and the
  server's URLs without credentials. ``--resume`` refuses any other value in one line naming
  the field, both values and the fix.
* ``probes.jsonl`` — one line per finished probe, appended (and fsynced) the moment it ends: its
  key ``(kind, load, seed, num_requests)`` and the whole :class:`~kvbudget.maxload.point.Point`.
  A probe cut short by the interruption is not there and runs again.
* ``capacity.json`` — the answer, written when the search ends.

Why a resumed search gives the uninterrupted answer: the search's next load depends only on the
loads it ran and whether each met the SLO (and, with ``--base-url``, the rate search starts from
the highest requests/s a concurrency probe completed), all of which are recorded exactly (JSON
floats round-trip). Replaying the recorded points in the same order therefore asks for the same
next probe the uninterrupted search would have run, and from there it measures as usual. A
replayed probe is charged to ``--max-total-requests`` as it was when it ran (the budget counts
the whole search); ``--max-duration-s`` counts this invocation's seconds.
"""

from __future__ import annotations

import dataclasses
import json
import time
from pathlib import Path
from typing import Any

from kvbudget.errors import ConfigError
from kvbudget.maxload.point import LoadKind, Point
from kvbudget.metrics.stability import QueueGrowth
from kvbudget.records import JsonlWriter, read_jsonl_dicts
from kvbudget.safety.redact import redact_text, redact_url

RUN_FILE = "capacity-run.json"
PROBES_FILE = "probes.jsonl"
ANSWER_FILE = "capacity.json"
#: what a search in DIR may hold (removed by a new search there, never by --resume)
FILES = (RUN_FILE, PROBES_FILE, ANSWER_FILE)
_FIX = "start a new search with another --out"

ProbeKey = tuple[str, float, int, int]


def point_to_json(point: Point) -> dict[str, Any]:
    """Every field of ``point``, losslessly (:func:`point_from_json` reads it back)."""
    out = dataclasses.asdict(point)
    out["failing"] = list(point.failing)
    return out


def point_from_json(data: dict[str, Any]) -> Point:
    fields = dict(data)
    queue = fields.get("queue")
    fields["queue"] = None if queue is None else QueueGrowth(**queue)
    fields["failing"] = tuple(fields["failing"])
    return Point(**fields)


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested dicts as ``a.b.c`` keys (the field a refusal names)."""
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key in sorted(value):
            out.update(_flat(value[key], f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def _spell(key: str, value: Any) -> str:
    """How to resume with ``value`` again: a flag (``options.--slo``) or a scenario field."""
    if key.startswith("options.--"):
        flag = key.removeprefix("options.")
        return (
            f"resume without {flag}" if value is None else f"resume with {flag} {json.dumps(value)}"
        )
    return f"resume with {key} = {json.dumps(value)} (the scenario as it was)"


def _name(key: str) -> str:
    """``options.--slo`` -> ``--slo``; ``scenario.workload.input_tokens`` as it is."""
    return key.removeprefix("options.")


def _field(key: str) -> str:
    return key.split(".")[-1].lstrip("-").replace("-", "_")


class ProbeJournal:
    """The finished probes of the search in ``out_dir``; :meth:`record` appends one."""

    def __init__(self, out_dir: Path, identity: dict[str, Any], *, resume: bool) -> None:
        self.out_dir = out_dir
        #: the points of each key in the order they ran (a search may run one key twice:
        #: the simulator's estimate and the concurrency search's probe at the batch size)
        self.done: dict[ProbeKey, list[Point]] = {}
        self._used: dict[ProbeKey, int] = {}
        self.num_reused = 0
        self.notes: list[str] = []
        # the stored spelling: URLs without credentials, JSON types (tuples as lists)
        ident = json.loads(redact_text(json.dumps(_redacted(identity), default=str)))
        run_file = out_dir / RUN_FILE
        probes = out_dir / PROBES_FILE
        if resume:
            self._check(run_file, ident)
            self._load(probes)
        else:
            if run_file.exists() or (probes.exists() and probes.stat().st_size > 0):
                raise ConfigError(
                    f"--out {out_dir} already holds a capacity search ({run_file.name}); use "
                    "--resume to continue it or choose another --out",
                    field="out",
                )
            out_dir.mkdir(parents=True, exist_ok=True)
            (out_dir / ANSWER_FILE).unlink(missing_ok=True)
            body = {"identity": ident, "created_unix_s": time.time()}
            run_file.write_text(json.dumps(body, indent=2, sort_keys=True) + "\n")
        self._writer = JsonlWriter(probes, fsync=True)

    def _check(self, run_file: Path, ident: dict[str, Any]) -> None:
        if not run_file.exists():
            raise ConfigError(
                f"--resume: {run_file} does not exist; there is no capacity search to continue "
                f"in {self.out_dir} (start one without --resume)",
                field="resume",
            )
        try:
            old = json.loads(run_file.read_text(encoding="utf-8"))["identity"]
            if not isinstance(old, dict):
                raise TypeError
        except (OSError, ValueError, KeyError, TypeError, RecursionError):
            raise ConfigError(
                f"--resume: {run_file} is not a file kvbudget capacity wrote (unreadable, not "
                f"JSON or no 'identity'); {_FIX}",
                field="resume",
            ) from None
        was, now = _flat(old), _flat(ident)
        diff = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
        if diff:
            key = diff[0]
            names = [_name(k) for k in diff[1:4]]
            more = f" (and {len(diff) - 1} more: {', '.join(names)})" if diff[1:] else ""
            raise ConfigError(
                f"--resume: {_name(key)} is {json.dumps(now.get(key))} now but "
                f"{json.dumps(was.get(key))} in the search recorded in {self.out_dir}{more}; "
                f"{_spell(key, was.get(key))}, or {_FIX}",
                field=_field(key),
            )

    def _load(self, probes: Path) -> None:
        result = read_jsonl_dicts(probes)
        torn = 1 if result.truncated_tail else 0
        inner = result.skipped_lines[: len(result.skipped_lines) - torn]
        if inner:
            raise ConfigError(
                f"--resume: {probes} line {inner[0]} is not a complete JSON object (a write cut "
                f"short?), so a probe's figures are lost; {_FIX}",
                field="resume",
            )
        if torn:
            self.notes.append(f"dropped the torn last line of {probes.name}; that probe runs again")
        for i, row in enumerate(result.items, start=1):
            try:
                kind, load, seed, num = row["key"]
                point = point_from_json(row["point"])
            except (KeyError, TypeError, ValueError):
                raise ConfigError(
                    f"--resume: {probes} line {i} is not a probe kvbudget capacity wrote; {_FIX}",
                    field="resume",
                ) from None
            key = (str(kind), float(load), int(seed), int(num))
            self.done.setdefault(key, []).append(point)

    def recorded(self, kind: LoadKind, load: float, seed: int, num_requests: int) -> Point | None:
        """The point of a probe already run (counted as reused), else None. The n-th call
        with one key gets the n-th point recorded with it, so the replay asks what the
        search asked, in its order."""
        key: ProbeKey = (kind, float(load), seed, num_requests)
        used = self._used.get(key, 0)
        points = self.done.get(key, [])
        if used >= len(points):
            return None
        self._used[key] = used + 1
        self.num_reused += 1
        return points[used]

    def record(
        self, kind: LoadKind, load: float, seed: int, num_requests: int, point: Point
    ) -> None:
        key: ProbeKey = (kind, float(load), seed, num_requests)
        self.done.setdefault(key, []).append(point)
        self._used[key] = self._used.get(key, 0) + 1
        self._writer.write({"key": list(key), "point": point_to_json(point)})

    def write_answer(self, doc: dict[str, Any]) -> Path:
        """``capacity.json`` (written whole, then renamed: never half an answer)."""
        path = self.out_dir / ANSWER_FILE
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(redact_text(json.dumps(doc, indent=2, sort_keys=True, default=str)) + "\n")
        tmp.replace(path)
        return path

    def close(self) -> None:
        self._writer.close()


def _redacted(identity: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in identity.items():
        if isinstance(value, dict):
            out[key] = _redacted(value)
        elif key in ("base_url", "metrics_url") and isinstance(value, str):
            out[key] = redact_url(value)
        else:
            out[key] = value
    return out
