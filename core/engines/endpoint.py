"""An already-running OpenAI-compatible server: nothing is launched or stopped."""

from __future__ import annotations

from typing import Any

import httpx

from core.config import ServerConfig
from core.engines.base import EngineInfo, LaunchPlan

__all__ = ["EndpointAdapter"]


class EndpointAdapter:
    name = "endpoint"

    def detect(self) -> EngineInfo:
        return EngineInfo(name=self.name, installed=True, version=None,
                          notes=("nothing is launched; facts are what the server exposes",))

    def plan_launch(self, config: ServerConfig, port: int, info: EngineInfo) -> LaunchPlan:
        url = (config.endpoint_url or "").rstrip("/")
        model_name = None if config.model == "smollm2-135m-instruct" else config.model
        return LaunchPlan(argv=None, base_url=url, health_path="/v1/models",
                          model_name=model_name, tokenizer_path=config.tokenizer,
                          supports_ignore_eos=True, supports_flush_cache=False)

    def collect_facts(self, base_url: str, log_text: str) -> dict[str, Any]:
        facts: dict[str, Any] = {"facts_source": "endpoint"}
        try:
            with httpx.Client(timeout=10.0) as client:
                models = client.get(f"{base_url}/v1/models")
                if models.status_code == 200:
                    facts["served_models"] = [m.get("id") for m in models.json().get("data", [])]
                info = client.get(f"{base_url}/server_info")
                if info.status_code == 200:
                    raw = info.json()
                    facts["engine_version"] = raw.get("version")
                    facts["kv_cache_tokens"] = raw.get("max_total_num_tokens")
                    facts["server_info_raw"] = raw
        except (httpx.HTTPError, ValueError):
            pass
        return facts
