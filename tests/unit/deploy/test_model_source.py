"""A Deployment that can start (issue #32 item 1): the weights come from a volume the user
names, or from the hub with a token Secret and a cache volume, and the pods land on the GPU the
configuration was accepted on. Every manifest is validated with kubernetes-validate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from kvbudget.cli.deploy import deploy
from kvbudget.deploy.placement import gfd_product, gpu_placement
from kvbudget.spec.hardware import load_gpu_catalog
from tests.unit.deploy.conftest import DEMO_PLAN, load_dir
from tests.unit.deploy.test_manifests import validate_core


def _pod(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "out"
    result = CliRunner().invoke(deploy, [str(DEMO_PLAN), "--out", str(out), *args])
    assert result.exit_code == 0, result.output
    dep = load_dir(out)["deployment.yaml"][0]
    validate_core(dep)
    pod: dict[str, Any] = dep["spec"]["template"]["spec"]
    return pod


def test_a_hub_id_gets_a_token_secret_and_a_cache(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "--hf-cache-pvc", "hf-cache")
    engine = pod["containers"][0]
    env = {e["name"]: e for e in engine["env"]}
    assert env["HF_HOME"]["value"] == "/root/.cache/huggingface"
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "hf-token",
        "key": "token",
        "optional": True,
    }
    assert engine["volumeMounts"] == [{"name": "hf-cache", "mountPath": "/root/.cache/huggingface"}]
    assert pod["volumes"] == [
        {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "hf-cache"}}
    ]
    readme = (tmp_path / "out" / "README.md").read_text()
    assert "kubectl create secret generic hf-token --from-literal=token=hf_..." in readme


def test_a_path_in_the_pod_comes_from_the_named_claim(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "--model-path", "/models/llama-3.1-8b", "--model-pvc", "llama-weights")
    engine = pod["containers"][0]
    assert engine["command"][:3] == ["vllm", "serve", "/models/llama-3.1-8b"]
    assert engine["volumeMounts"] == [{"name": "model", "mountPath": "/models", "readOnly": True}]
    assert pod["volumes"] == [
        {"name": "model", "persistentVolumeClaim": {"claimName": "llama-weights", "readOnly": True}}
    ]
    assert "env" not in engine  # no hub download, no token


def test_a_host_directory_works_too(tmp_path: Path) -> None:
    pod = _pod(tmp_path, "--model-path", "/data/m/llama", "--model-host-path", "/mnt/weights")
    assert pod["volumes"] == [
        {"name": "model", "hostPath": {"path": "/mnt/weights", "type": "Directory"}}
    ]
    assert pod["containers"][0]["volumeMounts"][0]["mountPath"] == "/data/m"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model-path", "/models/llama"], "no volume provides it: pass --model-pvc"),
        (["--model-pvc", "Bad_Name"], "--model-pvc 'Bad_Name': not a Kubernetes object name"),
        (["--model-pvc", "a", "--model-host-path", "/x"], "give one source of the weights"),
        (["--gpu-product", "NVIDIA H100"], "--gpu-product 'NVIDIA H100': not a Kubernetes label"),
        (
            ["--model-path", "/data/llama", "--model-pvc", "w", "--model-mount-path", "/models"],
            "is not under the mount '/models'",
        ),
    ],
)
def test_a_pod_that_could_not_start_is_refused_in_one_line(
    tmp_path: Path, args: list[str], words: str
) -> None:
    result = CliRunner().invoke(deploy, [str(DEMO_PLAN), "--out", str(tmp_path / "o"), *args])
    assert result.exit_code != 0
    assert words in str(result.exception) + result.output
    assert not (tmp_path / "o" / "deployment.yaml").exists()


def test_gpu_product_label_as_gpu_feature_discovery_writes_it() -> None:
    # k8s-device-plugin internal/lm/resource.go sanitise: drop characters outside
    # [A-Za-z0-9-_. ], join blank runs with '-'
    assert gfd_product("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"
    assert gfd_product("NVIDIA A100-SXM4-80GB") == "NVIDIA-A100-SXM4-80GB"
    assert gfd_product("NVIDIA  RTX PRO 6000 (Blackwell)") == "NVIDIA-RTX-PRO-6000-Blackwell"
    # the demo's lock gpu.type H100-SXM-80GB
    assert gpu_placement("H100-SXM-80GB", None).node_selector == {
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"
    }
    assert gpu_placement("MI300X", None).node_selector == {}  # GFD labels no AMD GPU
    for gpu in load_gpu_catalog():  # every catalog label is a valid label value
        value = gfd_product(gpu.device_name)
        assert len(value) <= 63 and value[0].isalnum() and value[-1].isalnum()


def test_the_pod_selects_the_accepted_gpu(tmp_path: Path) -> None:
    pod = _pod(tmp_path)
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    pod = _pod(tmp_path, "--gpu-product", "NVIDIA-H100-PCIe")
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-PCIe"}
