"""vLLM as ``deploy`` renders it: ``vllm serve`` (flag names from vLLM 0.32.0's
``vllm/engine/arg_utils.py``, see :mod:`kvbudget.deploy.engine_args`), its nodes joined over Ray."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvbudget.deploy.engine_args import lock_value, locked_flags, offload_gib
from kvbudget.deploy.engines.registry import DeployEngine, register_deploy_engine

if TYPE_CHECKING:
    from kvbudget.accept.plan.lock import ObjectLock


def argv(lock: ObjectLock, model: str, port: int, sources: dict[str, str]) -> list[str]:
    argv = ["vllm", "serve", model, "--host", "0.0.0.0", "--port", str(port)]
    argv += ["--served-model-name", lock.model.id]
    sources["--served-model-name"] = "lock.model.id"
    pairs = (
        ("--tensor-parallel-size", "tensor_parallel"),
        ("--pipeline-parallel-size", "pipeline_parallel"),
        ("--max-model-len", "max_model_len"),
        ("--block-size", "block_size"),
        ("--gpu-memory-utilization", "gpu_memory_utilization"),
        ("--kv-cache-dtype", "kv_dtype"),
        ("--max-num-seqs", "max_num_seqs"),
        ("--max-num-batched-tokens", "max_num_batched_tokens"),
    )
    argv += locked_flags(lock, pairs, sources)
    policy = lock_value(lock, "prefix_caching")
    if policy is not None:
        flag = "--enable-prefix-caching" if policy.enabled else "--no-enable-prefix-caching"
        argv.append(flag)
        sources[flag] = "lock.prefix_caching.enabled"
    asynchronous = lock.async_scheduling.value if lock.async_scheduling else None
    if asynchronous is not None:
        flag = "--async-scheduling" if asynchronous else "--no-async-scheduling"
        argv.append(flag)
        sources[flag] = "lock.async_scheduling"
    gib = offload_gib(lock)
    if gib is not None:
        argv += ["--kv-offloading-size", f"{gib:g}", "--kv-offloading-backend", "native"]
        sources["--kv-offloading-size"] = "lock.offload (GiB, total over TP ranks)"
        sources["--kv-offloading-backend"] = "lock.offload (vLLM native CPU offloading)"
    return argv


def multinode(argv: str, num_nodes: int) -> tuple[str, str]:
    """vLLM joins its nodes over Ray: a head on the leader, the workers join it."""
    leader = f"ray start --head --port=6379 && {argv} --distributed-executor-backend ray"
    worker = "ray start --address=$(LWS_LEADER_ADDRESS):6379 --block"
    return leader, worker


ENGINE = register_deploy_engine(
    DeployEngine(
        "vllm",
        argv,
        image="vllm/vllm-openai:v{version}",
        multinode=multinode,
        async_scheduling=True,
        shutdown_timeout=True,
        series={
            "kv_usage": "vllm:kv_cache_usage_perc",
            "waiting": "vllm:num_requests_waiting",
            "preemptions": "vllm:num_preemptions_total",
            "ttft_bucket": "vllm:time_to_first_token_seconds_bucket",
            "tpot_bucket": "vllm:request_time_per_output_token_seconds_bucket",
            "queue_bucket": "vllm:request_queue_time_seconds_bucket",
            "prefix_hits": "vllm:prefix_cache_hits_total",
            "prefix_queries": "vllm:prefix_cache_queries_total",
        },
    )
)
