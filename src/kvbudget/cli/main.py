"""The ``kvbudget`` command group.

Subcommands live in their own modules (``kvbudget.cli.<name>``) and are loaded lazily, so
``kvbudget calc`` does not import the simulator or the web server. Every
:class:`~kvbudget.errors.KvbudgetError` becomes one line on stderr (``Kind: message``) and a
non-zero exit; so do click's usage errors. Set ``KVBUDGET_DEBUG=1`` to see tracebacks of
unexpected errors.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any

import click

from kvbudget import __version__
from kvbudget.errors import KvbudgetError

#: command name -> "module:attribute" of its click command. Each needs docs/commands/<name>.md.
COMMANDS: dict[str, str] = {
    "calc": "kvbudget.cli.calc:calc",
    "models": "kvbudget.cli.models:models",
    "plan": "kvbudget.cli.plan:plan",
    "gpus": "kvbudget.cli.plan:gpus",
    "sim": "kvbudget.cli.sim:sim",
    "bench": "kvbudget.cli.bench:bench",
    "serve": "kvbudget.cli.serve:serve",
    "accept": "kvbudget.cli.accept:accept",
    "report": "kvbudget.cli.report:report",
    "audit": "kvbudget.cli.audit:audit",
    "web": "kvbudget.cli.web:web",
    "calibrate": "kvbudget.cli.calibrate:calibrate",
    "fingerprint": "kvbudget.cli.fingerprint:fingerprint",
    "deploy": "kvbudget.cli.deploy:deploy",
    "canary": "kvbudget.cli.canary:canary",
    "sweep": "kvbudget.cli.sweep:sweep",
    "capacity": "kvbudget.cli.capacity:capacity",
}

#: command name -> its one-line summary in ``kvbudget --help``, so listing the commands imports
#: none of them (a test checks each is the start of the command's own help text)
SUMMARIES: dict[str, str] = {
    "calc": "KV-cache bytes per token, per sequence and in total",
    "models": "List the bundled model configs (catalog ids usable with --model)",
    "plan": "Plan the engine's KV pool, the three budgets and the GPUs a load needs",
    "gpus": "List the GPU catalog: memory as the device reports it, dense TFLOPS, bandwidths",
    "sim": "Simulate serving: plan-built replicas, a router, a workload",
    "bench": "Measure an OpenAI-compatible server (vLLM, SGLang, llama.cpp, kvbudget serve ...)",
    "serve": "Serve the simulated engine over OpenAI-compatible HTTP (real time)",
    "accept": "Run a capacity acceptance plan",
    "report": "Re-render report.md and report.html from an acceptance report.json",
    "audit": "Audit a prefix cache: cross-tenant isolation and correctness of reused KV",
    "web": "Serve the KV-cache calculator page, model planner, chart and result viewer",
    "calibrate": "Measure a short planned series on a running engine and fit the step-time model",
    "fingerprint": "A deployment's KV-cache compatibility identity",
    "deploy": "Render Kubernetes manifests and Prometheus alert rules",
    "canary": "Run the short, low-concurrency cells of PLAN_FILE against its target",
    "sweep": "Simulate every point of GRID",
    "capacity": "The highest load that meets an SLO: Poisson rate and closed-loop concurrency",
}


def available_commands() -> dict[str, str]:
    """Commands whose module exists in this installation."""
    found: dict[str, str] = {}
    for name, target in COMMANDS.items():
        module_name = target.split(":", 1)[0]
        if importlib.util.find_spec(module_name) is not None:
            found[name] = target
    return found


class LazyGroup(click.Group):
    """A group that imports a subcommand's module only when it is invoked."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(available_commands())

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list from :data:`SUMMARIES`: ``kvbudget --help`` imports no command."""
        rows = [(name, SUMMARIES.get(name, "")) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = available_commands().get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":", 1)
        module = importlib.import_module(module_name)
        command = getattr(module, attr)
        assert isinstance(command, click.Command)
        from kvbudget.cli.guards import harden

        return harden(command)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="kvbudget")
def cli() -> None:
    """kvbudget: auditable KV-cache budgets for LLM serving.

    calc (structural bytes) -> plan (engine pool, GPUs) -> sim (what-if) ->
    bench (measure a real engine) -> accept (nine-cell verdicts and report).
    """


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _err(text: str) -> None:
    """One line on stderr, with the run's secrets scrubbed (kvbudget.safety.redact), a kind
    prefix never doubled and long echoed values cut (kvbudget.errors)."""
    from kvbudget.errors import cap_long_runs, without_kind
    from kvbudget.safety.redact import redact_text

    kind, sep, rest = text.partition(": ")
    if sep:
        text = f"{kind}: {without_kind(rest)}"
    click.echo(redact_text(cap_long_runs(text)), err=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread so every ``finally`` (temporary directories, child
    processes, open records) runs before the process exits."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated()


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point with one-line errors; SIGTERM runs every cleanup."""
    import signal

    from kvbudget.safety.redact import redact_std_streams

    previous = signal.getsignal(signal.SIGTERM)
    installed = previous is signal.SIG_DFL
    if installed:
        signal.signal(signal.SIGTERM, _on_sigterm)
    redact_std_streams()  # a key a server echoed never reaches the terminal either
    try:
        _main(argv)
    finally:
        if installed:
            signal.signal(signal.SIGTERM, previous)


def _main(argv: list[str] | None) -> None:
    try:
        result = cli.main(args=argv, prog_name="kvbudget", standalone_mode=False)
    except KvbudgetError as exc:
        _err(exc.one_line())
        sys.exit(exc.exit_code)
    except click.exceptions.Abort:
        _err("Aborted.")
        sys.exit(130)
    except click.UsageError as exc:
        hint = ""
        if exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        _err(f"UsageError: {_one_line(exc.format_message())}{hint}")
        sys.exit(2)
    except click.ClickException as exc:
        _err(f"Error: {_one_line(exc.format_message())}")
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        sys.exit(0)
    except Terminated:
        _err("Terminated (SIGTERM); finished records are kept.")
        sys.exit(143)
    except KeyboardInterrupt:
        _err("Interrupted.")
        sys.exit(130)
    except OSError as exc:
        # the environment, not kvbudget: a full disk, a read-only path, a vanished file
        where = f" {exc.filename!r}" if exc.filename else ""
        _err(
            f"IOError: {exc.strerror or type(exc).__name__}{where}; free space, fix the "
            "permissions or choose another path"
        )
        sys.exit(74)
    except Exception as exc:
        if os.environ.get("KVBUDGET_DEBUG"):
            raise
        _err(
            f"InternalError: {type(exc).__name__}: {_one_line(str(exc))} "
            "(this is a kvbudget bug; rerun with KVBUDGET_DEBUG=1 for the traceback)"
        )
        sys.exit(70)
    sys.exit(result if isinstance(result, int) else 0)


def run_async(coro: Any) -> Any:
    """Run a coroutine at the CLI edge: the event loop of ``accept``, ``audit``, ``bench``,
    ``calibrate`` and ``serve`` (the product's only ``asyncio.run`` in this process).

    Other loops, not started here: ``kvbudget bench``'s spawned worker processes run their
    own (``asyncio.run`` in :mod:`kvbudget.load.workers`), ``kvbudget web`` runs uvicorn's
    (``uvicorn.Server.run`` in :mod:`kvbudget.web.server`), ``bench --ray`` actors run in
    Ray's (:mod:`kvbudget.load.ray_workers`), and the scripts under ``bench/`` call
    ``asyncio.run`` themselves.
    """
    import asyncio

    return asyncio.run(coro)
