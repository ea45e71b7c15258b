"""llama.cpp as ``deploy`` renders it: ``llama-server`` (``tools/server``; reference/llamacpp.md
§1b, §3), in one pod (no tensor/pipeline parallel flags rendered)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.deploy.engine_args import lock_value
from kvbudget.deploy.engines.registry import DeployEngine, register_deploy_engine
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.accept.plan.lock import ObjectLock


def argv(lock: ObjectLock, model: str, port: int, sources: dict[str, str]) -> list[str]:
    if (lock_value(lock, "tensor_parallel") or 1) * (
        lock_value(lock, "pipeline_parallel") or 1
    ) > 1:
        raise ConfigError(
            "lock.tensor_parallel: llama-server has no tensor/pipeline parallel flags rendered "
            "here; set tensor_parallel and pipeline_parallel to 1 for llama.cpp",
            field="lock.tensor_parallel",
        )
    argv = ["llama-server", "-m", model, "--host", "0.0.0.0", "--port", str(port), "--metrics"]
    slots = lock_value(lock, "max_num_seqs") or 1
    length = lock_value(lock, "max_model_len")
    argv += ["--parallel", str(slots)]
    sources["--parallel"] = "lock.max_num_seqs (one slot per sequence)"
    if length is not None:
        argv += ["--ctx-size", str(length * slots)]
        sources["--ctx-size"] = "lock.max_model_len x lock.max_num_seqs (split over the slots)"
    kv = lock_value(lock, "kv_dtype")
    if kv not in (None, "auto"):
        argv += ["--cache-type-k", str(kv), "--cache-type-v", str(kv)]
        sources["--cache-type-k"] = sources["--cache-type-v"] = "lock.kv_dtype"
    return argv


ENGINE = register_deploy_engine(
    DeployEngine(
        "llamacpp",
        argv,
        image="llama.cpp:server",
        series={
            "kv_usage": None,
            "waiting": "llamacpp:requests_deferred",
            "preemptions": None,
            "ttft_bucket": None,
            "tpot_bucket": None,
            "queue_bucket": None,
            "prefix_hits": None,
            "prefix_queries": None,
        },
    )
)
