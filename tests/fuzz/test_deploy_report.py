"""Property fuzz of kvbudget deploy and report (issue 30): PromQL and Kubernetes-name
metacharacters, out-of-range integers, NaN and Infinity in report.json.

Every example either exits 0 with output the oracles accept, or is refused in one
``Kind: message`` line (a KvbudgetError, exit non-zero); never a crash. Oracles:
``promtool check rules`` (one call for all rule files of a test, batched) and
kubernetes-validate on the core objects. Seeded (derandomized), small ``max_examples``.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvbudget.cli.deploy import deploy
from kvbudget.cli.report import report
from kvbudget.errors import KvbudgetError
from tests.fuzz.test_files import _small_plan

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "examples" / "acceptance-demo.yaml"
LLAMA = REPO / "src/kvbudget/spec/catalog/models/meta-llama--Llama-3.1-8B.json"
CORE = {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"}
META = "\\\"'\n\t{}[](),=~!$`#|*+?.^-_ aZ09ü\x07"
SETTINGS = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)


def _outcome(result: Any) -> str | None:
    """None when the run behaved (exit 0, or a one-line kvbudget refusal); else the problem."""
    if result.exit_code == 0:
        return None
    exc = result.exception
    if isinstance(exc, SystemExit) and result.exit_code == 2 and "Error:" in result.output:
        return None  # click's usage error: kvbudget's main prints it as one UsageError line
    if not isinstance(exc, KvbudgetError):
        return f"crash: {exc!r}"
    if "\n" in exc.one_line():
        return f"not one line: {exc.one_line()!r}"
    return None


def _check_output(out: Path, rule_files: list[Path], n: int) -> None:
    for path in sorted(out.glob("*.yaml")):
        if path.name == "alerts.rules.yaml":
            kept = out.parent / f"rules-{n}.yaml"
            shutil.copy(path, kept)
            rule_files.append(kept)
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc and doc.get("kind") in CORE:
                kubernetes_validate.validate(doc, "1.30.0", strict=True)
            elif doc and doc.get("kind") == "LeaderWorkerSet":  # a CRD: its pod templates
                group = doc["spec"]["leaderWorkerTemplate"]
                for role in ("leaderTemplate", "workerTemplate"):
                    template = {"apiVersion": "v1", "kind": "PodTemplate",
                                "metadata": {"name": "t"}, "template": group[role]}  # fmt: skip
                    kubernetes_validate.validate(template, "1.30.0", strict=True)


def _promtool(rule_files: list[Path]) -> None:
    exe = shutil.which("promtool")
    assert exe, "promtool not found: run scripts/ensure-prometheus.sh"
    if rule_files:
        proc = subprocess.run(
            [exe, "check", "rules", *map(str, rule_files)], capture_output=True, text=True
        )
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]


_label_value = st.text(alphabet=META, max_size=12)
_matcher = st.builds(
    lambda name, op, value: f"{name}{op}{json.dumps(value)}",
    st.sampled_from(["a", "pod", "model_name", "1x", "a-b"]),
    st.sampled_from(["=", "!=", "=~", "!~", "=="]),
    _label_value,
)
_selector = st.one_of(
    st.lists(_matcher, min_size=1, max_size=3).map(",".join), st.text(alphabet=META, max_size=20)
)
_duration = st.one_of(
    st.from_regex(r"(\d{1,3}(y|w|d|h|m|s|ms)){1,3}", fullmatch=True),
    st.sampled_from(["0", "0s", "", "5m", "1h30m", "-1m", "1.5m", "300y", "9999999999y"]),
)
_name = st.one_of(
    st.from_regex(r"[a-z0-9][-a-z0-9]{0,70}", fullmatch=True), st.text(alphabet=META, max_size=70)
)


def _mostly(valid: Any, hostile: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``valid`` two times in three, so the examples reach the writers, not only refusals."""
    return st.integers(0, 2).flatmap(lambda k: hostile if k == 0 else st.just(valid))


_int = st.one_of(st.integers(1, 8), st.integers(2**31 - 2, 2**31 + 1), st.integers(1, 2**64))


@pytest.mark.timeout(300)
def test_deploy_flags_and_model_ids(tmp_path: Path) -> None:
    rule_files: list[Path] = []
    bad: list[str] = []
    count = iter(range(10**6))

    @SETTINGS
    # three hostile model ids with plain flags always reach the rule writer, whatever the
    # derandomized draws refuse first (promtool then reads their rules)
    @example(model='we"ird\\\\id', namespace="default", service="svc", selector=None, window="5m", alert_for="10m", replicas=None, max_replicas=None, model_path=None, tp=1)  # fmt: skip
    @example(model='{{ $labels }}', namespace="default", service="svc", selector=None, window="5m", alert_for="10m", replicas=None, max_replicas=None, model_path=None, tp=2)  # fmt: skip
    @example(model='a\\tb$(X)', namespace="default", service="svc", selector=None, window="5m", alert_for="10m", replicas=None, max_replicas=None, model_path=None, tp=16)  # fmt: skip
    @given(
        model=st.text(alphabet=META.replace("\n", ""), min_size=1, max_size=30),
        namespace=_mostly("default", _name),
        service=_mostly("svc", _name),
        selector=_mostly(None, _selector),
        window=_mostly("5m", _duration),
        alert_for=_mostly("10m", _duration),
        replicas=_mostly(None, _int),
        max_replicas=_mostly(None, _int),
        model_path=st.none() | st.text(alphabet=META, min_size=1, max_size=20),
        tp=st.sampled_from([1, 2, 16]),
    )
    def one(**kw: Any) -> None:
        n = next(count)
        case = tmp_path / f"c{n}"
        model_dir = case / kw["model"].replace("/", "_").replace("\0", "_")
        model_dir.mkdir(parents=True)
        shutil.copy(LLAMA, model_dir / "config.json")
        data = yaml.safe_load(DEMO.read_text(encoding="utf-8"))
        data["lock"]["model"]["id"] = str(model_dir)
        data["lock"]["tensor_parallel"] = kw["tp"]
        data["lock"]["gpu"]["count"] = kw["tp"]
        plan = case / "plan.yaml"
        plan.write_text(yaml.safe_dump(data), encoding="utf-8")
        args = [str(plan), "--out", str(case / "out"), "--namespace", kw["namespace"]]
        args += ["--service", kw["service"], "--rate-window", kw["window"]]
        args += ["--alert-for", kw["alert_for"]]
        args += ["--model-pvc", "weights"]  # the model id is a path in the pod: a claim holds it
        for flag, key in (("--metric-selector", "selector"), ("--replicas", "replicas"),
                          ("--max-replicas", "max_replicas"), ("--model-path", "model_path")):  # fmt: skip
            if kw[key] is not None:
                args += [flag, str(kw[key])]
        result = CliRunner().invoke(deploy, args)
        problem = _outcome(result)
        if problem:
            bad.append(f"{args[2:]}: {problem}")
        elif result.exit_code == 0:
            _check_output(case / "out", rule_files, n)

    one()
    assert not bad, "\n".join(bad[:10])
    assert len(rule_files) >= 3  # the fuzz reached the rule writer, not only refusals
    _promtool(rule_files)


@pytest.fixture(scope="module")
def accepted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from kvbudget.cli.accept import accept

    root = tmp_path_factory.mktemp("fuzz-accepted")
    plan = root / "plan.yaml"
    plan.write_text(yaml.safe_dump(_small_plan()), encoding="utf-8")
    result = CliRunner().invoke(accept, [str(plan), "--out", str(root / "out"), "--quiet"])
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = json.loads((root / "out" / "report.json").read_text())
    return data


def _number_paths(data: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(data, bool):
        return []
    if isinstance(data, (int, float)):
        return [prefix]
    items = (
        data.items()
        if isinstance(data, dict)
        else enumerate(data)
        if isinstance(data, list)
        else []
    )
    out: list[tuple[Any, ...]] = []
    for key, value in items:
        out.extend(_number_paths(value, (*prefix, key)))
    return out


HOSTILE_NUMBERS = [math.nan, math.inf, -math.inf, 1e308, -1e308, -1, -1e-9, 2**63, 10**30, 0]


@pytest.mark.timeout(300)
def test_report_json_numbers(tmp_path: Path, accepted: dict[str, Any]) -> None:
    paths = _number_paths(accepted)
    rule_files: list[Path] = []
    bad: list[str] = []
    count = iter(range(10**6))

    @settings(SETTINGS, max_examples=10)  # each example renders report.html's charts
    @given(
        picks=st.lists(
            st.tuples(st.sampled_from(paths), st.sampled_from(HOSTILE_NUMBERS)),
            min_size=1,
            max_size=3,
        )
    )
    def one(picks: list[tuple[tuple[Any, ...], float]]) -> None:
        n = next(count)
        doc = json.loads(json.dumps(accepted))
        for path, value in picks:
            node = doc
            for key in path[:-1]:
                node = node[key]
            node[path[-1]] = value
        case = tmp_path / f"r{n}"
        case.mkdir()
        source = case / "report.json"
        source.write_text(json.dumps(doc), encoding="utf-8")  # NaN/Infinity as Python writes
        for command, args in (
            (report, [str(source), "--out", str(case / "rep")]),
            (deploy, [str(source), "--out", str(case / "out"), "--allow-failed"]),
        ):
            result = CliRunner().invoke(command, args)
            problem = _outcome(result)
            if problem:
                bad.append(f"{command.name} {picks}: {problem}")
        if (case / "out").exists():
            _check_output(case / "out", rule_files, n)

    one()
    assert not bad, "\n".join(bad[:10])
    _promtool(rule_files)
