"""kvbudget deploy's manifests: valid Kubernetes objects (two versions, offline) with the
numbers of the plan or the accepted report, each checked by hand arithmetic."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from tests.unit.deploy.conftest import DEMO_PLAN, load_dir

#: two Kubernetes versions: the oldest with the preStop sleep action on by default, the newest
K8S_VERSIONS = ("1.30.0", "1.37.0")
CORE_KINDS = {"Deployment", "Service", "HorizontalPodAutoscaler", "ConfigMap"}
POOL_SCHEMA = json.loads((Path(__file__).parent / "inferencepool_v1.schema.json").read_text())
GIB = 1024**3


def render(tmp_path: Path, source: Path, *args: str) -> dict[str, list[dict[str, Any]]]:
    out = tmp_path / "out"
    result = CliRunner().invoke(deploy, [str(source), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    return load_dir(out)


def validate_core(doc: dict[str, Any]) -> None:
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(doc, version, strict=True)


def validate_pod_template(template: dict[str, Any]) -> None:
    """A CRD's embedded pod template, validated as a core v1 PodTemplate."""
    doc = {
        "apiVersion": "v1",
        "kind": "PodTemplate",
        "metadata": {"name": "t"},
        "template": template,
    }
    validate_core(doc)


def test_demo_plan_manifests_validate_against_two_kubernetes_versions(tmp_path: Path) -> None:
    files = render(tmp_path, DEMO_PLAN)
    assert {"deployment.yaml", "service.yaml", "hpa.yaml", "alerts.rules.yaml"} <= set(files)
    kinds = set()
    for name, docs in files.items():
        if name == "alerts.rules.yaml":
            continue
        for doc in docs:
            kinds.add(doc["kind"])
            if doc["kind"] in CORE_KINDS:
                validate_core(doc)
            elif doc["kind"] == "InferencePool":
                jsonschema.validate(doc, POOL_SCHEMA)
    assert {"Deployment", "Service", "HorizontalPodAutoscaler", "InferencePool"} <= kinds


def test_a_broken_manifest_is_caught_by_the_validator() -> None:
    bad = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "x"},
        "spec": {"ports": [{"port": "eighty"}]},
    }
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, K8S_VERSIONS[0], strict=True)
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"a": "b"}}, "targetPorts": [{"number": 8000}, {"number": 8001}],
                     "endpointPickerRef": {"name": "epp"}}}  # fmt: skip
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(pool, POOL_SCHEMA)  # at most one target port


def test_demo_pod_resources_and_memory_arithmetic(tmp_path: Path) -> None:
    files = render(tmp_path, DEMO_PLAN, "--load-time-s", "600")
    pod = files["deployment.yaml"][0]["spec"]["template"]["spec"]
    engine = pod["containers"][0]
    res = engine["resources"]
    assert res["requests"] == res["limits"]  # Guaranteed QoS
    assert res["limits"]["nvidia.com/gpu"] == "1"  # TP 1 x PP 1
    assert res["limits"]["cpu"] == "6"  # 2 + 4 per GPU, whole cores
    # Llama-3.1-8B: 8,030,261,248 parameters (its model card / safetensors index) x 2 B bf16,
    # + runtime 2 GiB + 4 GiB per GPU + sidecars 512 MiB, + 10 % headroom; no TP so no /dev/shm
    subtotal = 8_030_261_248 * 2 + 2 * GIB + 4 * GIB + 512 * 1024**2
    total = subtotal + int(subtotal * 0.10)
    assert res["limits"]["memory"] == f"{math.ceil(total / GIB)}Gi" == "24Gi"
    # startupProbe: 10 s x failureThreshold >= 1.5 x 600 s
    startup = engine["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 900
    assert startup["httpGet"]["path"] == engine["readinessProbe"]["httpGet"]["path"] == "/health"
    # plan only: the e2e budget is TTFT ceiling 2.0 s + TPOT ceiling 0.060 s x 256 tokens = 17.36 s
    assert engine["lifecycle"]["preStop"]["sleep"]["seconds"] == math.ceil(17.36) + 5
    assert pod["terminationGracePeriodSeconds"] >= 17.36
    # a hub id: only the download cache, no /dev/shm at TP 1 (tests/unit/deploy/test_model_source)
    assert pod["volumes"] == [{"name": "hf-cache", "emptyDir": {}}]


def test_tensor_parallel_pod_gets_shm_and_topology_notes(tmp_path: Path, write_plan: Any) -> None:
    path = write_plan({"tensor_parallel": 4, "gpu": {"type": "H100-SXM-80GB", "count": 4}})
    out = tmp_path / "tp4"
    result = CliRunner().invoke(deploy, [str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    files = load_dir(out)
    dep = files["deployment.yaml"][0]
    validate_core(dep)
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert pod["volumes"][0]["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    readme = (out / "README.md").read_text()
    assert "single-numa-node" in readme and "cpuManagerPolicy: static" in readme
    assert "/dev/shm: 8.00 GiB" in readme


def test_multi_node_plan_renders_a_leader_worker_set(tmp_path: Path, write_plan: Any) -> None:
    path = write_plan(
        {
            "tensor_parallel": 8,
            "pipeline_parallel": 2,
            "gpu": {"type": "H100-SXM-80GB", "count": 16},
        }
    )
    files = render(
        tmp_path,
        path,
        "--gpus-per-node",
        "8",
        "--model-path",
        "/models/llama",
        "--model-pvc",
        "llama-weights",
    )
    lws = files["leaderworkerset.yaml"][0]
    assert lws["kind"] == "LeaderWorkerSet"
    group = lws["spec"]["leaderWorkerTemplate"]
    assert group["size"] == 2  # 8 x 2 = 16 GPUs over 8-GPU nodes
    for role in ("leaderTemplate", "workerTemplate"):
        validate_pod_template(group[role])
        limits = group[role]["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
    for role in ("leaderTemplate", "workerTemplate"):  # every pod of the group has the weights
        spec = group[role]["spec"]
        assert {"name": "model", "mountPath": "/models", "readOnly": True} in spec["containers"][0][
            "volumeMounts"
        ]
        assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    leader_cmd = " ".join(group["leaderTemplate"]["spec"]["containers"][0]["command"])
    assert "--distributed-executor-backend ray" in leader_cmd
    assert "--tensor-parallel-size 8" in leader_cmd and "--pipeline-parallel-size 2" in leader_cmd
    assert files["service.yaml"][0]["spec"]["selector"]["role"] == "leader"
    assert files["hpa.yaml"][0]["spec"]["scaleTargetRef"]["kind"] == "LeaderWorkerSet"


def test_keda_scaled_object_has_the_waiting_and_ttft_triggers(tmp_path: Path) -> None:
    files = render(tmp_path, DEMO_PLAN, "--autoscaler", "keda", "--replicas", "2")
    so = files["keda-scaledobject.yaml"][0]
    queries = [t["metadata"]["query"] for t in so["spec"]["triggers"]]
    assert queries[0].startswith("sum(vllm:num_requests_waiting{")
    # the TTFT trigger: 0.8 x the plan's p95 ceiling of 2.0 s
    assert so["spec"]["triggers"][1]["metadata"]["threshold"] == "1.6"
    assert so["spec"]["minReplicaCount"] == 2
    jsonschema.validate(files["inferencepool.yaml"][0], POOL_SCHEMA)
    epp = files["epp-config.yaml"][0]
    validate_core(epp)
    assert "prefix-cache-scorer" in epp["data"]["epp-config.yaml"]
    assert "queue-scorer" in epp["data"]["epp-config.yaml"]


def test_bad_inputs_are_one_line_errors(tmp_path: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(deploy, [str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "o")])
    assert missing.exit_code != 0
    assert "PLAN_OR_REPORT" in str(missing.exception) and "not found" in str(missing.exception)
    bad = runner.invoke(
        deploy, [str(DEMO_PLAN), "--out", str(tmp_path / "o"), "--alert-for", "ten"]
    )
    assert "--alert-for: 'ten' is not a Prometheus duration" in str(bad.exception)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"kind": "bench"}))
    res = runner.invoke(deploy, [str(other), "--out", str(tmp_path / "o")])
    assert "is not a valid AcceptResult: field 'kind'" in str(res.exception)
