"""The HTTP probe: any OpenAI-compatible endpoint (see :mod:`kvbudget.audit.probes`).

Prompts in the served model's tokens: against vLLM or SGLang on ``/v1/completions``, a prompt
is sent as a list of the SERVED model's token ids, so an audit's N-token prompt is N tokens on
the server (its prefix-cache and cached-token counts are then exact: a 256-token shared prefix
is two full 128-token blocks). Each of the audit's synthetic ids ``i`` becomes
``allowed[i % len(allowed)]`` (the served vocabulary without its special ids, as
``bench --tokenizer`` maps them: :mod:`kvbudget.load.served_prompts`), so prompts that share a
prefix still share it, token for token. The vocabulary comes from the served model's
``tokenizer.json`` (``/v1/models`` ``root`` a local directory or cached hub id) or the server's
``/tokenize``; when neither is available, or on the chat endpoint, llama.cpp and ``kvbudget
serve``, the synthetic text is sent as before. ``identity().details["prompts"]`` says which.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from kvbudget.audit.probes import Completion, Observation, TargetIdentity
from kvbudget.engine_name import KVBUDGET_SERVE
from kvbudget.errors import ConfigError, TargetError
from kvbudget.load.client import ClientRequest, Endpoint, OpenAIClient
from kvbudget.load.identity import server_identity
from kvbudget.load.prometheus import parse_exposition
from kvbudget.load.served_model import check_served_model
from kvbudget.load.served_prompts import AUTO, allowed_ids, resolve_tokenizer
from kvbudget.load.urls import ENDPOINT_PATHS
from kvbudget.records import excerpt

HIT_SERIES = ("prefix_cache_hits_tokens", "prompt_tokens_cached")
#: engines whose /v1/completions takes a token-id list and counts it as given (no BOS added)
TOKEN_ID_ENGINES = ("vllm", "sglang")


def _parse_logprobs(
    choice: dict[str, Any],
) -> tuple[tuple[str, ...] | None, tuple[dict[str, float], ...] | None]:
    """Tokens and top logprobs of a completion choice, in either shape engines use.

    vLLM / SGLang (legacy completions): ``{"tokens": [...], "top_logprobs": [{tok: lp}]}``;
    llama.cpp (chat-style): ``{"content": [{"token", "logprob", "top_logprobs": [{"token",
    "logprob"}]}]}``. Anything else: ``(None, None)``.
    """
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None, None
    content = lp.get("content")
    if isinstance(content, list) and all(isinstance(e, dict) for e in content):
        toks = tuple(str(e.get("token", "")) for e in content)
        tops_c: list[dict[str, float]] = []
        for e in content:
            entry = e.get("top_logprobs")
            entries = entry if isinstance(entry, list) else []
            tops_c.append(
                {
                    str(t.get("token")): float(t["logprob"])
                    for t in entries
                    if isinstance(t, dict) and isinstance(t.get("logprob"), int | float)
                }
            )
        return toks, tuple(tops_c)
    tokens = lp.get("tokens")
    tops = lp.get("top_logprobs")
    tok_out = tuple(str(t) for t in tokens) if isinstance(tokens, list) else None
    top_out: tuple[dict[str, float], ...] | None = None
    if isinstance(tops, list) and all(isinstance(t, dict) or t is None for t in tops):
        top_out = tuple(
            {str(k): float(v) for k, v in (t or {}).items() if isinstance(v, int | float)}
            for t in tops
        )
    return tok_out, top_out


def redact_url(url: str) -> str:
    """The URL without user:password@ (never written into a result)."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class HttpProbe:
    """An OpenAI-compatible endpoint (use as ``async with``); every figure is measured."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None,
        metrics_url: str | None = None,
        api_key: str | None = None,
        timeout_s: float = 60.0,
        endpoint: Endpoint = "completions",
        tenant_api_keys: Mapping[str, str] | None = None,
    ) -> None:
        self.client = OpenAIClient(base_url, concurrency=1, timeout_s=timeout_s, api_key=api_key)
        #: tenants a gateway tells apart by API key: their own client (own key); other tenants
        #: use ``client``. Keys live only in the clients' Authorization headers.
        self.tenant_clients: dict[str, OpenAIClient] = {
            tenant: OpenAIClient(base_url, concurrency=1, timeout_s=timeout_s, api_key=key)
            for tenant, key in (tenant_api_keys or {}).items()
        }
        #: ``completions`` (raw prompt) or ``chat`` (one user message; the chat template's
        #: tokens are common to every prompt and land in the control arm's baseline)
        self.endpoint: Endpoint = endpoint
        self.model = model
        self.metrics_url = metrics_url
        self.timeout_s = timeout_s
        self.metrics_errors = 0
        self.reset_route: str | None = None
        self._identity: TargetIdentity | None = None
        #: the served vocabulary without special ids, when prompts are sent as its token ids
        self.served_ids: list[int] | None = None

    async def __aenter__(self) -> HttpProbe:
        await self.client.__aenter__()
        for client in self.tenant_clients.values():
            await client.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        for client in self.tenant_clients.values():
            await client.__aexit__(*exc)
        await self.client.__aexit__(*exc)

    async def identity(self) -> TargetIdentity:
        if self._identity is not None:
            return self._identity
        ident = await server_identity(self.client)
        # the name is checked against /v1/models (or taken from it) before any request
        self.model = check_served_model(
            redact_url(self.client.base_url), self.model, ident, connect_timeout_s=10.0
        )
        prompts = await self._served_vocabulary(ident)
        # kvbudget serve is the simulator behind HTTP: its step times are simulated, not measured
        own_sim = ident.get("engine") == KVBUDGET_SERVE
        timing = (ident.get("version") or {}).get("timing_model") if own_sim else None
        self._identity = TargetIdentity(
            kind="http",
            source="simulated" if own_sim else "measured",
            timing_model=str(timing) if timing else None,
            engine=ident.get("engine"),
            engine_version=ident.get("engine_version"),
            model=self.model,
            base_url=redact_url(self.client.base_url),
            details={k: v for k, v in ident.items() if k not in ("base_url",)}
            | {"prompts": prompts},
        )
        return self._identity

    async def _served_vocabulary(self, ident: dict[str, Any]) -> str:
        """Find the served vocabulary (see the module doc); says how prompts will be sent."""
        if self.endpoint != "completions" or ident.get("engine") not in TOKEN_ID_ENGINES:
            return "synthetic-tokenizer text"
        models = ident.get("models") or [{}]
        root = models[0].get("root") if isinstance(models[0], dict) else None
        try:
            tok = await resolve_tokenizer(self.client, self._model(), AUTO, root, ident["engine"])
            allowed = None if tok is None else await allowed_ids(tok)
        except (ConfigError, OSError, ValueError, RuntimeError):
            tok, allowed = None, None
        if tok is None or allowed is None or len(allowed) == 0:
            return "synthetic-tokenizer text (no served tokenizer found)"
        self.served_ids = [int(i) for i in allowed]
        return f"served token ids ({tok.source}; {len(allowed)} ids)"

    def _ids_body(self, prompt_ids: tuple[int, ...]) -> dict[str, Any]:
        return {} if self.served_ids is None else {"prompt": self.served_prompt(prompt_ids, "")}

    def served_prompt(self, prompt_ids: tuple[int, ...], prompt_text: str) -> str | list[int]:
        """What goes in the request's ``prompt``: served token ids, else the text."""
        if self.served_ids is None:
            return prompt_text
        allowed = self.served_ids
        return [allowed[i % len(allowed)] for i in prompt_ids]

    def _model(self) -> str:
        if self.model is None:
            raise TargetError("HttpProbe used before identity(): no model name")
        return self.model

    async def send(
        self,
        prompt_ids: tuple[int, ...],
        prompt_text: str,
        *,
        tenant: str,
        cache_salt: str | None,
        request_id: str,
    ) -> Observation:
        req = ClientRequest(
            request_id=request_id,
            prompt=prompt_text,
            max_tokens=1,
            model=self._model(),
            endpoint=self.endpoint,
            cache_salt=cache_salt,
            extra_body={"temperature": 0, **self._ids_body(prompt_ids)},
        )
        out = await self.tenant_clients.get(tenant, self.client).stream(req)
        if out.status != "ok" or out.sent_s is None:
            return Observation(
                None, None, None, ok=False, error=f"{out.error_kind}: {out.error_excerpt or ''}"
            )
        end = out.first_token_s if out.first_token_s is not None else out.done_s
        ttft = None if end is None else end - out.sent_s
        return Observation(ttft, out.cached_tokens, out.usage_prompt_tokens, ok=True)

    async def hit_counter(self) -> float | None:
        if not self.metrics_url:
            return None
        try:
            async with self.client.session.get(
                self.metrics_url, timeout=aiohttp.ClientTimeout(total=10)
            ) as resp:
                if resp.status != 200:
                    self.metrics_errors += 1
                    return None
                text = await resp.text()
            samples = parse_exposition(text, time.perf_counter())
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError):
            self.metrics_errors += 1
            return None
        values = {s.name: s.value for s in samples if not s.labels}
        for name in HIT_SERIES:
            if name in values:
                return values[name]
        return None

    async def reset(self) -> bool:
        """Reset the prefix cache: vLLM's ``POST /reset_prefix_cache`` (mounted only with
        ``VLLM_SERVER_DEV_MODE=1`` in recent vLLM), else SGLang's ``POST /flush_cache``.

        True on HTTP 200 unless the body says ``{"reset": false}`` (kvbudget serve). Some vLLM
        versions answer 200 even when the reset did not happen; the after-reset run's cached
        tokens show it (see docs/audits.md). ``reset_route`` records the route that answered.
        """
        for route in ("/reset_prefix_cache", "/flush_cache"):
            try:
                async with self.client.session.post(
                    self.client.base_url + route,
                    timeout=aiohttp.ClientTimeout(total=self.timeout_s),
                ) as resp:
                    if resp.status in (404, 405):
                        continue
                    text = await resp.text()
            except (TimeoutError, aiohttp.ClientError, OSError):
                return False
            self.reset_route = route
            if resp.status != 200:
                return False
            try:
                body = json.loads(text)
            except ValueError:
                body = None
            return not (isinstance(body, dict) and body.get("reset") is False)
        return False

    async def complete(
        self, prompt_ids: tuple[int, ...], prompt_text: str, *, max_tokens: int, logprobs: int
    ) -> Completion:
        chat = self.endpoint == "chat"
        body: dict[str, Any] = {
            "model": self._model(),
            "max_tokens": max_tokens,
            "temperature": 0,
            "ignore_eos": True,
            "stream": False,
        }
        if chat:
            body["messages"] = [{"role": "user", "content": prompt_text}]
            if logprobs > 0:
                body["logprobs"] = True
                body["top_logprobs"] = logprobs
        else:
            body["prompt"] = self.served_prompt(prompt_ids, prompt_text)
            if logprobs > 0:
                body["logprobs"] = logprobs
        try:
            async with self.client.session.post(
                self.client.base_url + ENDPOINT_PATHS[self.endpoint],
                json=body,
                timeout=aiohttp.ClientTimeout(total=self.timeout_s),
            ) as resp:
                text = await resp.text()
                if resp.status != 200:
                    return _failed(f"HTTP {resp.status}: {excerpt(text)}")
                obj = await resp.json(content_type=None)
        except (TimeoutError, aiohttp.ClientError, OSError, ValueError) as exc:
            return _failed(f"{type(exc).__name__}: {exc}")
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            return _failed("response has no choices[0]")
        choice = choices[0]
        tokens, tops = _parse_logprobs(choice)
        cached: int | None = None
        prompt_tokens: int | None = None
        use = obj.get("usage")
        if isinstance(use, dict):
            if isinstance(use.get("prompt_tokens"), int):
                prompt_tokens = int(use["prompt_tokens"])
            details = use.get("prompt_tokens_details")
            if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
                cached = int(details["cached_tokens"])
        message = choice.get("message")
        content = message.get("content") if chat and isinstance(message, dict) else None
        return Completion(
            text=str((content or "") if chat else (choice.get("text") or "")),
            tokens=tokens,
            top_logprobs=tops,
            cached_tokens=cached,
            prompt_tokens=prompt_tokens,
        )


def _failed(error: str) -> Completion:
    return Completion("", None, None, None, ok=False, error=error)
