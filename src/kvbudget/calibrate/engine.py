"""What the engine says about itself: identity, version, slots and context (read-only GETs)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import platform
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kvbudget.load.client import OpenAIClient
from kvbudget.load.identity import server_identity
from kvbudget.load.run import check_served_model

#: llama.cpp's defaults for -b / -ub (common/common.h), used when the engine does not report them
LLAMACPP_N_BATCH = 2048
LLAMACPP_N_UBATCH = 512


@dataclass(slots=True)
class EngineInfo:
    """Engine facts that the calibration series and the slot simulator need."""

    engine: str  # "llama.cpp", "vllm", "sglang" or "unknown"
    version: str
    model_id: str
    num_slots: int | None = None
    n_ctx_slot: int | None = None
    max_model_len: int | None = None
    settings: dict[str, int | float | str | bool] = field(default_factory=dict)

    @property
    def max_prompt_tokens(self) -> int:
        """Largest context one request may use (slot context, model length, else 2048)."""
        return int(self.n_ctx_slot or self.max_model_len or 2048)


def is_own_simulator(engine: str) -> bool:
    """Whether the engine is kvbudget serve (the simulator over HTTP: its timings are simulated)."""
    return engine.startswith("kvbudget-serve")


async def discover(client: OpenAIClient, model: str) -> EngineInfo:
    """Ask ``/props`` (llama.cpp), ``/version`` (vLLM, SGLang) and ``/v1/models``.

    ``model`` must be one of the served ids (checked before any request is sent).
    """
    check_served_model(client.base_url, model, await server_identity(client))
    status, props, _ = await client.get_json("/props")
    if status == 200 and isinstance(props, dict) and "total_slots" in props:
        gen = props.get("default_generation_settings") or {}
        n_ctx = int(gen.get("n_ctx") or 0) or None
        slots = int(props["total_slots"])
        info = EngineInfo(
            engine="llama.cpp",
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
    return info


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
