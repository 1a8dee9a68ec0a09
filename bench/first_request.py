"""How long `transformers serve` takes for its first request and the next ones.

`--continuous-batching` starts its batching manager and KV cache on the first request, so the
first request (whichever ServeLab step sends it: the probe) pays part of the engine's start-up.
This starts the server on the bundled SmolLM2 (data/models/), waits for /health, then times
three non-streamed requests: max_tokens 1, 1 again, and 8. docs/BENCHMARKS.md §6.

    python -m bench.first_request [--no-continuous-batching] [--cb-max-memory-percent F]

Memory: on a CPU, transformers 5.24's continuous batching sizes its KV cache from the free
host memory (0.9 of it by default) and fills it as it goes: the server reached 13.6 GB
resident on the 24 GiB development machine and was OOM-killed twice there while other
programs ran. On a shared host pass --cb-max-memory-percent (e.g. 0.1).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import httpx

from bench.common import OUT, machine
from core.engines.model_setup import ensure_default_model
from core.run.launcher import ManagedServer, free_port
from core.settings import load_settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-continuous-batching", action="store_true")
    parser.add_argument(
        "--cb-max-memory-percent",
        type=float,
        help="the KV cache's share of free memory (engine default if unset)",
    )
    args = parser.parse_args()
    model = str(ensure_default_model(load_settings().models_dir))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    batching = (
        "--no-continuous-batching" if args.no_continuous_batching else "--continuous-batching"
    )
    OUT.mkdir(parents=True, exist_ok=True)
    server = ManagedServer(
        [
            sys.executable,
            "-m",
            "transformers.cli.transformers",
            "serve",
            model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            batching,
            "--device",
            "auto",
            "--dtype",
            "auto",
            "--no-compile",
            *(
                ["--cb-max-memory-percent", str(args.cb_max_memory_percent)]
                if args.cb_max_memory_percent
                else []
            ),
        ],
        OUT / "first_request.server.log",
        base + "/health",
        {"HF_HUB_OFFLINE": "1"},
    )
    rows: list[dict[str, object]] = []
    server.start()
    try:
        ready_s = server.wait_ready(600)
        for max_tokens in (1, 1, 8):
            body = {
                "model": model,
                "max_tokens": max_tokens,
                "temperature": 0.0,
                "messages": [
                    {
                        "role": "user",
                        "content": "What is the capital of France? Answer in one word.",
                    }
                ],
            }
            t = time.perf_counter()
            resp = httpx.post(base + "/v1/chat/completions", json=body, timeout=600)
            rows.append(
                {
                    "max_tokens": max_tokens,
                    "seconds": round(time.perf_counter() - t, 2),
                    "status": resp.status_code,
                }
            )
    finally:
        server.stop()
    result = {
        "machine": machine(),
        "load_average": os.getloadavg(),
        "flag": batching,
        "cb_max_memory_percent": args.cb_max_memory_percent,
        "ready_s": round(ready_s, 1),
        "requests": rows,
    }
    (OUT / "first_request.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
