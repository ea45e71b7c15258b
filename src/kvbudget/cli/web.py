"""``kvbudget web``: serve the calculator page and its JSON API (loopback by default)."""

from __future__ import annotations

import click

from kvbudget.web.server import DEFAULT_HOST, DEFAULT_PORT, check_bindable, is_loopback


@click.command("web")
@click.option(
    "--host",
    default=DEFAULT_HOST,
    show_default=True,
    help="Address to listen on. Keep the loopback default unless you mean to expose the page: "
    "it has no authentication.",
)
@click.option(
    "--port",
    default=DEFAULT_PORT,
    show_default=True,
    type=click.IntRange(1, 65535),
    help="TCP port to listen on.",
)
@click.option(
    "--allowed-host",
    "allowed_hosts",
    multiple=True,
    help="Also answer requests whose Host header names this host (repeatable); by default "
    "only 127.0.0.1, localhost, [::1] and --host are answered, so a page elsewhere cannot "
    "drive this server through DNS rebinding.",
)
def web(host: str, port: int, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the KV-cache calculator page, model planner, chart and result viewer.

    The page loads nothing from the network; every figure comes from the JSON API under
    /api/... (OpenAPI at /openapi.json, a local API page at /docs), which calls the same
    library functions as 'kvbudget calc' and 'kvbudget plan'. Stop with Ctrl-C.
    """
    from kvbudget.web.server import serve

    check_bindable(host, port)
    if not is_loopback(host):
        click.echo(
            f"warning: listening on {host}, not loopback; anyone who can reach it can use the "
            "page (no authentication)",
            err=True,
        )
    shown = f"[{host}]" if ":" in host else host
    click.echo(f"kvbudget web: http://{shown}:{port}/  (Ctrl-C to stop)", err=True)
    try:
        serve(host, port, allowed_hosts)
    except KeyboardInterrupt:  # uvicorn re-raises the SIGINT/SIGTERM it shut down on
        click.echo("kvbudget web: stopped", err=True)
