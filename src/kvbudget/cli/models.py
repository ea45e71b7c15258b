"""``kvbudget models``: the bundled catalog with each model's layer kinds."""

from __future__ import annotations

import json
from typing import Any

import click
from rich.console import Console
from rich.table import Table

from kvbudget.spec.catalog import list_catalog
from kvbudget.spec.resolve import resolve_model


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of a table.")
def models(as_json: bool) -> None:
    """List the bundled model configs (catalog ids usable with --model) and their layer kinds."""
    rows: list[dict[str, Any]] = []
    for entry in list_catalog():
        resolved = resolve_model(entry.model_id)
        spec = resolved.spec
        rows.append(
            {
                "model_id": entry.model_id,
                "architecture": spec.architecture if spec else None,
                "model_type": spec.model_type if spec else None,
                "num_layers": spec.num_layers if spec else None,
                "layer_kinds": spec.kind_counts() if spec else {},
                "status": resolved.status,
                "config_status": entry.status,
                "note": entry.note,
            }
        )
    if as_json:
        click.echo(json.dumps({"schema": "kvbudget.models/1", "models": rows}, indent=2))
        return
    table = Table(title="kvbudget catalog (bundled config.json files)")
    for col in ("model id", "architecture", "layers", "layer kinds", "config copy"):
        table.add_column(col, overflow="fold")
    for row in rows:
        kinds = ", ".join(f"{k} x{v}" for k, v in row["layer_kinds"].items()) or row["status"]
        table.add_row(
            row["model_id"],
            str(row["architecture"]),
            str(row["num_layers"]),
            kinds,
            row["config_status"],
        )
    Console(width=160).print(table)
