"""accept under kill -9 (serve and http targets), a second run on one --out, a failed audit
and --resume with another plan."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from kvbudget.cli.main import main
from kvbudget.errors import TargetError
from tests.integration.accept.test_accept_http_targets import tiny_plan
from tests.integration.hostile.conftest import alive, children_of, env_with_tmp, lines, wait_for
from tests.integration.hostile.server import HostileServer

SECRET_PROMPT = "private quality prompt 4711: the launch code is swordfish"


def _write(data: dict[str, Any], path: Path) -> Path:
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _accept(plan: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "kvbudget",
        "accept",
        str(plan),
        "--out",
        str(out),
        "--quiet",
        *extra,
    ]


def _all_descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for child in children_of(todo.pop()):
            found.append(child)
            todo.append(child)
    return found


@pytest.mark.slow
def test_kill9_accept_serve_target_leaves_no_child_and_no_temp_dir(tmp_path: Path) -> None:
    plan = _write(tiny_plan({"kind": "serve", "speedup": 2}, []), tmp_path / "plan.yaml")
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    proc = subprocess.Popen(
        _accept(plan, out),
        env=env_with_tmp(tmp),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    assert wait_for(lambda: lines(out / "progress.jsonl") >= 1, 300)
    kids = _all_descendants(proc.pid)
    assert kids, "the serve target started no kvbudget serve child"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert wait_for(lambda: not any(alive(k) for k in kids), 60), "serve outlived accept"
    assert wait_for(lambda: not list(tmp.glob("kvbudget-*")), 60), list(tmp.iterdir())


@pytest.mark.slow
def test_kill9_accept_http_target_leaves_no_prompt_text(tmp_path: Path) -> None:
    prompt = tmp_path / "private.txt"
    prompt.write_text(SECRET_PROMPT, encoding="utf-8")
    quality = [
        {
            "id": "p",
            "kind": "exact",
            "expected": "x",
            "tiers": ["short", "medium", "long"],
            "prompt_file": str(prompt),
        }
    ]
    out, tmp = tmp_path / "out", tmp_path / "tmp"
    with HostileServer(token_delay_s=0.05) as server:
        target = {"kind": "http", "base_url": server.url, "served_model": "m"}
        plan = _write(tiny_plan(target, quality), tmp_path / "plan.yaml")
        proc = subprocess.Popen(
            _accept(plan, out),
            env=env_with_tmp(tmp),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        assert wait_for(lambda: server.num_posts >= 3 and bool(list(tmp.glob("kvbudget-*"))), 300)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert wait_for(lambda: not list(tmp.glob("kvbudget-*")), 60), list(tmp.rglob("*"))
    for path in out.rglob("*"):  # nothing private was asked to be kept
        if path.is_file():
            assert b"swordfish" not in path.read_bytes(), path


@pytest.mark.slow
def test_second_accept_on_one_out_is_refused(tmp_path: Path) -> None:
    plan = _write(tiny_plan({"kind": "sim"}, []), tmp_path / "plan.yaml")
    out = tmp_path / "out"
    first = subprocess.Popen(
        _accept(plan, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert wait_for(
        lambda: (
            (out / ".kvbudget.lock").exists()
            and (out / ".kvbudget.lock").read_text().startswith("pid")
        ),
        120,
    )
    second = subprocess.run(
        _accept(plan, out), capture_output=True, text=True, timeout=300, check=False
    )
    _, first_err = first.communicate(timeout=900)
    assert second.returncode == 2, second.stderr
    # plan warnings (warning: ...) may come first; the refusal is the one error line
    lines = second.stderr.strip().splitlines()
    assert lines[-1].startswith("ConfigError: --out")
    assert all(line.startswith("warning: ") for line in lines[:-1]), lines
    assert first.returncode == 0, first_err[-2000:]
    assert len(json.loads((out / "report.json").read_text())["cells"]) == 9


def test_failed_audit_is_a_report_section_and_cells_stay(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvbudget.accept.judge import audits

    async def refused(*args: Any, **kwargs: Any) -> Any:
        raise TargetError("HTTP 429 from the endpoint: too many requests")

    monkeypatch.setattr(audits, "run_isolation", refused)
    data = tiny_plan({"kind": "sim"}, [])
    data["audits"] = {"isolation": True, "reuse": False}
    plan = _write(data, tmp_path / "plan.yaml")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    assert info.value.code == 1  # not 2: the input was fine
    doc = json.loads((out / "report.json").read_text())
    assert len(doc["cells"]) == 9
    assert doc["audits"]["isolation"]["verdict"] == "inconclusive"
    assert doc["audits"]["isolation"]["status"] == "failed"
    assert "429" in doc["audits"]["isolation"]["reason"]
    assert "could not run" in (out / "report.md").read_text()
    stop = next(s for s in doc["stop_conditions"] if s["name"] == "cross-tenant cache hit")
    assert stop["status"] == "untested" and "failed" in stop["detail"]
    assert "audit(s) failed" in capsys.readouterr().err


def test_resume_with_another_plan_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tiny_plan({"kind": "sim"}, [])
    plan = _write(data, tmp_path / "plan.yaml")
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as info:
        main(["accept", str(plan), "--out", str(out), "--quiet"])
    assert info.value.code == 0
    data["seed"] = int(data.get("seed", 0)) + 1
    other = _write(data, tmp_path / "other.yaml")
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["accept", str(other), "--out", str(out), "--quiet", "--resume"])
    err = capsys.readouterr().err.strip().splitlines()[-1]  # after any plan warnings
    assert info.value.code == 2
    assert err.startswith("ConfigError: --resume") and "another plan" in err
    data["target"] = {"kind": "serve"}
    third = _write(data, tmp_path / "third.yaml")
    with pytest.raises(SystemExit) as info:
        main(["accept", str(third), "--out", str(out), "--quiet", "--resume"])
    assert "another target" in capsys.readouterr().err
