"""Where the engine's pod gets the model's weights (a Deployment that names a path no volume
provides cannot start).

Three sources, chosen by the flags:

* ``--model-pvc NAME``: a PersistentVolumeClaim holding the weights, mounted read-only at
  ``--model-mount-path`` (default: the directory of an absolute model path, else ``/models``);
* ``--model-host-path DIR``: a directory on every GPU node (``hostPath``, type Directory),
  mounted read-only the same way;
* neither, with a hub id (``meta-llama/Llama-3.1-8B``): the engine downloads it. The pod gets
  ``HF_TOKEN`` from the Secret ``--hf-token-secret`` (key ``token``; gated models need it) and a
  cache volume at ``HF_HOME`` (``/root/.cache/huggingface``): an ``emptyDir`` by default, so
  each new pod downloads again, or ``--hf-cache-pvc NAME`` to keep it.

An absolute model path with neither a PVC nor a host path is refused: nothing would provide it.
"""

from __future__ import annotations

import posixpath
import re
from dataclasses import dataclass, field
from typing import Any

from kvbudget.errors import ConfigError

HF_HOME = "/root/.cache/huggingface"
HF_TOKEN_KEY = "token"
MODEL_VOLUME = "model"
CACHE_VOLUME = "hf-cache"
#: DNS-1123 subdomain (PVC and Secret names)
_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class ModelSourceOptions:
    model_pvc: str | None = None
    model_host_path: str | None = None
    model_mount_path: str | None = None
    hf_token_secret: str = "hf-token"
    hf_cache_pvc: str | None = None


@dataclass(slots=True)
class ModelSource:
    """Volumes, mounts and environment for the engine container, and the README's lines."""

    volumes: list[dict[str, Any]] = field(default_factory=list)
    mounts: list[dict[str, Any]] = field(default_factory=list)
    env: list[dict[str, Any]] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)


def _name(flag: str, value: str) -> str:
    if len(value) > 253 or not _SUBDOMAIN.match(value):
        raise ConfigError(
            f"{flag} {value[:80]!r}: not a Kubernetes object name (lowercase letters, digits, "
            "'-' and '.', at most 253 characters); give the name as kubectl lists it",
            field=flag.lstrip("-").replace("-", "_"),
        )
    return value


def model_source(model_path: str, opts: ModelSourceOptions) -> ModelSource:
    """How the pod gets ``model_path`` (the engine's model argument)."""
    if opts.model_pvc is not None and opts.model_host_path is not None:
        raise ConfigError(
            "--model-pvc and --model-host-path: give one source of the weights, not both",
            field="model_pvc",
        )
    local = model_path.startswith("/")
    mount = opts.model_mount_path or (posixpath.dirname(model_path) if local else "/models")
    if not mount.startswith("/") or mount == "/":
        raise ConfigError(
            f"--model-mount-path {mount!r}: give an absolute directory other than /, e.g. /models",
            field="model_mount_path",
        )
    out = ModelSource()
    if opts.model_pvc is not None or opts.model_host_path is not None:
        if opts.model_pvc is not None:
            claim = _name("--model-pvc", opts.model_pvc)
            out.volumes.append(
                {
                    "name": MODEL_VOLUME,
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                }
            )
            what = f"PersistentVolumeClaim {claim} (--model-pvc)"
        else:
            host = opts.model_host_path or ""
            if not host.startswith("/"):
                raise ConfigError(
                    f"--model-host-path {host[:80]!r}: give an absolute directory on the nodes",
                    field="model_host_path",
                )
            out.volumes.append(
                {"name": MODEL_VOLUME, "hostPath": {"path": host, "type": "Directory"}}
            )
            what = f"node directory {host} (--model-host-path; it must exist on every GPU node)"
        out.mounts.append({"name": MODEL_VOLUME, "mountPath": mount, "readOnly": True})
        if local and not model_path.startswith(mount.rstrip("/") + "/"):
            raise ConfigError(
                f"model path {model_path!r} is not under the mount {mount!r}; pass "
                "--model-mount-path with the directory that holds it",
                field="model_mount_path",
            )
        out.lines.append(
            f"weights: {what}, mounted read-only at {mount}; the engine loads {model_path}"
        )
        return out
    if local:
        raise ConfigError(
            f"model path {model_path!r} is a path inside the pod, but no volume provides it: "
            "pass --model-pvc NAME (a claim holding the weights) or --model-host-path DIR, or "
            "serve a hub id",
            field="model_path",
        )
    secret = _name("--hf-token-secret", opts.hf_token_secret)
    out.env += [
        {"name": "HF_HOME", "value": HF_HOME},
        {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": secret, "key": HF_TOKEN_KEY, "optional": True}},
        },
    ]
    if opts.hf_cache_pvc is not None:
        claim = _name("--hf-cache-pvc", opts.hf_cache_pvc)
        out.volumes.append({"name": CACHE_VOLUME, "persistentVolumeClaim": {"claimName": claim}})
        cache = f"PersistentVolumeClaim {claim} (--hf-cache-pvc: downloads are kept)"
    else:
        out.volumes.append({"name": CACHE_VOLUME, "emptyDir": {}})
        cache = "an emptyDir (each new pod downloads again; --hf-cache-pvc keeps them)"
    out.mounts.append({"name": CACHE_VOLUME, "mountPath": HF_HOME})
    out.lines += [
        f"weights: downloaded from the hub as {model_path} into {HF_HOME}, on {cache}",
        f"hub token: HF_TOKEN from Secret {secret}, key {HF_TOKEN_KEY} (--hf-token-secret; "
        f"optional, gated models need it): kubectl create secret generic {secret} "
        f"--from-literal={HF_TOKEN_KEY}=hf_...",
    ]
    return out
