"""`kvbudget report` / `kvbudget accept` bad inputs: one line naming the input and the fix, exit 2,
no traceback, and no older complete-looking report left beside a run that could not start."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvbudget.cli.main import main

REPO = Path(__file__).resolve().parents[3]
DEMO = REPO / "examples" / "acceptance-demo.yaml"


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    code = info.value.code
    assert isinstance(code, int)
    return code, err


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, "does not exist"),
        ('{"kind": "accept"', "is not readable JSON"),
        ("[]", "is not a valid AcceptResult"),
        ('{"schema_version": "x"}', "field 'schema_version'"),
    ],
)
def test_report_bad_result_file_is_one_line_with_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, expected: str
) -> None:
    path = tmp_path / "result.json"
    if content is not None:
        path.write_text(content, encoding="utf-8")
    code, err = run_cli(["report", str(path)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ReportError: ")
    assert str(path) in lines[0]
    assert expected in lines[0]
    assert "DIR/report.json" in lines[0]  # the remedy
    assert "Traceback" not in err


def test_accept_unwritable_out_is_a_config_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    out = blocker / "out"
    code, err = run_cli(["accept", str(DEMO), "--out", str(out), "--quiet"], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("ConfigError: --out: ")
    assert str(out) in lines[0]
    assert "writable directory" in lines[0]


def test_accept_removes_an_older_report_before_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that stops (here: the target fails at once) leaves no report.* of an older run."""
    from kvbudget.accept import acceptance
    from kvbudget.errors import TargetError

    out = tmp_path / "out"
    out.mkdir()
    for name in ("report.json", "report.md", "report.html"):
        (out / name).write_text(json.dumps({"old": True}), encoding="utf-8")

    def failing_run(*args: object, **kwargs: object) -> None:
        raise TargetError("target: stopped for the test; nothing to fix")

    monkeypatch.setattr(acceptance, "run_acceptance", failing_run)
    code, err = run_cli(["accept", str(DEMO), "--out", str(out), "--quiet"], capsys)
    assert code == 2
    assert err.startswith("TargetError: ")
    # only the output-directory lock (kvbudget.safety.outlock) is left
    assert sorted(p.name for p in out.iterdir()) == [".kvbudget.lock"]


def test_accept_http_plan_with_unset_key_variable_fails_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import yaml

    monkeypatch.delenv("KVB_REVIEW_SURELY_UNSET", raising=False)
    data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
    data["target"] = {
        "kind": "http",
        "base_url": "http://127.0.0.1:9",  # nothing listens: a request would be a TargetError
        "api_key_env": "KVB_REVIEW_SURELY_UNSET",
    }
    data["comparisons"] = []  # an http target cannot run a variant: refused at validation
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    code, err = run_cli(["accept", str(plan), "--out", str(tmp_path / "out"), "--quiet"], capsys)
    assert code == 2
    # the value is never echoed: it may be a key written in place of the name (issue 30)
    assert err.strip() == (
        "ConfigError: target.api_key_env: the environment variable it names (23 characters, not "
        "shown) is not set or empty; export it (the name, e.g. OPENAI_API_KEY, not the key "
        "itself) or drop target.api_key_env"
    )


def test_accept_empty_plan_names_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan = tmp_path / "empty.yaml"
    plan.write_text("", encoding="utf-8")
    code, err = run_cli(["accept", str(plan), "--quiet"], capsys)
    assert code == 2
    assert "got NoneType; start from examples/acceptance-demo.yaml" in err
    assert len(err.strip().splitlines()) == 1


def test_report_unwritable_out_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from kvbudget.records import write_document

    from .test_report_render import make_doc

    result = tmp_path / "report.json"
    write_document(result, make_doc())
    blocker = tmp_path / "file"
    blocker.write_text("not a directory", encoding="utf-8")
    code, err = run_cli(["report", str(result), "--out", str(blocker / "out")], capsys)
    assert code == 2
    assert err.strip().startswith("ConfigError: --out: cannot write to directory")
    assert len(err.strip().splitlines()) == 1
