"""``kvbudget audit``'s output: progress on stderr, the result as Markdown or JSON (and into
``--out``), and the exit when every request failed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


def progress_printer(enabled: bool) -> Callable[[int, int], None] | None:
    if not enabled:
        return None

    def show(done: int, total: int) -> None:
        click.echo(f"\r  {done}/{total}", err=True, nl=done == total)

    return show


def prepare_out(opts: dict[str, Any], name: str) -> None:
    if opts["out_dir"] is not None:
        from kvbudget.cli.outdir import prepare_out_dir

        prepare_out_dir(opts["out_dir"], (f"{name}.json", f"{name}.md"))


def emit_result(result: Any, opts: dict[str, Any], name: str) -> None:
    out_dir: Path | None = opts["out_dir"]
    if out_dir is not None:
        from kvbudget.records import write_document

        out_dir.mkdir(parents=True, exist_ok=True)
        write_document(out_dir / f"{name}.json", result)
        from kvbudget.safety.redact import redact_text

        (out_dir / f"{name}.md").write_text(
            redact_text(result.to_markdown(heading_level=1)), encoding="utf-8"
        )
    if opts["as_json"]:
        click.echo(json.dumps(result.model_dump(mode="json"), indent=2))
    else:
        click.echo(result.to_markdown())
        if out_dir is not None:
            click.echo(f"Wrote {out_dir / (name + '.json')} and {out_dir / (name + '.md')}")


def fail_if_all_failed(outcomes: list[tuple[str | None, bool]], result: Any, what: str) -> None:
    """Exit 4 in one line when every request of the audit failed (the result is written)."""
    from kvbudget.errors import RunFailedError
    from kvbudget.load.diagnosis import diagnose, digest, failure_from_text

    failures = [failure_from_text(error) for error, ok in outcomes if not ok]
    where = (result.target or {}).get("base_url") or "the simulator"
    line = diagnose(digest(failures, len(outcomes)), url=str(where), what=what)
    if line is not None:
        raise RunFailedError(line)
