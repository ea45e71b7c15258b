"""What ``kvbudget web`` refuses before a request reaches the API (issue 30).

* **Host header** (DNS rebinding): a page on ``evil.example`` whose name a rebinding DNS server
  points at 127.0.0.1 sends ``Host: evil.example``; only the loopback names (``127.0.0.1``,
  ``localhost``, ``[::1]``, any port), the address the server was told to bind (``--host``) and
  the names given with ``--allowed-host`` are answered. Anything else, or no Host at all, is
  HTTP 421 (Misdirected Request) in the API's one error shape.
* **Body size**: at most :data:`MAX_BODY_BYTES` a request (``Content-Length`` required) and at
  most :data:`MAX_BODIES_IN_FLIGHT_BYTES` across the requests being handled at once; a request
  that would pass the total waits for nothing: it is a 503 with ``Retry-After``, so parallel
  large bodies cannot take the process's memory with them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

#: largest request body (a config.json is a few KiB; a result document a few MiB)
MAX_BODY_BYTES = 16 * 1024 * 1024
#: bodies of all requests being handled at once, by their Content-Length
MAX_BODIES_IN_FLIGHT_BYTES = 32 * 1024 * 1024
#: the names of this machine's loopback interface a browser may put in Host
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


def host_name(header: str) -> str:
    """The name of a Host header without its port, lower-cased (``[::1]:8765`` -> ``[::1]``)."""
    value = header.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[: end + 1] if end > 0 else value
    name, _, port = value.rpartition(":")
    return name if name and port.isdigit() else value


def allowed_hosts(bind_host: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """Host names the server answers: loopback, the bound address, and ``extra``."""
    names = set(LOOPBACK_HOSTS)
    for host in (bind_host, *extra):
        host = host.strip().lower()
        names.add(f"[{host}]" if ":" in host and not host.startswith("[") else host)
    return frozenset(names)


class BodyBudget:
    """Bytes of request bodies in flight, reserved by Content-Length before a body is read."""

    def __init__(self, limit_bytes: int = MAX_BODIES_IN_FLIGHT_BYTES) -> None:
        self.limit_bytes = limit_bytes
        self.in_flight_bytes = 0
        self._lock = threading.Lock()

    def reserve(self, num_bytes: int) -> bool:
        with self._lock:
            if self.in_flight_bytes + num_bytes > self.limit_bytes:
                return False
            self.in_flight_bytes += num_bytes
            return True

    def release(self, num_bytes: int) -> None:
        with self._lock:
            self.in_flight_bytes -= num_bytes
