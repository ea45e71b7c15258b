"""Run the web app with uvicorn: in the foreground (``kvbudget web``) or in a thread (tests)."""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
import time
from collections.abc import Sequence
from types import TracebackType

import uvicorn

from kvbudget.errors import ConfigError
from kvbudget.safety.servers import free_port
from kvbudget.web.app import create_app

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
#: on SIGTERM/SIGINT, requests still in flight get this long before they are cancelled (uvicorn
#: waits for them forever by default, so one slow client kept ``kvbudget web`` from exiting)
GRACEFUL_SHUTDOWN_S = 5


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and ``localhost``."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bindable(host: str, port: int) -> None:
    """Fail early, in one line, when the address cannot be bound."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise ConfigError(
                f"port: cannot listen on {host}:{port} ({exc.strerror or exc}); "
                "pick a free port with --port or another address with --host",
                field="port",
            ) from exc


class _ShutdownLines(logging.Filter):
    """uvicorn's shutdown in kvbudget's words: the requests cancelled after the grace period
    are one line, not one traceback each (their ``CancelledError`` is the shutdown itself)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, asyncio.CancelledError):
            return False
        if isinstance(record.msg, str) and record.msg.startswith("Cancel %s running task"):
            record.msg = (
                "kvbudget web: stopping; %s request(s) still in flight after "
                f"{GRACEFUL_SHUTDOWN_S} s were cancelled"
            )
        return True


def make_server(host: str, port: int, extra_hosts: Sequence[str] = ()) -> uvicorn.Server:
    """A uvicorn server for the app, quiet (no access log: paths may carry user data); it
    answers Host headers naming loopback, ``host`` or one of ``extra_hosts``."""
    config = uvicorn.Config(
        create_app(host, extra_hosts),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        server_header=False,
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
    )
    logging.getLogger("uvicorn.error").addFilter(_ShutdownLines())
    return uvicorn.Server(config)


def serve(
    host: str = DEFAULT_HOST, port: int = DEFAULT_PORT, extra_hosts: Sequence[str] = ()
) -> None:
    """Serve until interrupted (the ``kvbudget web`` command)."""
    check_bindable(host, port)
    make_server(host, port, extra_hosts).run()


class BackgroundServer:
    """The app on a loopback port in a daemon thread; ``with BackgroundServer() as url: ...``."""

    def __init__(
        self, host: str = DEFAULT_HOST, port: int | None = None, start_timeout_s: float = 20.0
    ):
        if not is_loopback(host):
            raise ConfigError(f"host: background servers bind loopback only, got {host!r}")
        self.host = host
        self.port = port if port is not None else free_port(host)
        self.start_timeout_s = start_timeout_s
        self.server = make_server(self.host, self.port)
        self.thread = threading.Thread(target=self.server.run, name="kvbudget-web", daemon=True)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if not self.thread.is_alive() or time.monotonic() > deadline:
                self.server.should_exit = True
                raise RuntimeError(f"web server did not start on {self.url}")
            time.sleep(0.05)
        return self.url

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10.0)
