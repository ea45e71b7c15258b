"""The ledger's three budgets and the simulated replica come from the same plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvbudget.accept.plan.lock import ObjectLock
from kvbudget.accept.plan.planfile import load_plan
from kvbudget.accept.targets.capacity import build_capacity

DEMO = Path(__file__).resolve().parents[3] / "examples" / "acceptance-demo.yaml"


def test_demo_budgets_and_replica() -> None:
    plan = load_plan(DEMO)
    ctx = build_capacity(plan, plan.lock)
    budgets = {b.name: b for b in ctx.ledger.budgets}
    # Llama-3.1-8B: 2 (K,V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes = 131,072 B/token
    per_token = 2 * 32 * 8 * 128 * 2
    longest = 15360 + 256  # long tier max prompt + output
    assert budgets["structural"].bytes == per_token * longest * 64
    assert all(b.kind == "computed" for b in budgets.values())
    # the replica gets exactly the planned pool
    assert ctx.replica.num_gpu_blocks == ctx.plan.num_blocks
    assert ctx.replica.block_size == 16
    assert ctx.replica.max_num_seqs == 256
    assert ctx.replica.max_num_batched_tokens == 8192
    assert ctx.replica.max_model_len == 16384
    # engine pool: blocks x block bytes over the 32 layers (page = 16 tokens x 4 KiB per layer)
    assert budgets["engine_pool"].bytes == ctx.plan.num_blocks * 16 * 8 * 128 * 2 * 2 * 32
    assert budgets["device_peak"].bytes is not None
    assert budgets["engine_pool"].bytes < budgets["device_peak"].bytes < 80 * 2**30 + 2**30
    assert ctx.computed_lock["model.config_sha256"][0]


def test_fp8_variant_doubles_the_pool_tokens() -> None:
    from kvbudget.accept.plan.lockcheck import apply_overrides

    plan = load_plan(DEMO)
    base = build_capacity(plan, plan.lock)
    fp8 = build_capacity(plan, apply_overrides(plan.lock, {"kv_dtype": "fp8"}))
    ratio = fp8.plan.kv_cache_tokens / base.plan.kv_cache_tokens
    assert abs(ratio - 2.0) < 0.01  # 1 byte instead of 2 per element, same memory


def test_calibrated_profile_replaces_the_roofline(tmp_path: Path) -> None:
    import json

    from kvbudget.sim.timing import BatchShape

    profile = tmp_path / "profile.json"
    # prefill t = 0.004 + 2e-5 * T exactly; decode t = 0.006 + 1e-4 * batch + 1e-7 * context
    prefill = [(t, 0.004 + 2e-5 * t) for t in (128, 1024, 4096, 8192)]
    decode = [
        (b, c, 0.006 + 1e-4 * b + 1e-7 * c)
        for b, c in ((1, 1000), (8, 16000), (32, 64000), (64, 9000))
    ]
    profile.write_text(
        json.dumps(
            {
                "name": "test",
                "model_id": "meta-llama/Llama-3.1-8B",
                "gpu": "H100",
                "engine": "vllm 0.11.0",
                "prefill_points": prefill,
                "decode_points": decode,
            }
        )
    )
    plan = load_plan(DEMO)
    plan = plan.model_copy(
        update={
            "target": plan.target.model_copy(
                update={"timing_model": "calibrated", "profile": str(profile)}
            )
        }
    )
    ctx = build_capacity(plan, plan.lock)
    assert ctx.timing_name.startswith("calibrated (test: vllm 0.11.0 on H100)")
    # a pure decode step of 8 sequences at 16,000 context tokens: the fitted line, by hand
    step = ctx.timing.step_time_s(BatchShape(0, 0.0, 0, 8, 16000))
    assert abs(step - (0.006 + 1e-4 * 8 + 1e-7 * 16000)) < 2e-4


def test_locked_quantization_reaches_the_simulated_replica(monkeypatch: pytest.MonkeyPatch) -> None:
    """lock.quantization fp8: the plan sizes fp8 weights (1 B per linear weight) and the sim
    target's roofline runs the GEMMs at the fp8 peak, as ``kvbudget sim --quantization fp8``."""
    from kvbudget.accept.plan.lock import ObjectLock

    monkeypatch.setenv("KVBUDGET_TIMING_MODEL", "roofline")  # the roofline's own fp8 label

    plan = load_plan(DEMO)
    data = plan.lock.model_dump()
    data["quantization"] = {"value": "fp8"}
    lock = ObjectLock.model_validate(data)
    base = build_capacity(plan, plan.lock)
    fp8 = build_capacity(plan, lock)
    assert fp8.plan.weights.quantization == "fp8"
    assert fp8.plan.weights.total_bytes < 0.6 * base.plan.weights.total_bytes
    assert fp8.built.timing_name == "roofline (fp8 GEMMs)"
    assert base.built.timing_name == "roofline"


def _with_engine(name: str) -> ObjectLock:
    from kvbudget.accept.plan.lock import ObjectLock

    data = load_plan(DEMO).lock.model_dump()
    data["engine"]["name"] = {"value": name}
    return ObjectLock.model_validate(data)


@pytest.mark.parametrize(
    ("name", "engine"),
    [("sglang", "sglang"), ("vllm", "vllm"), ("kvbudget-serve", "vllm"), (None, "vllm")],
)
def test_the_lock_names_the_engine_whose_pool_is_planned(name: str | None, engine: str) -> None:
    """An SGLang lock is planned with SGLang's arithmetic, not vLLM's; a lock naming no engine,
    or kvbudget serve (which simulates vLLM), with vLLM's."""
    from kvbudget.accept.targets.capacity import plan_request

    lock = load_plan(DEMO).lock if name is None else _with_engine(name)
    if name is None:
        lock = lock.model_copy(
            update={"engine": lock.engine.model_copy(update={"name": type(lock.engine.name)()})}
        )
    assert plan_request(lock).engine == engine


def test_a_llamacpp_lock_is_refused_not_planned_as_vllm() -> None:
    from kvbudget.accept.targets.capacity import plan_request
    from kvbudget.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        plan_request(_with_engine("llama.cpp"))
    line = str(info.value)
    assert "\n" not in line and line.startswith("lock.engine.name: 'llama.cpp'")
    assert "kvbudget calc --engine llamacpp" in line


def test_the_sim_target_refuses_an_sglang_lock_in_one_line() -> None:
    """The simulator models vLLM V1's block pool: an SGLang lock is not simulated as vLLM."""
    from kvbudget.errors import ConfigError

    plan = load_plan(DEMO)
    with pytest.raises(ConfigError, match=r"^engine: the simulator models vLLM V1's block pool"):
        build_capacity(plan, _with_engine("sglang"))
