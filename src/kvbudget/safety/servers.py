"""Local server processes: a free loopback port, a start that waits for ready within a deadline,
a stop by PID.

The one owner of these mechanics for every caller that starts a server on this host: the
rollback drill, the vLLM and llama.cpp launchers of ``bench/`` and their pytest fixtures, the
tests that start ``kvbudget serve``. A server started here gets SIGKILL when this process dies
(:func:`~kvbudget.safety.procs.child_preexec`); :func:`stop_process` sends SIGTERM to its PID,
waits for the exit, then SIGKILL; a server started in its own session (``new_session``) also
has its process group killed, which holds the children it leads (vLLM's EngineCore).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Self

from kvbudget.safety.procs import child_preexec

LOOPBACK = "127.0.0.1"


class StartupExitError(RuntimeError):
    """The server process exited before it was ready: its exit code and everything it logged
    (``log_text``, read after the exit, so nothing it printed is lost), for callers that must
    read why (an engine that sizes its pool, then refuses the configuration)."""

    def __init__(self, message: str, *, returncode: int, log_path: Path, log_text: str) -> None:
        super().__init__(message)
        self.returncode = returncode
        self.log_path = log_path
        self.log_text = log_text


def free_port(host: str = LOOPBACK) -> int:
    """A port the OS says is free right now on ``host``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port: int = probe.getsockname()[1]
        return port


def http_get(url: str, timeout_s: float) -> tuple[int, bytes]:
    """Status and body of a GET; an HTTP error status is an answer, not an exception
    (``URLError``/``OSError`` still raise when nothing answers)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), bytes(resp.read())
    except urllib.error.HTTPError as exc:
        return int(exc.code), bytes(exc.read())


def stop_process(
    proc: subprocess.Popen[Any], timeout_s: float, *, kill_group: bool = False
) -> None:
    """SIGTERM the PID and wait for the exit (SIGKILL after ``timeout_s``); with ``kill_group``
    then SIGKILL what is left of the process group it leads."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=timeout_s)
    if kill_group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)


@dataclass(kw_only=True)
class LocalServer:
    """A server process on loopback that logs to ``log_path`` (subclasses build the command);
    a context manager that stops it on exit."""

    log_path: Path
    args: list[str]
    port: int = 0
    proc: subprocess.Popen[bytes] | None = None
    version: str = ""
    started_s: float = 0.0
    startup_s: float = 0.0
    new_session: bool = False
    stop_timeout_s: float = 30.0
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def log_text(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def get(self, path: str, timeout_s: float = 10.0) -> tuple[int, bytes]:
        return http_get(self.base_url + path, timeout_s)

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, f"GET {path} answered {status}: {body[:200]!r}"
        return json.loads(body)

    def post_json(self, path: str, body: dict[str, Any], timeout_s: float = 300.0) -> Any:
        req = urllib.request.Request(
            self.base_url + path,
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            raw = resp.read()
            return json.loads(raw) if raw.strip() else None

    def metrics_text(self) -> str:
        status, body = self.get("/metrics")
        assert status == 200, f"/metrics answered {status}: {body[:200]!r}"
        return body.decode()

    def launch(
        self,
        cmd: Sequence[str],
        *,
        env: Mapping[str, str],
        name: str,
        timeout_s: float,
        poll_s: float,
        tail_lines: int = 30,
    ) -> None:
        """Start ``cmd`` (stdout and stderr to the log) and wait until ``/health`` answers 200.

        Raises :class:`StartupExitError` (a ``RuntimeError`` whose message ends with the log's
        last lines and which carries the whole log) when the process exits first, and
        ``RuntimeError`` (after stopping it) when ``timeout_s`` passes.
        """
        self._log = self.log_path.open("wb")
        self.started_s = time.monotonic()
        self.proc = subprocess.Popen(
            list(cmd),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            start_new_session=self.new_session,
            preexec_fn=child_preexec,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                text = self.log_text()
                tail = "\n".join(text.splitlines()[-tail_lines:])
                raise StartupExitError(
                    f"{name} exited with {self.proc.returncode} while starting "
                    f"({' '.join(self.args)}); log {self.log_path}:\n{tail}",
                    returncode=self.proc.returncode,
                    log_path=self.log_path,
                    log_text=text,
                )
            with contextlib.suppress(urllib.error.URLError, ConnectionError, OSError):
                status, _ = self.get("/health", timeout_s=2.0)
                if status == 200:
                    self.startup_s = time.monotonic() - self.started_s
                    return
            time.sleep(poll_s)
        self.stop()
        raise RuntimeError(f"{name} not healthy after {timeout_s:.0f} s; log {self.log_path}")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop by PID (:func:`stop_process`), waiting for the exit; close the log."""
        if self.proc is not None:
            stop_process(self.proc, self.stop_timeout_s, kill_group=self.new_session)
        if self._log is not None:
            self._log.close()
            self._log = None
