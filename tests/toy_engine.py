"""The toy engine: everything an engine declares, in one module, for a server that is a
test fake (tests/fakes/toy_server.py). Registered with one entry,
``SERVELAB_ENGINES=toy=tests.toy_engine`` (tests/test_toy_engine.py); docs/ENGINES.md
"Adding an engine" walks through it."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx

from core.config import ServerConfig
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan, TokenLogprob
from core.engines.declare import EngineSpec, KnobSpec, LogprobSupport
from core.engines.logprobs import (
    COMPLETIONS_PATH,
    completions_logprobs_body,
    parse_completions_logprobs,
)
from core.errors import ConfigError, EngineUnavailable

SERVER = Path(__file__).resolve().parent / "fakes" / "toy_server.py"
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")

ENGINE = EngineSpec(
    name="toy",
    title="the toy server",
    adapter="tests.toy_engine:ToyAdapter",
    knobs=(KnobSpec("continuous_batching", "--batching", "requests served together"),),
    server_metrics={"running_reqs": ("toy:num_running_reqs",)},
    logprobs=LogprobSupport(COMPLETIONS_PATH, ("logprobs",)),
)


class ToyAdapter(EngineAdapter):
    name = ENGINE.name

    def detect(self) -> EngineInfo:
        """Its flags from its own ``--help``, as a real engine's are."""
        proc = subprocess.run(
            [sys.executable, str(SERVER), "--help"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if proc.returncode != 0:
            return EngineInfo(self.name, installed=False, reason=proc.stderr[-300:])
        options = frozenset(_FLAG.findall(proc.stdout))
        return EngineInfo(self.name, installed=True, version="1.0", options=options)

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        if not info.installed:
            raise EngineUnavailable(f"the toy server cannot start: {info.reason}")
        argv = [sys.executable, str(SERVER), "--host", config.host, "--port", str(port)]
        argv += ["--model", config.model]
        if config.continuous_batching:
            argv.append("--batching")
        for item in config.extra_args:
            flag = item.split("=", 1)[0]
            if item.startswith("--") and info.options and flag not in info.options:
                raise ConfigError("server.extra_args", f"{flag} is unknown to the toy server")
        return LaunchPlan(
            argv=argv + list(config.extra_args),
            base_url=f"http://{config.host}:{port}",
            health_path="/health",
            model_name=config.model,
            tokenizer_path=config.tokenizer or config.model,
        )

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {"facts_source": "toy", "engine_version": "1.0"}
        try:
            body = httpx.get(base_url + "/v1/models", timeout=10).json()
            facts["served_models"] = [m["id"] for m in body["data"]]
        except (httpx.HTTPError, ValueError, KeyError, TypeError):
            facts["served_models"] = None
        return facts

    def logprobs_request(
        self, model: str, prompt: str, max_tokens: int, top_n: int
    ) -> tuple[str, dict[str, Any]]:
        return COMPLETIONS_PATH, completions_logprobs_body(model, prompt, max_tokens, top_n)

    def parse_logprobs(self, body: dict[str, Any]) -> list[TokenLogprob]:
        return parse_completions_logprobs(body)
