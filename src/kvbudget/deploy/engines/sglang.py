"""SGLang as ``deploy`` renders it: ``python3 -m sglang.launch_server`` (flag names from SGLang's
``python/sglang/srt/server_args.py``), its nodes joined with its own ``--nnodes`` flags."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.deploy.engine_args import lock_value, locked_flags, offload_gib
from kvbudget.deploy.engines.registry import DeployEngine, register_deploy_engine
from kvbudget.errors import ConfigError

if TYPE_CHECKING:
    from kvbudget.accept.plan.lock import ObjectLock


def argv(lock: ObjectLock, model: str, port: int, sources: dict[str, str]) -> list[str]:
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", model]
    argv += ["--host", "0.0.0.0", "--port", str(port), "--enable-metrics"]
    pairs = (
        ("--tp-size", "tensor_parallel"),
        ("--pp-size", "pipeline_parallel"),
        ("--context-length", "max_model_len"),
        ("--page-size", "block_size"),
        ("--mem-fraction-static", "gpu_memory_utilization"),
        ("--kv-cache-dtype", "kv_dtype"),
        ("--max-running-requests", "max_num_seqs"),
        ("--chunked-prefill-size", "max_num_batched_tokens"),
    )
    argv += locked_flags(lock, pairs, sources)
    policy = lock_value(lock, "prefix_caching")
    if policy is not None and not policy.enabled:
        argv.append("--disable-radix-cache")
        sources["--disable-radix-cache"] = "lock.prefix_caching.enabled"
    if offload_gib(lock) is not None:
        raise ConfigError(
            "lock.offload: kvbudget deploy renders KV offload flags for vLLM only (SGLang's "
            "HiCache flags are not verified here); set offload: none or add the flags to "
            "lock.engine.flags",
            field="lock.offload",
        )
    return argv


def multinode(argv: str, num_nodes: int) -> tuple[str, str]:
    """SGLang's own multi-node flags; the leader and the workers run the same command."""
    multi = (
        f"--nnodes {num_nodes} --node-rank $(LWS_WORKER_INDEX) "
        "--dist-init-addr $(LWS_LEADER_ADDRESS):20000"
    )
    leader = f"{argv} {multi}"
    return leader, leader


ENGINE = register_deploy_engine(
    DeployEngine(
        "sglang",
        argv,
        image="lmsysorg/sglang:v{version}",
        multinode=multinode,
        series={
            "kv_usage": "sglang:token_usage",
            "waiting": "sglang:num_queue_reqs",
            "preemptions": None,
            "ttft_bucket": "sglang:time_to_first_token_seconds_bucket",
            "tpot_bucket": "sglang:inter_token_latency_seconds_bucket",
            "queue_bucket": None,
            "prefix_hits": "sglang:cached_tokens_total",
            "prefix_queries": "sglang:prompt_tokens_total",
        },
    )
)
