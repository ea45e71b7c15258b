"""Ray behind one module: the optional import, a local or cluster start, and one install hint.

Ray is an optional extra (``pip install 'kvbudget[ray]'``). Everything that runs on Ray
(``kvbudget sweep``, ``kvbudget bench --ray``) imports it through :func:`import_ray`, so a missing
Ray is one line naming the command and the fix, never a traceback.

A local Ray (the default) is started with exactly the CPUs asked for, no dashboard, no usage
statistics, and a small object store (the results are rows and records, not tensors); with an
address (``--ray-address``, e.g. ``ray://head:10001`` or ``auto``) the caller joins that cluster
instead, and every node needs kvbudget installed. A Ray already initialised in this process (a
test's ``ray.init(num_cpus=2)``) is used as it is.
"""

from __future__ import annotations

import logging
import os
import socket
from types import ModuleType
from typing import Any

from kvbudget.errors import ConfigError, TargetError

INSTALL_HINT = "pip install 'kvbudget[ray]'"
#: a cluster started by ``ray start`` (Ray 2.60) takes a token by default, and a driver joining
#: it sends none unless told (``ray/_private/authentication/authentication_token_setup.py``)
TOKEN_HINT = (
    "; a cluster with token authentication (the default of `ray start` in Ray 2.60) needs "
    "RAY_AUTH_MODE=token and its token (RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH or ~/.ray/auth_token)"
)
#: object store of a local Ray: rows and records are small
LOCAL_OBJECT_STORE_BYTES = 128 * 1024 * 1024


def import_ray(what: str) -> ModuleType:
    """The ``ray`` module, or a one-line ConfigError saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            f"{what} needs Ray, which is not installed; install it with {INSTALL_HINT}",
            field="ray",
        ) from None
    return ray


def check_reachable(what: str, address: str, timeout_s: float = 5.0) -> None:
    """A TCP connect to ``HOST:PORT`` (or ``ray://HOST:PORT``) before Ray tries to join it.

    Ray itself waits for minutes on an unreachable GCS, printing warnings; this is one line
    within ``timeout_s``. ``auto`` (the cluster this node belongs to) is left to Ray.
    """
    if address == "auto":
        return
    hostport = address.removeprefix("ray://").rstrip("/")
    host, _, port_text = hostport.rpartition(":")
    if not host or not port_text.isdigit():
        raise ConfigError(
            f"--ray-address {address}: expected HOST:PORT, ray://HOST:PORT or auto",
            field="ray_address",
        )
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout_s):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise TargetError(
            f"{what}: the Ray cluster at {address} does not answer ({reason}; waited at most "
            f"{timeout_s:g} s); check --ray-address and that the cluster is up (ray status)"
        ) from None


def ensure_ray(what: str, *, address: str | None, num_cpus: int | None) -> ModuleType:
    """Ray initialised in this process: reuse one that is, else start local or join ``address``."""
    ray = import_ray(what)
    if ray.is_initialized():
        return ray
    # no usage report (nothing leaves the machine) and no prompt about it
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": False,
        "logging_level": logging.ERROR,  # Ray's own start-up chatter stays off the terminal
    }
    if address is None:
        kwargs["num_cpus"] = num_cpus
        kwargs["object_store_memory"] = LOCAL_OBJECT_STORE_BYTES
    else:
        check_reachable(what, address)
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except (ConnectionError, RuntimeError, ValueError) as exc:
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        raise TargetError(
            f"{what}: cannot start or join {where} ({' '.join(str(exc).split())[:200]}); "
            "check --ray-address (e.g. ray://HEAD:10001 or auto) and that the cluster is up"
            + (TOKEN_HINT if address else "")
        ) from None
    return ray


def cluster_cpus(ray: ModuleType) -> int:
    """CPUs the Ray cluster offers (at least 1)."""
    return max(1, int(ray.cluster_resources().get("CPU", 1)))
