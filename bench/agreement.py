"""Part 3 of docs/BENCHMARKS.md: ServeLab and SGLang's ``bench_serving`` against the same real
``transformers serve`` (SmolLM2-135M-Instruct on CPU), same prompts and settings, alternating.

The server is planned by ServeLab's own adapter (core/engines/transformers_serve.py) and started
by core.run.launcher.ManagedServer, once, for every trial of both clients. The prompts are the ones
ServeLab's pipeline makes for a point (core.load.prompts.make_prompts, seed 42 * 1000 + 0), written
as a ``custom`` dataset for bench_serving (``--sharegpt-output-len`` fixes the output length).
Exact lengths: transformers serve rejects ``ignore_eos`` (HTTP 422: unknown field); both
clients send ``generation_config={"eos_token_id": -1}`` (ServeLab through the adapter's
exact_length_body, bench_serving through ``--extra-request-body``, with its ``ignore_eos``
field dropped, see DROP_IGNORE_EOS). ServeLab's side is the pipeline's point code:
LoadGenerator with a warm-up of N requests, then the point, re-tokenised, compute_point_metrics.

    python -m bench.agreement [--trials 3 --concurrency 4 --num-prompts 16 --input-len 64
                               --output-len 64]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

from bench.common import OUT, REPO, bench_serving_record, machine, save
from core.config import ServerConfig
from core.engines import get_adapter
from core.load.generator import LoadGenerator, LoadOptions
from core.load.prompts import Prompt, load_tokenizer, make_prompts
from core.metrics import compute_point_metrics
from core.run.launcher import ManagedServer, free_port
from core.settings import load_settings

SGLANG_PY = REPO / "bench" / ".venv-sglang" / "bin" / "python"
# transformers serve answers HTTP 422 to any field it does not know, and bench_serving always
# sends ignore_eos (true, or false with --disable-ignore-eos; --extra-request-body can only
# add fields). So bench_serving runs unchanged except for that one field, dropped from each
# request body on its way into aiohttp.
DROP_IGNORE_EOS = """
import runpy, aiohttp
_post = aiohttp.ClientSession.post
def post(self, url, **kw):
    if isinstance(kw.get("json"), dict):
        kw["json"].pop("ignore_eos", None)
    return _post(self, url, **kw)
aiohttp.ClientSession.post = post
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
"""
KEYS = (
    "output_throughput",
    "median_ttft_ms",
    "median_itl_ms",
    "median_tpot_ms",
    "median_e2e_ms",
    "total_output_tokens",
)


def servelab(
    base: str, model: str, prompts: list[Prompt], c: int, body: dict[str, Any], tok: Any
) -> dict[str, Any]:
    common = {
        "base_url": base,
        "model": model,
        "seed": 43,
        "concurrency": c,
        "request_rate": float("inf"),
        "exact_length_body": body,
        "request_timeout_s": 600.0,
        "point_timeout_s": 1800.0,
    }
    warm = [Prompt(p.text, p.prompt_tokens, min(p.output_len, 32)) for p in prompts[:c]]
    with LoadGenerator(base, c, 600.0) as gen:
        gen.run(LoadOptions(**common), warm)  # type: ignore[arg-type]
        records, health = gen.run(LoadOptions(**common), prompts)  # type: ignore[arg-type]
    for r in records:
        if r.ok:
            r.output_tokens_retokenized = len(tok.encode(r.generated_text))
    m = compute_point_metrics(records)
    out = {k: m[k] for k in KEYS}
    out.update(
        completed=m["completed"],
        failed=m["failed"],
        total_output_tokens_retokenized=m["total_output_tokens_retokenized"],
        errors=m["errors_sample"],
        **health.as_dict(),
    )
    return out


def bench_serving(
    base: str,
    model: str,
    dataset: str,
    n: int,
    c: int,
    out_len: int,
    tokenizer: str,
    body: dict[str, Any],
    tag: str,
) -> dict[str, Any]:
    out = OUT / f"agreement-bench-serving-{tag}.jsonl"
    out.unlink(missing_ok=True)
    argv = [
        str(SGLANG_PY),
        "-c",
        DROP_IGNORE_EOS,
        "--backend",
        "sglang-oai-chat",
        "--base-url",
        base,
        "--model",
        model,
        "--tokenizer",
        tokenizer,
        "--dataset-name",
        "custom",
        "--dataset-path",
        dataset,
        "--num-prompts",
        str(n),
        "--sharegpt-output-len",
        str(out_len),
        "--max-concurrency",
        str(c),
        "--request-rate",
        "inf",
        "--warmup-requests",
        str(c),
        "--extra-request-body",
        json.dumps(body),
        "--disable-tqdm",
        "--output-file",
        str(out),
    ]
    rec, _ = bench_serving_record(argv, out, timeout_s=1800)
    res = {k: rec[k if k != "median_e2e_ms" else "median_e2e_latency_ms"] for k in KEYS}
    res.update(
        completed=rec["completed"],
        total_output_tokens_retokenized=rec["total_output_tokens_retokenized"],
        duration_s=rec["duration"],
    )
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--num-prompts", type=int, default=16)
    ap.add_argument("--input-len", type=int, default=64)
    ap.add_argument("--output-len", type=int, default=64)
    a = ap.parse_args()
    if not 1 <= a.trials <= 10 or not 1 <= a.num_prompts <= 256:
        raise SystemExit("--trials 1..10, --num-prompts 1..256")
    if not SGLANG_PY.exists():
        raise SystemExit(f"{SGLANG_PY} missing: see docs/BENCHMARKS.md part 2 for the install")
    OUT.mkdir(parents=True, exist_ok=True)
    settings = load_settings()
    adapter = get_adapter("transformers", settings)
    info = adapter.detect()
    config = ServerConfig(engine="transformers", device="cpu")
    plan = adapter.plan_launch(config, free_port(), info)
    assert plan.argv is not None
    tokenizer_dir = plan.tokenizer_path or config.model
    tok = load_tokenizer(tokenizer_dir)
    prompts = make_prompts(tok, a.num_prompts, a.input_len, a.output_len, seed=42 * 1000)
    dataset = OUT / "agreement-prompts.jsonl"
    dataset.write_text(
        "".join(
            json.dumps(
                {
                    "conversations": [
                        {"role": "user", "content": p.text},
                        {"role": "assistant", "content": "ok ok"},
                    ]
                }
            )
            + "\n"
            for p in prompts
        )
    )
    body = plan.exact_length_body
    rows: list[dict[str, Any]] = []
    t_start = time.monotonic()
    srv = ManagedServer(
        plan.argv, OUT / "agreement-server.log", plan.base_url + plan.health_path, plan.env
    )
    srv.start()
    try:
        srv.wait_ready(600)
        model = plan.model_name or "default"
        for trial in range(a.trials):
            order = (
                ("servelab", "bench_serving") if trial % 2 == 0 else ("bench_serving", "servelab")
            )
            for client in order:
                t = time.monotonic()
                res = (
                    servelab(plan.base_url, model, prompts, a.concurrency, body, tok)
                    if client == "servelab"
                    else bench_serving(
                        plan.base_url,
                        model,
                        str(dataset),
                        a.num_prompts,
                        a.concurrency,
                        a.output_len,
                        str(tokenizer_dir),
                        body,
                        f"t{trial}",
                    )
                )
                rows.append(
                    {"trial": trial, "client": client, "wall_s": time.monotonic() - t, **res}
                )
                print(
                    f"trial {trial} {client:13} out {res['output_throughput']:7.2f} tok/s "
                    f"TTFT p50 {res['median_ttft_ms']:8.1f} ITL p50 "
                    f"{res['median_itl_ms']:6.1f} ms tokens {res['total_output_tokens']} "
                    f"(retok {res['total_output_tokens_retokenized']})",
                    flush=True,
                )
    finally:
        srv.stop()
    summary: dict[str, Any] = {}
    for client in ("servelab", "bench_serving"):
        sel = [r for r in rows if r["client"] == client]
        summary[client] = {k: statistics.median(r[k] for r in sel) for k in KEYS}
    summary["diff_pct"] = {
        k: 100 * (summary["servelab"][k] / summary["bench_serving"][k] - 1)
        for k in KEYS
        if summary["bench_serving"][k]
    }
    path = save(
        "agreement.json",
        {
            "machine": machine(),
            "settings": vars(a),
            "argv": plan.argv,
            "body": body,
            "summary": summary,
            "wall_s": time.monotonic() - t_start,
            "rows": rows,
        },
    )
    print(json.dumps(summary, indent=1))
    print(f"written {path}")


if __name__ == "__main__":
    main()
