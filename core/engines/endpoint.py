"""An already-running OpenAI-compatible server: nothing is launched or stopped.

Which server it is, ServeLab cannot know beforehand, and servers differ in how a request asks
for exactly ``max_tokens`` tokens: SGLang and vLLM take ``ignore_eos``, ``transformers serve``
refuses it (HTTP 422) and takes ``generation_config={"eos_token_id": -1}``, others take
neither. ``choose_exact_length`` asks the server itself, once, before the warm-up.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import httpx

from core.config import ServerConfig
from core.engines.base import EngineAdapter, EngineInfo, ExactLength, LaunchPlan, TokenLogprob
from core.engines.declare import EngineSpec, KnobSpec, LogprobSupport
from core.engines.logprobs import (
    COMPLETIONS_PATH,
    completions_logprobs_body,
    completions_score_body,
    parse_completions_logprobs,
    parse_completions_score,
)

__all__ = [
    "ENGINE",
    "EXACT_LENGTH_MECHANISMS",
    "EndpointAdapter",
    "choose_exact_length",
    "mechanism_name",
]

ENGINE = EngineSpec(
    name="endpoint",
    title="an already-running server",
    adapter="core.engines.endpoint:EndpointAdapter",
    launched=False,
    needs_endpoint_url=True,
    # The remote server's own; recorded with the run (and for Ray/GPU accounting: none).
    knobs=(KnobSpec("tp_size", None, "the remote server's GPUs (recorded only)"),),
    # vLLM and SGLang take token-id prompts and echo the prompt's logprobs; a server that
    # does not answers the check's requests with an error, recorded per prompt.
    logprobs=LogprobSupport(COMPLETIONS_PATH, ("logprobs", "echo"), token_ids=True, scores=True),
    # collect_facts reads an SGLang-like /server_info's max_total_num_tokens when it answers
    memory_facts={"kv_cache_tokens": "kv_cache_tokens"},
)

# Request fields that ask for exactly max_tokens tokens, tried in this order.
EXACT_LENGTH_MECHANISMS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("ignore_eos", {"ignore_eos": True}),
    ("generation_config", {"generation_config": json.dumps({"eos_token_id": -1})}),
)
# The trial question: a model that may stop does so after a word or two, well before
# _TRIAL_TOKENS, so an accepted but ignored field shows as a short reply.
_TRIAL_PROMPT = "Reply with the single word OK."
_TRIAL_TOKENS = 6


def mechanism_name(body: dict[str, Any]) -> str:
    """The name of the exact-length mechanism a request body carries ("none" if none)."""
    for name, fields in EXACT_LENGTH_MECHANISMS:
        if body and all(body.get(k) == v for k, v in fields.items()):
            return name
    return "none" if not body else "custom"


def _trial(
    client: httpx.Client, base_url: str, model: str, fields: dict[str, Any]
) -> tuple[bool, str]:
    """(honoured, why) for one mechanism: accepted and the reply ran to the full length."""
    from core.load.openai import CHAT_PATH, chat_request, read_completion

    body = chat_request(model, _TRIAL_PROMPT, _TRIAL_TOKENS, stream=False, extra=fields)
    try:
        resp = client.post(base_url + CHAT_PATH, json=body)
    except httpx.HTTPError as exc:
        return False, f"no answer ({type(exc).__name__})"
    if resp.status_code != 200:
        return False, f"refused with HTTP {resp.status_code}"
    try:
        _text, finish, tokens = read_completion(resp.json())
    except (ValueError, RecursionError):
        return False, "answered with something that is not a chat completion"
    if tokens is not None:
        if tokens >= _TRIAL_TOKENS:
            return True, f"accepted; a {_TRIAL_TOKENS}-token reply ran to its full length"
        return False, f"accepted but ignored: the reply stopped after {tokens} token(s)"
    if finish == "length":
        return True, "accepted; the reply ended at max_tokens (no usage counts)"
    return False, f"accepted, but the reply ended with {finish!r} before max_tokens"


def choose_exact_length(
    base_url: str, model: str, headers: dict[str, str] | None = None, timeout_s: float = 120.0
) -> ExactLength:
    """(mechanism, request fields, why in words): the first of EXACT_LENGTH_MECHANISMS the
    server accepts and honours, found with one short request each; ("none", {}, why) when
    none is, so output lengths are whatever the model produces and the run says so."""
    tried: list[str] = []
    with httpx.Client(timeout=timeout_s, headers=headers) as client:
        for name, fields in EXACT_LENGTH_MECHANISMS:
            honoured, why = _trial(client, base_url.rstrip("/"), model, fields)
            if honoured:
                return name, dict(fields), "; ".join([*tried, f"{name}: {why}"])
            tried.append(f"{name}: {why}")
    return (
        "none",
        {},
        (
            "; ".join(tried) + ". Output lengths are not exact: each reply ends "
            "where the model stops"
        ),
    )


class EndpointAdapter(EngineAdapter):
    name = ENGINE.name
    asks_exact_length = True

    def logprobs_request(
        self, model: str, prompt: str | Sequence[int], max_tokens: int, top_n: int
    ) -> tuple[str, dict[str, Any]]:
        return COMPLETIONS_PATH, completions_logprobs_body(model, prompt, max_tokens, top_n)

    def parse_logprobs(self, body: dict[str, Any]) -> list[TokenLogprob]:
        return parse_completions_logprobs(body)

    def score_request(
        self, model: str, prompt_ids: Sequence[int], continuation_ids: Sequence[int], top_n: int
    ) -> tuple[str, dict[str, Any]]:
        body = completions_score_body(model, prompt_ids, continuation_ids, top_n)
        return COMPLETIONS_PATH, body

    def parse_score(self, body: dict[str, Any], count: int) -> list[TokenLogprob]:
        return parse_completions_score(body, count)

    def detect(self) -> EngineInfo:
        return EngineInfo(
            name=self.name,
            installed=True,
            version=None,
            notes=("nothing is launched; facts are what the server exposes",),
        )

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        from core.load.openai import MODELS_PATH

        url = (config.endpoint_url or "").rstrip("/")
        model_name = None if config.model == "smollm2-135m-instruct" else config.model
        return LaunchPlan(
            argv=None,
            base_url=url,
            health_path=MODELS_PATH,
            model_name=model_name,
            tokenizer_path=config.tokenizer,
            supports_ignore_eos=True,
            supports_flush_cache=False,
            notes=(
                "exact output lengths: the mechanism is chosen by asking "
                "the server before the warm-up",
            ),
        )

    def choose_exact_length(
        self, base_url: str, model: str, headers: dict[str, str] | None, timeout_s: float
    ) -> ExactLength:
        return choose_exact_length(base_url, model, headers, timeout_s)

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        from core.load.openai import served_models

        facts: dict[str, Any] = {"facts_source": "endpoint"}
        try:
            with httpx.Client(timeout=10.0) as client:
                models, _answer = served_models(client, base_url)
                if models is not None:
                    facts["served_models"] = models
                info = client.get(f"{base_url}/server_info")
                if info.status_code == 200:
                    raw = info.json()
                    facts["engine_version"] = raw.get("version")
                    facts["kv_cache_tokens"] = raw.get("max_total_num_tokens")
                    facts["server_info_raw"] = raw
        except (httpx.HTTPError, ValueError):
            pass
        return facts
