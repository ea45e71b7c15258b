"""``kvbudget serve``: the simulator's engine behind an OpenAI-compatible HTTP server."""

from __future__ import annotations

import asyncio
import signal

import click

from kvbudget.cli.main import run_async
from kvbudget.cli.vocab import (
    PREFIX_CACHING,
    PREFIX_CACHING_VLLM,
    TP,
    Count,
    engine_input_options,
)
from kvbudget.safety.limits import MAX_CONCURRENCY, MAX_REQUEST_TOKENS, MAX_VOCAB


def manual_note(model: str, description: str) -> str:
    """What a server without ``--gpu`` is: a manual pool and timing, not the named model's."""
    return (
        f"note: no --gpu, so the KV pool and the step timing are manual settings "
        f"({description.removeprefix('manual pool: ')}), not those of {model}; {model} is only "
        f"the name served. Add --gpu GPU (see 'kvbudget gpus') to plan {model}'s pool and time "
        "its steps with the roofline model."
    )


@click.command("serve")
@click.option(
    "--model",
    required=True,
    help="The model: with --gpu the model to plan (catalog id, config.json path or snapshot "
    "directory); without --gpu only a name (pool and timing are manual).",
)
@click.option(
    "--served-model-name",
    default=None,
    help="Name the server answers to in /v1/models and requests [default: --model], as vLLM.",
)
@click.option(
    "--gpu",
    default=None,
    help="Plan the replica for this GPU (see 'kvbudget gpus') "
    "and time steps with the roofline model. Without it the pool is manual.",
)
@click.option(
    *TP,
    "tp",
    default=1,
    show_default=True,
    type=Count(minimum=1, maximum=4096),
    help="Tensor parallel size for the plan (with --gpu).",
)
@engine_input_options()
@click.option(
    "--num-gpu-blocks-override",
    "--num-gpu-blocks",
    "num_gpu_blocks",
    type=Count(minimum=2, maximum=10_000_000),
    default=None,
    help="KV blocks in the pool (manual default 8192; with --gpu overrides the planned number).",
)
@click.option(
    "--block-size",
    type=Count(minimum=1, maximum=4096),
    default=None,
    help="Tokens per KV block (manual default 16).",
)
@click.option(
    "--max-model-len",
    type=Count(minimum=1, maximum=MAX_REQUEST_TOKENS),
    default=None,
    help="Longest prompt + output in tokens (manual default 8192).",
)
@click.option(
    "--max-num-seqs",
    type=Count(minimum=1, maximum=MAX_CONCURRENCY),
    default=None,
    help="Most requests running at once (manual default 256).",
)
@click.option(
    "--max-num-batched-tokens",
    type=Count(minimum=1, maximum=MAX_REQUEST_TOKENS),
    default=None,
    help="Token budget of one step (manual default 8192).",
)
@click.option(
    "--step-ms",
    default=10.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Manual timing: fixed cost of one engine step, milliseconds.",
)
@click.option(
    "--per-token-us",
    default=0.0,
    show_default=True,
    type=click.FloatRange(0),
    help="Manual timing: extra cost per scheduled token, microseconds.",
)
@click.option(
    "--speedup",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Run the simulated clock this many times faster than real time.",
)
@click.option(
    PREFIX_CACHING,
    PREFIX_CACHING_VLLM,
    "prefix_caching",
    default=True,
    show_default=True,
    help="Automatic prefix caching.",
)
@click.option(
    "--vocab-size",
    default=32000,
    show_default=True,
    type=click.IntRange(8, MAX_VOCAB),
    help="Size of the synthetic tokenizer's vocabulary.",
)
@click.option(
    "--seed",
    default=0,
    show_default=True,
    type=int,
    help="Seed of the engine and of the synthetic output text.",
)
@click.option(
    "--host",
    default="127.0.0.1",
    show_default=True,
    help="Address to listen on (no authentication: keep loopback unless you mean to expose it).",
)
@click.option(
    "--port",
    default=8000,
    show_default=True,
    type=click.IntRange(0, 65535),
    help="TCP port (0 picks a free one; the URL is printed on start).",
)
def serve(
    model: str,
    served_model_name: str | None,
    gpu: str | None,
    tp: int,
    pp: int | None,
    engine_version: str | None,
    quantization: str | None,
    enable_expert_parallel: bool | None,
    async_scheduling: bool | None,
    kv_dtype: str | None,
    num_gpu_blocks: int | None,
    block_size: int | None,
    max_model_len: int | None,
    max_num_seqs: int | None,
    max_num_batched_tokens: int | None,
    step_ms: float,
    per_token_us: float,
    speedup: float,
    prefix_caching: bool,
    vocab_size: int,
    seed: int,
    host: str,
    port: int,
) -> None:
    """Serve the simulated engine over OpenAI-compatible HTTP (real time).

    Routes: /v1/models, /v1/completions, /v1/chat/completions (streaming and not),
    /tokenize, /health, /version, /metrics (vLLM metric names), /reset_prefix_cache.
    Prompts use kvbudget's deterministic synthetic tokenizer (one token per word); the output
    is deterministic synthetic text. Latencies are SIMULATED step times delivered in real
    time, not a measurement of any real engine. Stop with Ctrl-C.
    """
    from kvbudget.errors import ConfigError
    from kvbudget.serve.app import ServeApp
    from kvbudget.serve.build import ServeEngineOptions, build_engine
    from kvbudget.units import cdiv

    if tp != 1 and gpu is None:
        raise ConfigError(
            f"--tp {tp}: only used to plan the replica with --gpu; add --gpu GPU or drop --tp",
            field="tp",
        )
    planned_only = {
        "--pp": pp,
        "--engine-version": engine_version,
        "--quantization": quantization,
        "--enable-expert-parallel": enable_expert_parallel,
        "--async-scheduling": async_scheduling,
        "--kv-dtype": kv_dtype,
    }
    for flag, value in planned_only.items():
        if value is not None and gpu is None:
            raise ConfigError(
                f"{flag} {value}: only used to plan the replica with --gpu; add --gpu GPU or "
                f"drop {flag}",
                field=flag.removeprefix("--").replace("-", "_"),
            )
    built = build_engine(
        ServeEngineOptions(
            model=model,
            gpu=gpu,
            tp=tp,
            pp=pp or 1,
            engine_version=engine_version,
            quantization=quantization,
            kv_dtype=kv_dtype or "auto",
            enable_expert_parallel=bool(enable_expert_parallel),
            async_scheduling=async_scheduling,
            num_gpu_blocks=num_gpu_blocks,
            block_size=block_size,
            max_model_len=max_model_len,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            step_s=step_ms / 1e3,
            per_token_s=per_token_us / 1e6,
            enable_prefix_caching=prefix_caching,
            vocab_size=vocab_size,
            seed=seed,
        )
    )

    served = served_model_name or model
    cfg = built.config
    blocks_needed = cdiv(cfg.max_model_len, cfg.block_size)
    if blocks_needed > cfg.num_gpu_blocks - 1:  # block 0 is the null block
        click.echo(
            f"warning: one max_model_len request ({cfg.max_model_len} tokens) needs "
            f"{blocks_needed} KV blocks of {cfg.block_size} tokens but the pool has "
            f"{cfg.num_gpu_blocks - 1} usable (vLLM would refuse to start); longer requests are "
            "answered 400; raise --num-gpu-blocks-override or lower --max-model-len",
            err=True,
        )

    async def main() -> None:
        app = ServeApp(
            built.replica,
            model_name=served,
            max_model_len=built.config.max_model_len,
            vocab_size=vocab_size,
            speedup=speedup,
            timing_name=built.timing_name,
            output_seed=seed,
            host=host,
            port=port,
        )
        try:
            url = await app.start()
        except OSError as exc:
            raise ConfigError(
                f"--host {host} --port {port}: cannot listen ({exc.strerror}); choose another "
                "port or 0 for a free one",
                field="port",
            ) from exc
        if host not in ("127.0.0.1", "localhost", "::1"):
            click.echo(f"warning: listening on {host}, not loopback (no authentication)", err=True)
        click.echo(f"kvbudget serve: {url}  model={served}  {built.description}", err=True)
        if gpu is None:
            click.echo(manual_note(model, built.description), err=True)
        click.echo(url, nl=True)  # the URL alone on stdout, for scripts
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await app.stop()

    run_async(main())
