"""Issue 30: deploy's output loads in Prometheus and Kubernetes whatever the inputs hold, and an
input those systems would refuse is a one-line error naming it (never exit 0, never a crash).

Oracles: ``promtool check rules`` (Debian's prometheus package, scripts/ensure-prometheus.sh;
these tests fail, not skip, without it) and kubernetes-validate; the expected escapes and
bounds are Prometheus' and Kubernetes' rules (cited in kvbudget/deploy/promql.py and
k8s_checks.py), written here by hand.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from tests.unit.deploy.conftest import DEMO_PLAN, demo_plan_data, load_dir
from tests.unit.deploy.test_manifests import validate_core, validate_pod_template

REPO = Path(__file__).resolve().parents[3]
LLAMA_CONFIG = REPO / "src/kvbudget/spec/catalog/models/meta-llama--Llama-3.1-8B.json"
HOSTILE_ID = 'we"ird\\dir\nx {{ .y }} $(HOME) }}'


def promtool_check(path: Path) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("promtool")
    assert exe, "promtool not found: run scripts/ensure-prometheus.sh"
    return subprocess.run(
        [exe, "check", "rules", str(path)], capture_output=True, text=True, check=False
    )


def run(args: list[str]) -> Any:
    return CliRunner().invoke(deploy, args)


def refused(result: Any, *needles: str) -> str:
    """The one-line error of a refused run (exit non-zero, a kvbudget error, not a crash)."""
    assert result.exit_code != 0, result.output
    from kvbudget.errors import KvbudgetError

    assert isinstance(result.exception, KvbudgetError), repr(result.exception)
    line = result.exception.one_line()
    assert "\n" not in line
    for needle in needles:
        assert needle in line, line
    return line


def hostile_model_plan(tmp_path: Path, **lock: Any) -> Path:
    """The demo plan whose model id is a config directory named with PromQL, YAML, template and
    Kubernetes metacharacters (a path is a valid model id)."""
    model_dir = tmp_path / HOSTILE_ID
    model_dir.mkdir(parents=True)
    shutil.copy(LLAMA_CONFIG, model_dir / "config.json")
    data = demo_plan_data()
    data["lock"]["model"]["id"] = str(model_dir)
    data["lock"].update(lock)
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def _go_unquote(literal: str) -> str:
    """A PromQL double-quoted string's value (the escapes label_value writes), by hand."""
    body = literal[1:-1]
    simple = {"\\": "\\", '"': '"', "n": "\n", "t": "\t"}
    return re.sub(
        r"\\(x[0-9a-f]{2}|.)",
        lambda m: chr(int(m.group(1)[1:], 16)) if len(m.group(1)) == 3 else simple[m.group(1)],
        body,
    )


def test_hostile_model_id_gives_rules_promtool_loads_with_the_id_intact(tmp_path: Path) -> None:
    plan = hostile_model_plan(tmp_path)
    out = tmp_path / "out"
    result = run([str(plan), "--out", str(out), "--model-pvc", "weights"])
    assert result.exit_code == 0, result.output
    check = promtool_check(out / "alerts.rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr
    rules = yaml.safe_load((out / "alerts.rules.yaml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    literals = {
        m.group(1) for e in exprs for m in re.finditer(r'model_name=("(?:[^"\\]|\\.)*")', e)
    }
    assert literals and {_go_unquote(x) for x in literals} == {str(tmp_path / HOSTILE_ID)}


def test_dollar_paren_in_the_model_path_reaches_the_engine_unexpanded(tmp_path: Path) -> None:
    """Kubernetes expands $(VAR) in command/args and reduces $$ to $: every $ is written $$."""
    plan = hostile_model_plan(tmp_path)
    files = {}
    for name, extra in (("dep", []), ("lws", ["--gpus-per-node", "1"])):
        out = tmp_path / name
        lock = {"tensor_parallel": 2, "gpu": {"type": "H100-SXM-80GB", "count": 2}}
        data = yaml.safe_load(plan.read_text())
        data["lock"].update(lock if name == "lws" else {})
        plan.write_text(yaml.safe_dump(data), encoding="utf-8")
        result = run(
            [
                str(plan),
                "--out",
                str(out),
                "--model-path",
                "/m/$(HOME)/$x",
                "--model-pvc",
                "weights",
                *extra,
            ]
        )
        assert result.exit_code == 0, result.output
        files[name] = load_dir(out)
    dep = files["dep"]["deployment.yaml"][0]
    validate_core(dep)
    command = dep["spec"]["template"]["spec"]["containers"][0]["command"]
    assert "/m/$$(HOME)/$$x" in command
    assert all("$(" not in arg.replace("$$(", "") for arg in command)
    group = files["lws"]["leaderworkerset.yaml"][0]["spec"]["leaderWorkerTemplate"]
    validate_pod_template(group["leaderTemplate"])
    leader = group["leaderTemplate"]["spec"]["containers"][0]["command"][2]
    assert "'/m/$$(HOME)/$$x'" in leader  # shell-quoted, then escaped for Kubernetes
    worker = group["workerTemplate"]["spec"]["containers"][0]["command"][2]
    assert "$(LWS_LEADER_ADDRESS)" in worker  # the one reference meant to expand


@pytest.mark.parametrize(
    "namespace",
    # (an empty value never reaches deploy: the CLI's guard refuses every empty flag value)
    ["Bad_NS", "UPPER", "-lead", "trail-", "a.b", "a b", 'q"', "x" * 64, "ns\n", "ü"],
)
def test_namespace_must_be_a_dns1123_label(tmp_path: Path, namespace: str) -> None:
    refused(run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--namespace", namespace]),
            "--namespace", "DNS-1123")  # fmt: skip
    assert not (tmp_path / "o").exists()


def test_a_63_character_namespace_is_written_and_validates(tmp_path: Path) -> None:
    ns = "a" + "-b" * 31  # 63 characters
    result = run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--namespace", ns])
    assert result.exit_code == 0, result.output
    dep = load_dir(tmp_path / "o")["deployment.yaml"][0]
    assert dep["metadata"]["namespace"] == ns
    validate_core(dep)


def test_service_name_must_start_with_a_letter(tmp_path: Path) -> None:
    refused(run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--service", "9lives"]),
            "--service", "DNS-1035")  # fmt: skip


@pytest.mark.parametrize(
    ("flag", "value", "needle"),
    [
        ("--rate-window", "0s", "zero"),
        ("--rate-window", "0", "zero"),
        ("--rate-window", "5m5m", "not a Prometheus duration"),
        ("--rate-window", "1s1m", "not a Prometheus duration"),
        ("--alert-for", "-1m", "not a Prometheus duration"),
        ("--alert-for", "1.5m", "not a Prometheus duration"),
        ("--alert-for", "300y", "largest duration"),
    ],
)
def test_durations_are_refused_as_prometheus_refuses_them(
    tmp_path: Path, flag: str, value: str, needle: str
) -> None:
    refused(run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), flag, value]), flag, needle)


def test_durations_prometheus_reads_are_accepted(tmp_path: Path) -> None:
    out = tmp_path / "o"
    args = ["--alert-for", "0", "--rate-window", "1h30m15s500ms"]
    result = run([str(DEMO_PLAN), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    check = promtool_check(out / "alerts.rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize(
    "selector",
    [
        'a="b"}) or vector(1) #',
        "a=b",
        'a="b",',
        'a="\\q"',
        'a=~"(?=x)"',
        'a=~"x++"',
        'a=~"("',
        'a=~"(?x)a"',
        'a=~"[[:foo:]]"',
        '1a="b"',
        'a="b"\nc="d"',
    ],
)
def test_metric_selector_must_be_label_matchers(tmp_path: Path, selector: str) -> None:
    refused(run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--metric-selector", selector]),
            "--metric-selector")  # fmt: skip


def test_metric_selector_with_escapes_and_a_regexp_loads(tmp_path: Path) -> None:
    out = tmp_path / "o"
    selector = (
        'namespace!="x\\"y\\\\", pod=~"vllm-.*|sg[a-z]+" ,model_name="\\u00fc\\n",'
        'a=~"(?i)(?P<x>b)[[:alpha:]]c"'
    )
    result = run([str(DEMO_PLAN), "--out", str(out), "--metric-selector", selector])
    assert result.exit_code == 0, result.output
    check = promtool_check(out / "alerts.rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr


def test_image_with_whitespace_is_refused(tmp_path: Path) -> None:
    refused(run([str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--image", "a b"]), "--image")


@pytest.mark.parametrize(
    ("args", "lock", "needles"),
    [
        (["--replicas", "1099511627776"], {}, ("replicas", "--replicas", "int32")),
        (["--max-replicas", "2147483648"], {}, ("maxReplicas", "--max-replicas")),
        (["--replicas", "2000000000"], {}, ("maxReplicas", "2 x --replicas")),
        ([], {"gpu": {"type": "H100-SXM-80GB", "count": 2**40}}, ("replicas", "lock.gpu.count")),
        (["--load-time-s", "1e15"], {}, ("model load time", "--load-time-s")),
        ([], {"offload": "cpu:99999999999999999999GiB"}, ("memory", "lock.offload")),
    ],
)
def test_integers_kubernetes_cannot_hold_are_refused_naming_the_input(
    tmp_path: Path, write_plan: Any, args: list[str], lock: dict[str, Any], needles: tuple[str]
) -> None:
    plan = write_plan(lock) if lock else DEMO_PLAN
    refused(run([str(plan), "--out", str(tmp_path / "o"), *args]), *needles)
    assert not (tmp_path / "o").exists()


def test_a_huge_plan_ceiling_is_refused_not_a_crash(tmp_path: Path) -> None:
    data = demo_plan_data()
    data["stop"]["tpot_s"] = {"p95": 1e308}
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(data), encoding="utf-8")
    refused(run([str(plan), "--out", str(tmp_path / "o")]), "preStop drain", "TPOT 1e+308")


def _mutated(tmp_path: Path, report: Path, name: str, change: Any) -> Path:
    data = json.loads(report.read_text())
    change(data)
    path = tmp_path / name
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _set_e2e(value: float) -> Any:
    def change(data: dict[str, Any]) -> None:
        for cell in data["cells"]:
            cell["summaries"]["e2e_s"]["percentiles"]["p99"]["value"] = value

    return change


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_percentiles_in_a_report_are_one_line_errors(
    tmp_path: Path, accepted_report: Path, value: float
) -> None:
    path = _mutated(tmp_path, accepted_report, "report.json", _set_e2e(value))
    refused(run([str(path), "--out", str(tmp_path / "o")]), "p99.value", "not a finite number")


def test_a_huge_accepted_end_to_end_is_refused_naming_the_cell(
    tmp_path: Path, accepted_report: Path
) -> None:
    path = _mutated(tmp_path, accepted_report, "report.json", _set_e2e(1e300))
    refused(run([str(path), "--out", str(tmp_path / "o")]), "preStop drain", "accepted cell")


def test_template_braces_in_a_cell_id_stay_text(tmp_path: Path, accepted_report: Path) -> None:
    def change(data: dict[str, Any]) -> None:
        for cell in data["cells"]:
            cell["cell_id"] += " {{ .x }} }}{{{"

    path = _mutated(tmp_path, accepted_report, "report.json", change)
    out = tmp_path / "o"
    result = run([str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    check = promtool_check(out / "alerts.rules.yaml")
    assert check.returncode == 0, check.stdout + check.stderr


def test_negative_waiting_never_renders_an_always_firing_alert(
    tmp_path: Path, accepted_report: Path
) -> None:
    def change(data: dict[str, Any]) -> None:
        for cell in data["cells"]:
            cell["timeseries"]["num_waiting"] = [-5.0 for _ in cell["timeseries"]["num_waiting"]]

    path = _mutated(tmp_path, accepted_report, "report.json", change)
    refused(run([str(path), "--out", str(tmp_path / "o")]), "num_waiting", "below 0")


def test_a_duration_in_other_scripts_digits_is_refused() -> None:
    """Python's \\d matches "૯" (Gujarati nine); Prometheus' duration parser does not (found by
    tests/fuzz/test_deploy_report.py: promtool refused a rule file kvbudget had written)."""
    from kvbudget.deploy.promql import duration_ms
    from kvbudget.errors import ConfigError

    with pytest.raises(ConfigError, match="is not a Prometheus duration"):
        duration_ms("\u0aef\u194f\u0663d", flag="--alert-for", positive=False)
    assert duration_ms("1h30m", flag="--alert-for", positive=False) == 5_400_000
