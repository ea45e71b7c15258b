"""The rollback drill: restart the baseline target, measure time to ready and to the first
successful requests (seed: 回滚包 … 演练必须验证旧版本能重新加载、请求能切回).

Both times are wall-clock measurements on this host (``kind: measured``), whatever the engine:
for ``kvbudget serve`` the engine is simulated but its start-up is a real process start. A drill
that never gets ready, whose requests fail, or that needs longer than ``rollback.max_restore_s``
fails, and a failed drill blocks the overall verdict. The process is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
import urllib.error
import urllib.request
from typing import Any

from kvbudget.accept.plan.checks import RollbackDrill
from kvbudget.accept.plan.planfile import AcceptPlan
from kvbudget.accept.result import StopStatus
from kvbudget.safety.procs import child_preexec
from kvbudget.safety.servers import free_port, stop_process

POLL_S = 0.25
STOP_TIMEOUT_S = 30.0


def _get(url: str, timeout_s: float) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), b""
    except (urllib.error.URLError, OSError, TimeoutError):
        return 0, b""


def _complete(base_url: str, model: str, max_tokens: int, timeout_s: float) -> tuple[bool, str]:
    body = json.dumps(
        {"model": model, "prompt": "rollback drill", "max_tokens": max_tokens, "temperature": 0}
    ).encode()
    req = urllib.request.Request(
        f"{base_url}/v1/completions", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            data = json.loads(resp.read() or b"{}")
            ok = resp.status == 200 and bool(data.get("choices"))
            return ok, "" if ok else f"HTTP {resp.status} without choices"
    except urllib.error.HTTPError as exc:
        return False, f"HTTP {exc.code}"
    except (urllib.error.URLError, OSError, TimeoutError, json.JSONDecodeError) as exc:
        return False, type(exc).__name__


def run_drill(drill: RollbackDrill, *, model: str, max_restore_s: float) -> dict[str, Any]:
    """Start the baseline, wait for health and ``num_requests`` successes, stop it by PID."""
    port = free_port()
    argv = [part.replace("{port}", str(port)) for part in drill.command]
    base_url = drill.base_url.replace("{port}", str(port)).rstrip("/")
    budget_s = max_restore_s * 1.5  # give a slow drill the chance to report how slow it is
    out: dict[str, Any] = {
        "kind": "measured",
        "target": os.path.basename(argv[0]) + (" " + " ".join(argv[1:4]) if len(argv) > 1 else ""),
        "hardware": f"{platform.machine()} host running the drill",
        "max_restore_s": max_restore_s,
        "time_to_ready_s": None,
        "time_to_first_ok_s": None,
        "num_ok": 0,
        "num_failed": 0,
    }
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # dies with kvbudget (kill -9 included)
            argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=child_preexec
        )
    except OSError as exc:
        return {**out, "verdict": "fail", "reason": f"the baseline did not start: {exc}"}
    try:
        while time.monotonic() - started < budget_s:
            if proc.poll() is not None:
                return {
                    **out,
                    "verdict": "fail",
                    "reason": f"the baseline exited with code {proc.returncode} before ready",
                }
            status, _ = _get(base_url + drill.health_path, timeout_s=5)
            if status == 200:
                out["time_to_ready_s"] = round(time.monotonic() - started, 3)
                break
            time.sleep(POLL_S)
        else:
            return {**out, "verdict": "fail", "reason": f"not ready within {budget_s:g} s"}
        _, version = _get(base_url + "/version", timeout_s=5)
        if version:
            out["engine_version"] = version.decode("utf-8", "replace")[:200]
        last_error = ""
        while out["num_ok"] < drill.num_requests and time.monotonic() - started < budget_s:
            ok, err = _complete(base_url, model, drill.max_tokens, timeout_s=60)
            if ok:
                out["num_ok"] += 1
                if out["time_to_first_ok_s"] is None:
                    out["time_to_first_ok_s"] = round(time.monotonic() - started, 3)
            else:
                out["num_failed"] += 1
                last_error = err
                time.sleep(POLL_S)
    finally:
        stop_process(proc, STOP_TIMEOUT_S)
    first = out["time_to_first_ok_s"]
    if out["num_ok"] < drill.num_requests:
        reason = (
            f"{out['num_ok']} of {drill.num_requests} requests succeeded "
            f"({out['num_failed']} failed, last: {last_error or 'timeout'})"
        )
        return {**out, "verdict": "fail", "reason": reason}
    if first is None or first > max_restore_s:
        return {
            **out,
            "verdict": "fail",
            "reason": f"first successful request after {first} s > rollback.max_restore_s "
            f"{max_restore_s:g} s",
        }
    return {
        **out,
        "verdict": "pass",
        "reason": f"ready in {out['time_to_ready_s']} s, first request served in {first} s "
        f"(limit {max_restore_s:g} s), {out['num_ok']} requests ok",
    }


def drill_for(plan: AcceptPlan) -> dict[str, Any]:
    """Run the plan's drill, or {} when the plan declares none."""
    drill = plan.rollback.drill
    if drill is None:
        return {}
    model = drill.served_model or plan.lock.model.id
    return run_drill(drill, model=model, max_restore_s=plan.rollback.max_restore_s)


def drill_stop_status(plan: AcceptPlan, result: dict[str, Any]) -> list[StopStatus]:
    """The stop condition 'rollback drill' (only when the plan declares a drill)."""
    if plan.rollback.drill is None:
        return []
    declared = f"baseline restarts and serves within {plan.rollback.max_restore_s:g} s"
    verdict = result.get("verdict")
    status = {"pass": "not_triggered", "fail": "triggered"}.get(str(verdict), "untested")
    return [
        StopStatus(
            name="rollback drill",
            declared=declared,
            status=status,  # type: ignore[arg-type]
            detail=f"measured: {result.get('reason', 'not run')}",
        )
    ]
