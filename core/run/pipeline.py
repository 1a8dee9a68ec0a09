"""The run pipeline: one server configuration + one benchmark plan, start to finish.

preflight → launch → wait_ready → facts → probe → warmup → points → stop → verify → store

Each step's outcome (ok / failed / skipped, duration, detail) goes into
``status.json`` as it happens, so a run that dies at any moment still says how
far it got. The server is stopped in a ``finally`` whatever happened, and the
run is indexed into the catalog last (the folder stays the source of truth if
that fails).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from core.config import BenchmarkPlan, Point, RunSpec
from core.engines import get_adapter, get_engine, served_context_tokens
from core.engines.base import LaunchPlan
from core.engines.endpoint import mechanism_name
from core.errors import (
    ConfigError,
    EngineUnavailable,
    RunCancelled,
    ServeLabError,
    ServerExitedError,
    ServerLaunchError,
    StoreError,
)
from core.load.generator import LoadGenerator, LoadOptions
from core.load.kv_fill import KvSizing, PoolSource, size_kv_fill, smallest_pool, template_tokens
from core.load.openai import MODELS_PATH, served_models
from core.load.prompts import Tokenizer, load_tokenizer, make_prompts, prompts_digest
from core.load.workloads import build_workload, workload_digest
from core.metrics import compute_point_metrics, point_warnings, record_lengths
from core.records import RequestRecord, records_to_table
from core.run.gpu import gpu_memory, gpu_pids
from core.run.launcher import RUN_ID_ENV, ManagedServer, free_port, tail
from core.run.probe import run_probe
from core.run.samplers import Sampler
from core.run_folder import (
    STOP_GRACE_S,
    EndState,
    RunFolder,
    RunStatus,
    find_runs,
    kv_pool_tokens,
    run_result,
    stop_step,
    utc_now,
)
from core.safety import (
    api_key,
    redact_argv,
    redact_env,
    restore_secrets,
    scrub,
    secret_values,
    server_path_problems,
)
from core.settings import Settings
from core.store import Catalog

__all__ = ["ProgressFn", "execute_run", "install_signal_handlers"]

ProgressFn = Callable[[RunStatus], None]  # each status as written
MIN_FREE_DISK_MB = 200
# Warm-up is sized from the plan: as many requests as its largest concurrency (every batch
# size the points will use has then been run once: lazy allocation, per-shape graphs and
# kernels), each with the first point's prompt length but only a few output tokens. The
# decode path is warm after its first steps; more tokens only cost time (on a CPU engine,
# seconds per token) and measure nothing, since warm-up records are not metrics.
WARMUP_MAX_OUTPUT = 4


class _Failed(Exception):
    """Internal: ends the run with a final state and a reason in words."""

    def __init__(self, state: EndState, reason: str) -> None:
        super().__init__(reason)
        self.state: EndState = state
        self.reason = reason


@dataclass
class _Run:
    folder: RunFolder
    spec: RunSpec
    settings: Settings
    progress: ProgressFn | None
    stop_event: threading.Event
    steps: list[dict[str, Any]] = field(default_factory=list)
    server: ManagedServer | None = None
    last_status_write: float = 0.0
    status_error: str = ""  # the last status.json write that failed (disk full...)
    headers: dict[str, str] = field(default_factory=dict)  # sent with every request

    def should_stop(self) -> bool:
        return self.stop_event.is_set() or self.folder.cancel_requested

    def check_cancel(self) -> None:
        if self.should_stop():
            raise RunCancelled("cancelled on request")

    def report(self, force: bool = False, **changes: Any) -> None:
        now = time.monotonic()
        if not force and now - self.last_status_write < 0.5:
            return
        self.last_status_write = now
        try:
            status = self.folder.update_status(steps=self.steps, **changes)
        except StoreError as exc:
            # Progress is best effort: a full disk must never stop the run from stopping
            # its server. Results are written separately and fail loudly.
            self.status_error = str(exc)
            return
        if self.progress:
            self.progress(RunStatus.model_validate(status))

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[dict[str, Any]]:
        rec: dict[str, Any] = {"step": name, "outcome": "running", "started_at": utc_now()}
        self.steps.append(rec)
        self.report(force=True, phase=name, progress=None)
        t = time.monotonic()
        try:
            yield rec
        except BaseException as exc:
            rec["outcome"] = "failed"
            rec.setdefault("detail", str(exc)[:500] or type(exc).__name__)
            raise
        else:
            if rec["outcome"] == "running":
                rec["outcome"] = "ok"
        finally:
            rec["duration_s"] = round(time.monotonic() - t, 3)
            self.report(force=True)


def _preflight(run: _Run) -> tuple[LaunchPlan, Any, dict[str, Any]]:
    server_cfg = run.spec.server
    adapter = get_adapter(server_cfg.engine, run.settings, server_cfg.engine_install)
    info = adapter.detect()
    if not info.installed:
        which = f" (installation {server_cfg.engine_install})" if server_cfg.engine_install else ""
        raise EngineUnavailable(f"{server_cfg.engine}{which} is not available here: {info.reason}")
    for fld, problem in server_path_problems(
        server_cfg, run.settings.allowed_model_roots, must_exist=True
    ).items():
        raise ConfigError(fld, problem)
    free_mb = shutil.disk_usage(run.folder.path).free / 2**20
    if free_mb < MIN_FREE_DISK_MB:
        raise StoreError(
            f"only {free_mb:.0f} MB free where runs are stored; free at least {MIN_FREE_DISK_MB} MB"
        )
    if not get_engine(server_cfg.engine).launched:  # an endpoint: nothing listens here
        port = 0
    elif server_cfg.port is not None:
        port = server_cfg.port
        import socket

        with socket.socket() as s:
            try:
                s.bind((server_cfg.host, port))
            except OSError as exc:
                raise ConfigError(
                    "server.port",
                    f"port {port} is already in use on "
                    f"{server_cfg.host}; choose another or leave it empty",
                ) from exc
    else:
        port = free_port(server_cfg.host)
    plan = adapter.plan_launch(server_cfg, port, info)
    if plan.argv is not None and (key := api_key(plan.argv)) is not None:
        run.headers["Authorization"] = f"Bearer {key}"
    launch = {
        "argv": None if plan.argv is None else redact_argv(plan.argv),
        "command": None
        if plan.argv is None
        else ManagedServer(plan.argv, run.folder.log_path, "").command,
        "base_url": plan.base_url,
        "health_path": plan.health_path,
        "engine": server_cfg.engine,
        "engine_version": info.version,
        # which installation ran it (None: the default one) and the version it detected
        "engine_install": server_cfg.engine_install,
        "notes": [*info.notes, *plan.notes],
        "env": redact_env(plan.env),
        "exact_length_body": plan.exact_length_body if run.spec.plan.ignore_eos else {},
    }
    # Which request fields ask for exact output lengths, by name (the endpoint engine
    # replaces this with what the server itself accepted, before the warm-up).
    launch["exact_length"] = {
        "mechanism": mechanism_name(plan.exact_length_body if run.spec.plan.ignore_eos else {}),
        "why": "plan.ignore_eos is off"
        if not run.spec.plan.ignore_eos
        else f"what {server_cfg.engine} takes",
    }
    run.folder.write("launch.json", launch)
    return plan, adapter, launch


def _wait_endpoint(base_url: str, path: str, timeout_s: float, run: _Run) -> float:
    t = time.monotonic()
    while True:
        run.check_cancel()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base_url + path, timeout=5.0).status_code == 200:
                return time.monotonic() - t
        if time.monotonic() - t > timeout_s:
            raise ServerLaunchError(
                f"endpoint {base_url} did not answer {path} within {timeout_s:.0f} s"
            )
        time.sleep(0.5)


def _model_name(plan: LaunchPlan, headers: dict[str, str]) -> str:
    if plan.model_name:
        return plan.model_name
    with httpx.Client(timeout=10.0, headers=headers) as client:
        ids, answer = served_models(client, plan.base_url)
    if not ids:
        raise ServerLaunchError(f"the server lists no model at {MODELS_PATH} ({answer})")
    return ids[0]


def _run_point(
    run: _Run,
    gen: LoadGenerator,
    plan: LaunchPlan,
    model: str,
    tok: Tokenizer,
    index: int,
    point: Point,
    bench: BenchmarkPlan,
    exact_body: dict[str, Any],
    sampler: Sampler,
    context_tokens: int | None = None,
    sizing: KvSizing | None = None,
) -> list[RequestRecord]:
    if bench.flush_cache and plan.supports_flush_cache:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(plan.base_url + "/flush_cache", timeout=60.0, headers=run.headers)
    # Seeded per point, not per run: every arm of a comparison gets the same prompts (a
    # point sized by time sends a prefix of the same sequence).
    low, high = bench.point_requests(point)
    budget = gen.budget(
        low, high, point.concurrency, point.request_rate, point.output_len, bench.min_steady_s
    )
    built = build_workload(tok, point, budget, bench.seed * 1000 + index, context_tokens)
    prompts = built.prompts
    # A trace, a shared-prefix set and sessions are the workload's own requests: all of them
    # go (the steady-state sizing is for the length kinds, whose prompts are a sequence).
    own_count = point.workload.kind in ("trace", "shared_prefix", "multi_turn")
    opts = LoadOptions(
        base_url=plan.base_url,
        model=model,
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        seed=bench.seed + index,
        exact_length_body=exact_body,
        request_timeout_s=bench.request_timeout_s,
        point_timeout_s=bench.point_timeout_s,
        should_stop=run.should_stop,
        min_requests=None if own_count else low,
        min_steady_s=None if own_count else bench.min_steady_s,
        workers=gen.workers_for(bench.client_workers, point.concurrency, len(prompts)),
        arrivals_s=None if built.arrivals_s is None else tuple(built.arrivals_s),
        sessions=None if built.sessions is None else tuple(tuple(s) for s in built.sessions),
        think_time_s=built.think_time_s,
    )
    sampler.point = index

    def on_done(done: int, total: int) -> None:
        run.report(
            progress={
                "point": index,
                "points_total": len(bench.points),
                "requests_done": done,
                "requests_total": total,
            }
        )

    started_at = utc_now()
    # where this point starts on the samples' clock, so the server's series and this
    # point's records line up (core.analysis.timelines)
    started_run_s = round(time.perf_counter() - sampler.t0, 4)
    records, health = gen.run(opts, prompts, on_done)
    _retokenize(tok, records)
    # The slots a steady state fills: the cap, or every request sent at once (none for
    # arrivals spread in time: Poisson or a trace's timestamps).
    at_once = math.isinf(point.request_rate) and built.arrivals_s is None
    target = point.concurrency or (len(records) if at_once else None)
    metrics = compute_point_metrics(records, "server", target)
    metrics_retok = compute_point_metrics(records, "retokenized", target)
    server_counts = any(r.output_tokens_server is not None for r in records)
    warnings = point_warnings(metrics, point.concurrency, bench.min_steady_s)
    if sizing is not None:
        warnings = [*warnings, *sizing.warnings()]
    run.folder.write_table(f"points/{index:03d}/records.parquet", records_to_table(records))
    run.folder.write(
        f"points/{index:03d}/summary.json",
        {
            "index": index,
            # the context check's drops and clips go where the point is named
            "label": point.label + (f" ({note})" if (note := built.over_context_note) else ""),
            "point": point.model_dump(mode="json"),
            "started_at": started_at,
            "started_run_s": started_run_s,
            # multi_turn: the user turns (the same in every arm; the answers are the arm's)
            "prompts_digest": prompts_digest(
                prompts if built.sessions is not None else prompts[: len(records)]
            ),
            # the workload's own fields, digested: arms that differ here were not sent
            # the same load (core/analysis/points.py different_prompts)
            "workload": {**built.summary(), "digest": workload_digest(point.workload)},
            # per-request input/output tokens as sent: what a point of varied lengths measured
            "lengths": record_lengths(records),
            # what kv_fill asked for and what it was sized to (None: no kv_fill)
            "kv_fill": None if sizing is None else sizing.as_dict(),
            "requests_planned": {"at_least": low, "at_most": high, "prepared": budget},
            "token_source": "server" if server_counts else "requested (server sent no usage)",
            "metrics": metrics,
            "metrics_retokenized": metrics_retok,
            "client": health.as_dict(),
            "warnings": warnings,
            # cut short by a cancel: what finished is kept, the cut requests are no errors
            "cancelled": bool(metrics["cancelled_requests"]),
        },
    )
    if run.should_stop():
        raise RunCancelled(f"cancelled during point {index}")
    if run.server is not None and run.server.proc is not None:
        code = run.server.poll()
        if code is None and not all(r.ok for r in records):
            # Streams cut by a dying server can end a moment before its exit is visible.
            with contextlib.suppress(subprocess.TimeoutExpired):
                code = run.server.proc.wait(timeout=0.5)
        if code is not None:
            failed = sum(not r.ok for r in records)
            raise ServerExitedError(
                code,
                tail(run.folder.log_path),
                f"server exited during point {index} ({failed} of {len(records)} requests failed)",
            )
    return records


def _sizing_pool(run: _Run, own: int | None) -> PoolSource:
    """The pool kv_fill points are sized from: plan.kv_pool (a number, or the smallest pool
    the servers of its runs reported: one per arm, found when the experiment was queued),
    else this server's own."""
    given = run.spec.plan.kv_pool
    if given is None:
        if own is None:
            raise ConfigError(
                "plan.points.kv_fill",
                f"kv_fill needs the server's KV pool and {run.spec.server.engine} reported "
                "none after start-up; leave kv_fill out or give plan.kv_pool.tokens",
            )
        return PoolSource(own)
    if given.tokens is not None:
        return PoolSource(given.tokens, given=True)
    found, unknown = find_runs(run.settings.runs_dir, given.runs)
    if unknown:
        raise ConfigError(
            "plan.kv_pool.runs", f"no run {unknown[0]!r} here to take the KV pool from"
        )
    arms = dict(zip(given.runs, given.arms or ("",) * len(given.runs), strict=True))
    pools = []
    for folder in found:
        facts = folder.read("facts.json") if (folder.path / "facts.json").is_file() else {}
        tokens = kv_pool_tokens(facts)
        if tokens is None:
            raise ConfigError(
                "plan.kv_pool.runs",
                f"run {folder.run_id} has not reported a KV pool (not started yet, or it "
                "failed before start-up): run it first, or give plan.kv_pool.tokens",
            )
        pools.append(PoolSource(tokens, folder.run_id, arms.get(folder.run_id) or None))
    return smallest_pool(pools)


def _size_plan(
    bench: BenchmarkPlan, pool: PoolSource, template: int | None, own: int | None
) -> tuple[BenchmarkPlan, dict[int, KvSizing]]:
    """The plan with its kv_fill points sized (the others as given)."""
    sizings = {
        i: size_kv_fill(p, pool, template, own)
        for i, p in enumerate(bench.points)
        if p.kv_fill is not None
    }
    points = tuple(sizings[i].sized if i in sizings else p for i, p in enumerate(bench.points))
    return bench.model_copy(update={"points": points}), sizings


def _retokenize(tok: Tokenizer, records: list[RequestRecord]) -> None:
    for r in records:
        if r.ok:
            r.output_tokens_retokenized = len(tok.encode(r.generated_text))


# A server that has exited can still be listed by NVML for a moment while the driver tears its
# context down (seen on the H200: SGLang exited on SIGTERM in 0.2 s and its pid was still
# listed at the check, failing a run whose every point had succeeded). A pid that is still
# listed after this long really holds the GPU.
GPU_RELEASE_WAIT_S = 10.0


def gpu_still_held(
    server_pids: set[int],
    list_gpu_pids: Callable[[], dict[int, list[int]]] = gpu_pids,
    wait_s: float = GPU_RELEASE_WAIT_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[int, list[int]]:
    """GPU index → the server pids still listed on it, after up to ``wait_s`` for the driver
    to release GPUs of processes that have exited; {} when none holds one."""
    deadline = clock() + wait_s
    while True:
        held = {
            gpu: sorted(server_pids & set(pids))
            for gpu, pids in list_gpu_pids().items()
            if server_pids & set(pids)
        }
        if not held or clock() >= deadline:
            return held
        sleep(0.5)


def _verify_gone(run: _Run, survivors: list[int], gpu_before: dict[int, list[int]]) -> str:
    problems = []
    if survivors:
        problems.append(f"processes still alive after stop: {survivors}")
    if gpu_before or gpu_pids():
        server_pids = set(run.server._pids) if run.server else set()
        for gpu, held in gpu_still_held(server_pids).items():
            problems.append(f"GPU {gpu} still held by server pids {held}")
    return "; ".join(problems)


def execute_run(
    folder: RunFolder,
    settings: Settings,
    progress: ProgressFn | None = None,
    stop_event: threading.Event | None = None,
) -> RunStatus:
    """Run the pipeline for an already-prepared folder; return the final status."""
    spec = RunSpec.model_validate(
        {k: v for k, v in folder.read("spec.json").items() if k not in ("run_id", "created_at")}
    )
    hidden = folder.read_secrets().get("extra_args") or {}
    if hidden:  # the API keys RunFolder.prepare kept out of spec.json
        spec = spec.model_copy(
            update={
                "server": spec.server.model_copy(
                    update={"extra_args": restore_secrets(spec.server.extra_args, hidden)}
                )
            }
        )
    run = _Run(folder, spec, settings, progress, stop_event or threading.Event())
    t_start = time.monotonic()
    if run.should_stop():
        # Cancelled between queueing and starting: launch nothing.
        return folder.end("cancelled", folder.read_status().reason or "cancelled before it started")
    run.report(
        force=True,
        state="running",
        pid=os.getpid(),
        started_at=folder.read_status().started_at or utc_now(),
    )
    final_state: EndState = "succeeded"
    reason = ""
    gpu_before = gpu_pids()
    sampler: Sampler | None = None
    gen: LoadGenerator | None = None
    try:
        with run.step("preflight"):
            plan, adapter, launch = _preflight(run)
        run.check_cancel()
        if plan.argv is not None:
            with run.step("launch"):
                run.server = ManagedServer(
                    plan.argv,
                    folder.log_path,
                    plan.base_url + plan.health_path,
                    {**plan.env, RUN_ID_ENV: folder.run_id},
                )
                run.server.start()
                run.report(force=True, server_pid=run.server.pid)
            with run.step("wait_ready") as rec:
                ready_s = run.server.wait_ready(
                    spec.server.startup_timeout_s,
                    run.should_stop,
                    failure_in_log=adapter.failure_in_log,
                )
                rec["detail"] = f"ready after {ready_s:.1f} s"
        else:
            with run.step("wait_ready") as rec:
                ready_s = _wait_endpoint(
                    plan.base_url, plan.health_path, spec.server.startup_timeout_s, run
                )
                rec["detail"] = f"answered after {ready_s:.1f} s"
        with run.step("facts"):
            log_text = folder.log_path.read_text(errors="replace") if plan.argv else ""
            facts = adapter.collect_facts(plan.base_url, log_text)
            facts.setdefault("engine_version", launch["engine_version"])
            if facts.get("engine_version") is None:  # the engine did not say: detection did
                facts["engine_version"] = launch["engine_version"]
            facts["engine_install"] = launch["engine_install"]
            facts["ready_after_s"] = ready_s
            facts["gpus"] = gpu_memory()
            # An engine may echo its own secrets (/server_info's api_key): never store them.
            folder.write("facts.json", scrub(facts, secret_values(plan.argv or [], plan.env)))
            model = _model_name(plan, run.headers)
            tok = load_tokenizer(plan.tokenizer_path or spec.server.tokenizer or spec.server.model)
            context_tokens = served_context_tokens(spec.server, run.settings.models_dir)
        run.check_cancel()
        bench = spec.plan
        if bench.probe is not None:
            with run.step("probe") as rec:
                probe = run_probe(
                    plan.base_url,
                    model,
                    bench.probe,
                    timeout_s=bench.request_timeout_s,
                    headers=run.headers,
                    should_stop=run.should_stop,
                )
                folder.write("probe.json", probe.as_dict())
                rec["detail"] = f"{probe.answer[:80]!r}: {probe.reason}"
                if probe.verdict == "warning":  # degenerate, not broken: measured, flagged
                    rec["outcome"] = "warning"
                if not probe.passed:
                    raise _Failed("invalid", f"sanity probe failed: {probe.reason}")
        else:
            run.steps.append({"step": "probe", "outcome": "skipped", "detail": "no probe in plan"})
        run.check_cancel()
        exact_body: dict[str, Any] = launch["exact_length_body"]
        if bench.ignore_eos and adapter.asks_exact_length:  # the endpoint engine
            with run.step("exact_length") as rec:
                chosen = adapter.choose_exact_length(
                    plan.base_url, model, run.headers, bench.request_timeout_s
                )
                if chosen is None:
                    rec["detail"] = "the launch plan's own fields"
                else:
                    mechanism, exact_body, why = chosen
                    rec["detail"] = f"{mechanism}: {why}"
                    launch.update(
                        exact_length_body=exact_body,
                        exact_length={"mechanism": mechanism, "why": why},
                    )
                    folder.write("launch.json", launch)
        sizings: dict[int, KvSizing] = {}
        asked = bench
        if any(p.kv_fill is not None for p in bench.points):
            # Sized twice: here, so the warm-up runs at the sized concurrency, and after the
            # warm-up with the chat template's tokens it measured (fewer requests, not more).
            with run.step("kv_fill") as rec:
                own_pool = kv_pool_tokens(facts)
                pool = _sizing_pool(run, own_pool)
                bench, sizings = _size_plan(asked, pool, None, own_pool)
                rec["detail"] = f"pool {pool.tokens} tokens ({pool.whose}); preliminary"
        gen = LoadGenerator(
            plan.base_url,
            # enough connections for every request a point may have in flight (an open-loop
            # trace: all of its window)
            max(p.concurrency or p.num_prompts for p in bench.points),
            bench.request_timeout_s,
            headers=run.headers,
            event_loop=run.settings.event_loop,
            json_parser=run.settings.json_parser,
        )
        with run.step("warmup") as rec:
            n_warm = bench.effective_warmup
            first = bench.points[0]
            warm = (
                make_prompts(
                    tok,
                    n_warm,
                    first.input_len,
                    min(first.output_len, WARMUP_MAX_OUTPUT),
                    seed=bench.seed * 1000 + 999,
                )
                if n_warm
                else []
            )
            if warm:
                wopts = LoadOptions(
                    base_url=plan.base_url,
                    model=model,
                    concurrency=max(p.warmup_slots for p in bench.points),
                    request_rate=float("inf"),
                    seed=bench.seed,
                    exact_length_body=exact_body,
                    request_timeout_s=bench.request_timeout_s,
                    point_timeout_s=bench.point_timeout_s,
                    should_stop=run.should_stop,
                )
                wrecs, _ = gen.run(wopts, warm)
                folder.write_table("warmup.parquet", records_to_table(wrecs))
                run.check_cancel()  # cancelled requests are not a failed warm-up
                bad = [r.error for r in wrecs if not r.ok]
                rec["detail"] = (
                    f"{n_warm} requests of {min(first.output_len, WARMUP_MAX_OUTPUT)}"
                    f" output tokens, {len(bad)} failed"
                )
                if len(bad) == len(wrecs):
                    raise _Failed("failed", f"every warm-up request failed: {bad[0]}")
            else:
                rec["outcome"] = "skipped"
        if sizings:
            with run.step("kv_fill") as rec:
                template = template_tokens(wrecs) if warm else None
                bench, sizings = _size_plan(asked, pool, template, own_pool)
                rec["detail"] = f"pool {pool.tokens} tokens ({pool.whose}); " + "; ".join(
                    f"point {i}: c={z.sized.concurrency} in={z.sized.input_len} "
                    f"out={z.sized.output_len} ({z.tokens_per_request:.0f} tokens each, "
                    f"template {'excluded' if z.template is None else z.template})"
                    for i, z in sizings.items()
                )
        metrics_url = plan.base_url + "/metrics" if plan.argv or spec.server.engine else None
        sampler = Sampler(metrics_url, bench.metrics_interval_s, time.perf_counter()).start()
        for i, point in enumerate(bench.points):
            run.check_cancel()
            with run.step(f"point {i}") as rec:
                records = _run_point(
                    run,
                    gen,
                    plan,
                    model,
                    tok,
                    i,
                    point,
                    bench,
                    exact_body,
                    sampler,
                    context_tokens,
                    sizings.get(i),
                )
                summary = folder.read(f"points/{i:03d}/summary.json")
                m = summary["metrics"]
                rec["detail"] = (
                    f"{point.label}: {m['completed']}/{m['num_requests']} ok, "
                    f"{(m['output_throughput'] or 0):.1f} out tok/s"
                    + "".join(f"; WARNING: {w}" for w in summary["warnings"])
                )
                if not m["completed"]:
                    # Kept (records and summary), but a point with nothing completed
                    # measured nothing: the run did not succeed.
                    err = next((r.error for r in records if r.error), "no completion")
                    raise _Failed(
                        "failed",
                        f"point {i}: none of its {len(records)} requests "
                        f"succeeded (first error: {err})",
                    )
    except _Failed as exc:
        final_state, reason = exc.state, exc.reason
    except RunCancelled as exc:
        final_state, reason = "cancelled", str(exc)
    except ServerExitedError as exc:
        final_state, reason = "failed", str(exc)
    except ServeLabError as exc:
        final_state, reason = "failed", f"{type(exc).__name__}: {exc}"
    except InterruptedError:
        final_state, reason = "cancelled", "cancelled while waiting for the server"
    except Exception as exc:  # a bug: still stop the server and record it
        final_state, reason = "failed", f"internal error: {type(exc).__name__}: {exc}"
    finally:
        if gen is not None:
            gen.close()
        if sampler is not None:
            sampler.stop()
            with contextlib.suppress(StoreError):
                folder.write_table("samples.parquet", sampler.table())
                if sampler.metrics_error:
                    run.steps.append(
                        {
                            "step": "metrics",
                            "outcome": "skipped",
                            "detail": f"no /metrics: {sampler.metrics_error}",
                        }
                    )
        if run.server is not None:
            with run.step("stop") as rec:
                t_stop = time.monotonic()
                survivors = run.server.stop(STOP_GRACE_S)
                rec["outcome"], rec["detail"] = stop_step(
                    run.server.poll(), run.server.killed_after_term, time.monotonic() - t_stop
                )
            with run.step("verify") as rec:
                problem = _verify_gone(run, survivors, gpu_before)
                rec["detail"] = problem or "no server process left; GPU memory released"
                if problem:
                    rec["outcome"] = "failed"
                    if final_state == "succeeded":
                        final_state, reason = "failed", problem
    with contextlib.suppress(StoreError):
        folder.write("result.json", run_result(folder))
    duration_s = round(time.monotonic() - t_start, 3)
    try:
        status = folder.end(final_state, reason, steps=run.steps, duration_s=duration_s)
    except StoreError as exc:
        # The folder cannot take the final state (disk full, read-only): say so, and leave
        # the folder "running" for recover_runs to close once it can be written again.
        status = RunStatus.model_validate(
            {
                "run_id": folder.run_id,
                "state": final_state,
                "reason": reason,
                "phase": "done",
                "finished_at": utc_now(),
                "duration_s": duration_s,
                "progress": None,
                "steps": run.steps,
                "unrecorded": f"the final state could not be written: {exc}",
            }
        )
        if progress:
            progress(status)
        return status
    with run.step("store") as rec:
        try:
            Catalog(settings.catalog_path, settings.runs_dir).index_run(folder)
            rec["detail"] = "indexed in the catalog"
        except StoreError as exc:
            rec["outcome"] = "failed"
            rec["detail"] = f"not indexed ({exc}); `python -m core reindex` will pick it up"
    with contextlib.suppress(StoreError):
        status = RunStatus.model_validate(folder.update_status(steps=run.steps))
    if progress:
        progress(status)
    return status


def install_signal_handlers(stop_event: threading.Event) -> None:
    """SIGTERM/SIGINT ask the run to stop cleanly (server stopped, state recorded)."""

    def handler(signum: int, _frame: object) -> None:
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
