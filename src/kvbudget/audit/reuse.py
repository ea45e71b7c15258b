"""Reuse-correctness audit: does output computed from reused KV equal output computed cold?

For each prompt: a **cold** run, a **hot** run of the same prompt (its prefix should now hit
the cache), and — after ``/reset_prefix_cache`` — an **after-reset** run: ``recomputed``,
or ``cached_after_reset`` (cached tokens > 0 after the reset: KV reloaded from a lower tier
such as CPU offload, or a reset that did not take effect). Greedy decoding (``temperature=0``) with top logprobs where the engine offers them.

Per comparison (hot vs cold, after-reset vs cold): ``identical``; ``within_tolerance`` (at the
first differing token ``k`` both runs carry top logprobs, each run's token is in the other's
top-k and the two logprobs of the reference run differ by at most ``tol``: a near-tie that
numerical noise may flip); else ``diverged_at_token_k``. Reuse must be shown to have run (hot
cached tokens > 0 or the hit counter moved); otherwise the verdict is ``reuse_not_exercised``,
never a pass. Rules in ``docs/audits.md``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from kvbudget.audit.probes import Completion, Probe
from kvbudget.errors import ConfigError, RunFailedError
from kvbudget.load.diagnosis import failure_from_text, stopped_line
from kvbudget.records import ResultDocument
from kvbudget.workload.tokenizer import get_tokenizer

ReuseVerdict = Literal["pass", "diverged", "reuse_not_exercised", "incomplete"]
Status = Literal["pass", "fail", "inconclusive"]


@dataclass(frozen=True)
class ReuseConfig:
    num_prompts: int = 8
    prompt_tokens: int = 512
    max_tokens: int = 32
    logprobs: int = 5
    tolerance: float = 0.05
    seed: int = 0
    reset: bool = True
    vocab_size: int = 32000

    def validate(self) -> None:
        if self.num_prompts < 1 or self.prompt_tokens < 1 or self.max_tokens < 1:
            raise ConfigError(
                f"--prompts {self.num_prompts} / --input-tokens {self.prompt_tokens} / "
                f"--output-tokens {self.max_tokens}: each must be >= 1 (prompts should span "
                "several KV blocks, e.g. 512 tokens)",
                field="prompts",
            )
        if not 0 <= self.logprobs <= 20:
            raise ConfigError(
                f"--logprobs {self.logprobs}: must lie in [0, 20] (0 = do not ask)",
                field="logprobs",
            )
        if self.tolerance < 0:
            raise ConfigError(
                f"--tolerance {self.tolerance}: must be >= 0 (nats)", field="tolerance"
            )


class Comparison(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: str  # identical | within_tolerance | diverged_at_token_k | untested | error
    first_divergence: int | None = None
    detail: str | None = None


class RunRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ok: bool
    #: prompt tokens as the server counted them (its own tokenizer), if reported
    prompt_tokens: int | None
    cached_tokens: int | None
    hit_counter_delta: float | None
    output_sha256: str | None
    num_output_tokens: int | None
    error: str | None = None


class PromptResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompt_sha256: str
    #: prompt length requested (tokens; sent as served token ids to vLLM/SGLang, whose own
    #: count in the runs is then the same: see kvbudget.audit.probe_http)
    prompt_tokens: int
    cold: RunRecord
    hot: RunRecord
    after_reset: RunRecord | None
    reuse_proven: bool
    after_reset_path: Literal["cached_after_reset", "recomputed", "untested"]
    hot_vs_cold: Comparison
    after_reset_vs_cold: Comparison


class ReuseResult(ResultDocument):
    """Result of ``kvbudget audit reuse`` (embedded by accept as a report section)."""

    kind: str = "audit-reuse"
    verdict: ReuseVerdict
    status: Status
    reason: str
    seed: int
    max_tokens: int
    logprobs: int
    tolerance: float
    tolerance_rule: str
    source: Literal["measured", "simulated"]
    target: dict[str, Any]
    reset_available: bool
    num_prompts: int
    num_reuse_proven: int
    num_diverged: int
    token_basis: str
    prompts: list[PromptResult]

    def summary(self) -> dict[str, Any]:
        """The headline fields (what accept's ``audits`` dict reads)."""
        return {
            "verdict": self.verdict,
            "status": self.status,
            "reason": self.reason,
            "num_prompts": self.num_prompts,
            "num_reuse_proven": self.num_reuse_proven,
            "num_diverged": self.num_diverged,
            "reset_available": self.reset_available,
            "source": self.source,
        }

    def to_markdown(self, heading_level: int = 2) -> str:
        from kvbudget.audit.render import reuse_markdown

        return reuse_markdown(self, heading_level)


def tolerance_rule(cfg: ReuseConfig) -> str:
    return (
        f"within_tolerance: at the first differing token both runs give top-{cfg.logprobs} "
        f"logprobs, each token is in the other run's top-{cfg.logprobs}, and in the cold "
        f"run's distribution the two tokens' logprobs differ by <= {cfg.tolerance:g} nats"
    )


def _units(c: Completion) -> tuple[list[str], str]:
    """Token strings of a completion and the basis they come from."""
    if c.tokens is not None:
        return list(c.tokens), "token strings returned with the completion"
    return c.text.split(), "whitespace words (the engine returned no token list)"


def compare(ref: Completion, other: Completion, cfg: ReuseConfig) -> Comparison:
    """Compare ``other`` with the reference (cold) completion (rules in the module doc)."""
    if not (ref.ok and other.ok):
        return Comparison(verdict="error", detail=ref.error or other.error)
    a, _ = _units(ref)
    b, _ = _units(other)
    if a == b and ref.text == other.text:
        return Comparison(verdict="identical")
    k = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
    ta, tb = ref.top_logprobs, other.top_logprobs
    if (
        ta is not None
        and tb is not None
        and k < len(ta)
        and k < len(tb)
        and k < min(len(a), len(b))
    ):
        x, y = a[k], b[k]
        if x in tb[k] and y in ta[k] and abs(ta[k][x] - ta[k][y]) <= cfg.tolerance:
            return Comparison(
                verdict="within_tolerance",
                first_divergence=k,
                detail=f"near-tie at token {k}: logprob gap {abs(ta[k][x] - ta[k][y]):.4g} nats",
            )
    return Comparison(
        verdict=f"diverged_at_token_{k}",
        first_divergence=k,
        detail="outputs differ" + ("" if a != b else " in spacing only"),
    )


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _record(c: Completion, delta: float | None) -> RunRecord:
    return RunRecord(
        ok=c.ok,
        prompt_tokens=c.prompt_tokens,
        cached_tokens=c.cached_tokens,
        hit_counter_delta=delta,
        output_sha256=_sha(c.text) if c.ok else None,
        num_output_tokens=len(_units(c)[0]) if c.ok else None,
        error=c.error,
    )


async def _timed(
    probe: Probe, ids: tuple[int, ...], text: str, cfg: ReuseConfig
) -> tuple[Completion, float | None]:
    before = await probe.hit_counter()
    c = await probe.complete(ids, text, max_tokens=cfg.max_tokens, logprobs=cfg.logprobs)
    after = await probe.hit_counter()
    return c, (None if before is None or after is None else after - before)


def make_prompts(cfg: ReuseConfig) -> list[tuple[tuple[int, ...], str]]:
    """Seeded random prompts as (token ids, text) of the shared synthetic tokenizer."""
    tok = get_tokenizer(cfg.vocab_size)
    rng = np.random.default_rng(cfg.seed)
    out = []
    for _ in range(cfg.num_prompts):
        ids = tuple(int(x) for x in tok.random_ids(rng, cfg.prompt_tokens))
        out.append((ids, tok.decode(ids)))
    return out


def _overall(
    prompts: list[PromptResult], reset_ok: bool, cfg: ReuseConfig
) -> tuple[ReuseVerdict, Status, str]:
    diverged = [
        i
        for i, p in enumerate(prompts)
        if p.hot_vs_cold.verdict.startswith("diverged")
        or p.after_reset_vs_cold.verdict.startswith("diverged")
    ]
    if diverged:
        return (
            "diverged",
            "fail",
            (
                f"{len(diverged)} of {len(prompts)} prompt(s) produced a different greedy "
                f"output on a repeated run (first: prompt {diverged[0]}; reuse shown on "
                f"{sum(1 for i in diverged if prompts[i].reuse_proven)} of them); "
                + tolerance_rule(cfg)
            ),
        )
    errors = [
        p for p in prompts if "error" in (p.hot_vs_cold.verdict, p.after_reset_vs_cold.verdict)
    ]
    proven = sum(1 for p in prompts if p.reuse_proven)
    if proven == 0:
        return (
            "reuse_not_exercised",
            "inconclusive",
            (
                "no hot run reported cached tokens and the hit counter never moved: the reuse "
                "path did not run, so its correctness is untested"
            ),
        )
    if errors:
        return "incomplete", "inconclusive", f"{len(errors)} prompt(s) had failed requests"
    if not reset_ok:
        return (
            "incomplete",
            "inconclusive",
            (
                "hot runs matched the cold runs, but the after-reset run is untested: the target "
                "refused the reset or has no reset route (/reset_prefix_cache, /flush_cache; vLLM "
                "serves /reset_prefix_cache only with VLLM_SERVER_DEV_MODE=1)"
            ),
        )
    return (
        "pass",
        "pass",
        (
            f"hot and after-reset outputs matched the cold outputs for all {len(prompts)} "
            f"prompt(s); reuse shown on {proven}"
        ),
    )


async def run_reuse(
    probe: Probe,
    cfg: ReuseConfig,
    *,
    prompts: Sequence[tuple[tuple[int, ...], str]] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ReuseResult:
    """Run the audit (prompts: given, else seeded random ones); see module doc."""
    cfg.validate()
    ident = await probe.identity()
    items = list(prompts) if prompts is not None else make_prompts(cfg)
    if not items:
        raise ConfigError("--prompts-file holds no prompts; give at least one", field="prompts")
    n_steps = 2 * len(items) + (len(items) if cfg.reset else 0)
    done = 0
    if cfg.reset:
        await probe.reset()  # best effort: make the cold runs cold
    firsts: list[tuple[Completion, float | None, Completion, float | None]] = []
    for ids, text in items:
        cold, dc = await _timed(probe, ids, text, cfg)
        hot, dh = await _timed(probe, ids, text, cfg)
        if not cold.ok and not hot.ok and not firsts:
            raise RunFailedError(
                stopped_line(
                    [failure_from_text(cold.error), failure_from_text(hot.error)],
                    num_sent=2,
                    url=ident.base_url or "the simulator",
                )
            )
        firsts.append((cold, dc, hot, dh))
        done += 2
        if progress:
            progress(done, n_steps)
    reset_ok = await probe.reset() if cfg.reset else False
    results: list[PromptResult] = []
    bases: set[str] = set()
    for (ids, text), (cold, dc, hot, dh) in zip(items, firsts, strict=True):
        after: Completion | None = None
        da: float | None = None
        if reset_ok:
            after, da = await _timed(probe, ids, text, cfg)
            done += 1
            if progress:
                progress(done, n_steps)
        bases.add(_units(cold)[1])
        proven = (hot.cached_tokens or 0) > 0 or (dh or 0) > 0
        if after is None:
            path: Literal["cached_after_reset", "recomputed", "untested"] = "untested"
            ar = Comparison(verdict="untested", detail="no prefix-cache reset available")
        else:
            path = (
                "cached_after_reset"
                if (after.cached_tokens or 0) > 0 or (da or 0) > 0
                else "recomputed"
            )
            ar = compare(cold, after, cfg)
        hv = compare(cold, hot, cfg)
        if not proven and hv.verdict == "identical":
            hv = Comparison(verdict="identical", detail="reuse not shown for this prompt")
        results.append(
            PromptResult(
                prompt_sha256=_sha(text),
                prompt_tokens=len(ids),
                cold=_record(cold, dc),
                hot=_record(hot, dh),
                after_reset=_record(after, da) if after is not None else None,
                reuse_proven=proven,
                after_reset_path=path,
                hot_vs_cold=hv,
                after_reset_vs_cold=ar,
            )
        )
    verdict, status, reason = _overall(results, reset_ok, cfg)
    return ReuseResult(
        provenance=ident.provenance(),
        verdict=verdict,
        status=status,
        reason=reason,
        seed=cfg.seed,
        max_tokens=cfg.max_tokens,
        logprobs=cfg.logprobs,
        tolerance=cfg.tolerance,
        tolerance_rule=tolerance_rule(cfg),
        source=ident.source,
        target=ident.to_dict(),
        reset_available=reset_ok,
        num_prompts=len(results),
        num_reuse_proven=sum(1 for p in results if p.reuse_proven),
        num_diverged=sum(
            1
            for p in results
            if p.hot_vs_cold.verdict.startswith("diverged")
            or p.after_reset_vs_cold.verdict.startswith("diverged")
        ),
        token_basis="; ".join(sorted(bases)),
        prompts=results,
    )
