"""What the engine says about itself: identity, version, slots and context (read-only GETs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kvbudget.engine_name import KVBUDGET_SERVE, LLAMACPP, REPORTED, VLLM, is_engine
from kvbudget.load.client import OpenAIClient
from kvbudget.load.engine_report import read_engine_report
from kvbudget.load.identity import server_identity
from kvbudget.load.served_model import check_served_model
from kvbudget.load.served_prompts import local_tokenizer_file

#: llama.cpp's defaults for -b / -ub (common/common.h), used when the engine does not report them
LLAMACPP_N_BATCH = 2048
LLAMACPP_N_UBATCH = 512
#: vLLM's default --max-num-batched-tokens for the OpenAI server on CPU (vLLM 0.32.0
#: vllm/engine/arg_utils.py get_batch_defaults: 2048 * world_size; GPU defaults differ: pass
#: --max-num-batched-tokens) and --max-num-seqs (128 * world_size), not on its /metrics
VLLM_CPU_MAX_NUM_BATCHED_TOKENS = 2048
VLLM_CPU_MAX_NUM_SEQS = 128
#: vllm:cache_config_info fields copied into the profile's settings (the paged prediction's pool)
VLLM_POOL_FIELDS = ("num_gpu_blocks", "block_size", "enable_prefix_caching")


@dataclass(slots=True)
class EngineInfo:
    """Engine facts that the calibration series and the slot simulator need."""

    engine: str  # as reported: "llama.cpp", "vllm", "sglang", "kvbudget-serve ..." or "unknown"
    version: str
    model_id: str
    num_slots: int | None = None
    n_ctx_slot: int | None = None
    max_model_len: int | None = None
    settings: dict[str, int | float | str | bool] = field(default_factory=dict)

    #: the served vocabulary size when known (random prompt ids stay below it)
    @property
    def vocab_size(self) -> int | None:
        v = self.settings.get("vocab_size")
        return int(v) if isinstance(v, int) and not isinstance(v, bool) and v > 0 else None

    @property
    def max_prompt_tokens(self) -> int:
        """Largest context one request may use (slot context, model length, else 2048)."""
        return int(self.n_ctx_slot or self.max_model_len or 2048)


def is_own_simulator(engine: str) -> bool:
    """Whether the engine is kvbudget serve (the simulator over HTTP: its timings are simulated)."""
    return engine.startswith(KVBUDGET_SERVE)


async def discover(client: OpenAIClient, model: str, metrics_url: str | None = None) -> EngineInfo:
    """Ask ``/props`` (llama.cpp), ``/version`` (vLLM, SGLang), ``/v1/models`` and, for vLLM,
    ``vllm:cache_config_info`` (the pool the paged prediction is built with).

    ``model`` must be one of the served ids (checked before any request is sent).
    """
    check_served_model(client.base_url, model, await server_identity(client))
    status, props, _ = await client.get_json("/props")
    if status == 200 and isinstance(props, dict) and "total_slots" in props:
        gen = props.get("default_generation_settings") or {}
        n_ctx = int(gen.get("n_ctx") or 0) or None
        slots = int(props["total_slots"])
        info = EngineInfo(
            engine=REPORTED[LLAMACPP],
            version=str(props.get("build_info") or "unknown"),
            model_id=model,
            num_slots=slots,
            n_ctx_slot=n_ctx,
        )
        info.settings = {
            "num_slots": slots,
            "n_ctx_slot": n_ctx or 0,
            "n_batch": LLAMACPP_N_BATCH,
            "n_ubatch": LLAMACPP_N_UBATCH,
            "model_path": str(props.get("model_path") or ""),
            "model_ftype": str(props.get("model_ftype") or ""),
        }
        return info
    engine, version = "unknown", "unknown"
    status, ver, headers = await client.get_json("/version")
    if status == 200 and isinstance(ver, dict) and "version" in ver:
        version = str(ver["version"])
        server = headers.get("Server", headers.get("server", "")).lower()
        named = ver.get("engine")  # kvbudget serve says which engine it is
        engine = str(named) if named else ("sglang" if "sglang" in server else "vllm")
    info = EngineInfo(engine=engine, version=version, model_id=model)
    status, models, _ = await client.get_json("/v1/models")
    if status == 200 and isinstance(models, dict):
        for entry in models.get("data") or []:
            if isinstance(entry, dict) and entry.get("id") == model:
                mml = _int(entry.get("max_model_len"))
                info.max_model_len = mml
                if mml:
                    info.settings["max_model_len"] = mml
                vocab = local_vocab_size(str(entry.get("root") or model))
                if vocab:
                    info.settings["vocab_size"] = vocab
    if is_engine(engine, VLLM):  # a name as served: "vllm", never kvbudget serve's
        report = await read_engine_report(client, metrics_url)
        for name in VLLM_POOL_FIELDS:
            value = getattr(report, name)
            if value is not None:
                info.settings[name] = value
        info.settings["max_num_batched_tokens"] = VLLM_CPU_MAX_NUM_BATCHED_TOKENS
        info.settings["max_num_seqs"] = VLLM_CPU_MAX_NUM_SEQS
    return info


def local_vocab_size(name: str) -> int | None:
    """Vocabulary size of a local model directory or cached hub id (its tokenizer.json, which
    counts the added tokens too), None when not found: never a download."""
    path = local_tokenizer_file(name)
    if path is None:
        return None
    try:
        from tokenizers import Tokenizer

        return int(Tokenizer.from_file(str(path)).get_vocab_size(with_added_tokens=True))
    except (ImportError, OSError, ValueError, RuntimeError):
        return None


def _int(value: Any) -> int | None:
    return int(value) if isinstance(value, int | float) and value > 0 else None


def describe_hardware(base_url: str) -> str:
    """This machine's CPU when the engine is on loopback; otherwise say it is unknown."""
    host = urlparse(base_url).hostname or ""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return f"unknown (engine at {host}; pass --hardware to describe it)"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return f"{cpu}, {cores} usable cores ({platform.system()} {platform.machine()}; loopback)"


#: how often the llama.cpp slot state is sampled during a validation cell
SLOT_POLL_S = 0.1


async def poll_slot_cells(client: OpenAIClient, stop: asyncio.Event) -> int | None:
    """Largest sum of ``n_prompt_tokens`` over busy slots in llama.cpp's ``GET /slots``,
    sampled every ``SLOT_POLL_S`` until ``stop`` (a slot's count grows with its generated
    tokens: the cells it holds). None when the endpoint is unavailable (``--no-slots``)."""
    peak: int | None = None
    while not stop.is_set():
        status, body, _ = await client.get_json("/slots")
        if status != 200 or not isinstance(body, list):
            return None
        cells = sum(
            int(s.get("n_prompt_tokens") or 0)
            for s in body
            if isinstance(s, dict) and s.get("is_processing")
        )
        peak = cells if peak is None else max(peak, cells)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SLOT_POLL_S)
    return peak
