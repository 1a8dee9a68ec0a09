"""The run pipeline: one server configuration + one benchmark plan, start to finish.

preflight → launch → wait_ready → facts → probe → answers → exact_length → kv_fill → warmup
→ kv_fill → points → metrics → stop → verify → store: core.run_folder.RUN_STEPS, one function each
here (STEP_FUNCTIONS), run in that order by ``execute_run``.

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
from typing import Any, TypeVar

import httpx

from core.config import BenchmarkPlan, Point, RunSpec, ServerConfig
from core.engines import get_adapter, get_engine, served_context_tokens, shape_server
from core.engines.base import EngineAdapter, EngineInfo, LaunchPlan
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
from core.load.health import ClientHealth
from core.load.kv_fill import KvSizing, PoolSource, size_kv_fill, smallest_pool, template_tokens
from core.load.openai import MODELS_PATH, served_models
from core.load.prompts import Tokenizer, load_tokenizer, make_prompts, prompts_digest
from core.load.workloads import BuiltWorkload, build_workload, workload_digest
from core.metrics import compute_point_metrics, point_warnings, record_lengths
from core.records import RequestRecord, records_to_table
from core.run.answers_step import (
    ANSWERS_FILE,
    AnswersTarget,
    answers_enabled,
    answers_step_words,
    collect_answers,
    find_reference,
    weights_kind,
)
from core.run.gpu import gpu_memory, gpu_pids
from core.run.launcher import RUN_ID_ENV, ManagedServer, free_port, tail
from core.run.machine import cpu_model
from core.run.probe import run_probe
from core.run.samplers import Sampler
from core.run_folder import (
    CLEANUP_STEPS,
    INDEX_STEPS,
    MEASURE_STEPS,
    STOP_GRACE_S,
    EndState,
    RunFolder,
    RunStatus,
    find_runs,
    kv_pool_tokens,
    point_step,
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
    """One run under way: how it records its steps, and what each step hands the next."""

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
    t_start: float = field(default_factory=time.monotonic)
    final_state: EndState = "succeeded"
    reason: str = ""
    # What the steps find, in the order they find it (core.run_folder.RUN_STEPS).
    gpu_before: dict[int, list[int]] = field(default_factory=dict)
    plan: LaunchPlan | None = None  # preflight
    adapter: EngineAdapter | None = None
    launch: dict[str, Any] = field(default_factory=dict)  # launch.json
    exact_body: dict[str, Any] = field(default_factory=dict)  # preflight, exact_length
    ready_s: float = 0.0  # wait_ready
    facts: dict[str, Any] = field(default_factory=dict)  # facts
    model: str = ""
    tok: Tokenizer | None = None
    context_tokens: int | None = None
    bench: BenchmarkPlan = field(init=False)  # the plan, its kv_fill points sized (kv_fill)
    sizings: dict[int, KvSizing] = field(default_factory=dict)
    pool: PoolSource | None = None
    own_pool: int | None = None
    gen: LoadGenerator | None = None  # warmup
    warm_records: list[RequestRecord] | None = None
    sampler: Sampler | None = None  # points
    survivors: list[int] = field(default_factory=list)  # stop

    def __post_init__(self) -> None:
        self.bench = self.spec.plan

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


T = TypeVar("T")


def _need(value: T | None) -> T:
    """What an earlier step set (a step that runs out of order is a bug)."""
    if value is None:
        raise RuntimeError("a step ran before the step that sets what it needs")
    return value


# --- the measuring steps: each a function of the run and the step's name ------------------


def _preflight(run: _Run, name: str) -> None:
    with run.step(name):
        run.plan, run.adapter, run.launch = _plan_launch(run)
        run.exact_body = run.launch["exact_length_body"]
    run.check_cancel()


def _plan_launch(run: _Run) -> tuple[LaunchPlan, EngineAdapter, dict[str, Any]]:
    """The engine checked, a port, the launch plan; launch.json written."""
    server_cfg = run.spec.server
    adapter = get_adapter(server_cfg.engine, run.settings, server_cfg.engine_install)
    info = _checked_engine(run, adapter)
    # an engine ServeLab does not launch (an endpoint) listens elsewhere: 0, no port of ours
    port = _port(server_cfg) if get_engine(server_cfg.engine).launched else 0
    # a shape: its model folder built now (config.json + tokenizer, no weights)
    plan = adapter.plan_launch(shape_server(server_cfg, run.settings.models_dir), port, info)
    if plan.argv is not None and (key := api_key(plan.argv)) is not None:
        run.headers["Authorization"] = f"Bearer {key}"
    launch = _launch_record(run, plan, info)
    run.folder.write("launch.json", launch)
    return plan, adapter, launch


def _checked_engine(run: _Run, adapter: EngineAdapter) -> EngineInfo:
    """The installed engine, once the model paths and the disk are checked."""
    server_cfg = run.spec.server
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
    return info


def _port(server_cfg: ServerConfig) -> int:
    """The port the server is given: ``server.port`` if it is free, else a free one."""
    if server_cfg.port is None:
        return free_port(server_cfg.host)
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
    return port


def _launch_record(run: _Run, plan: LaunchPlan, info: EngineInfo) -> dict[str, Any]:
    """launch.json: what is started, how, and which request fields ask for exact lengths."""
    server_cfg, ignore_eos = run.spec.server, run.spec.plan.ignore_eos
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
        # a shape run: dummy weights, and whether its MoE routing was simulated uniformly
        "shape": server_cfg.shape,
        "uniform_experts": get_engine(server_cfg.engine).uniform_experts_env in plan.env,
        "notes": [*info.notes, *plan.notes],
        "env": redact_env(plan.env),
        "exact_length_body": plan.exact_length_body if ignore_eos else {},
    }
    # Which request fields ask for exact output lengths, by name (the endpoint engine
    # replaces this with what the server itself accepted, before the warm-up).
    launch["exact_length"] = {
        "mechanism": mechanism_name(plan.exact_length_body if ignore_eos else {}),
        "why": "plan.ignore_eos is off" if not ignore_eos else f"what {server_cfg.engine} takes",
    }
    return launch


def _launch(run: _Run, name: str) -> None:
    plan = _need(run.plan)
    if plan.argv is None:  # an endpoint: nothing of ours to start
        return
    with run.step(name):
        run.server = ManagedServer(
            plan.argv,
            run.folder.log_path,
            plan.base_url + plan.health_path,
            {**plan.env, RUN_ID_ENV: run.folder.run_id},
        )
        run.server.start()
        run.report(force=True, server_pid=run.server.pid)


def _wait_ready(run: _Run, name: str) -> None:
    plan, timeout_s = _need(run.plan), run.spec.server.startup_timeout_s
    with run.step(name) as rec:
        if run.server is not None:
            run.ready_s = run.server.wait_ready(
                timeout_s, run.should_stop, failure_in_log=_need(run.adapter).failure_in_log
            )
            rec["detail"] = f"ready after {run.ready_s:.1f} s"
        else:
            run.ready_s = _wait_endpoint(plan.base_url, plan.health_path, timeout_s, run)
            rec["detail"] = f"answered after {run.ready_s:.1f} s"


def _facts(run: _Run, name: str) -> None:
    plan, adapter, launch, spec = _need(run.plan), _need(run.adapter), run.launch, run.spec
    with run.step(name):
        log_text = run.folder.log_path.read_text(errors="replace") if plan.argv else ""
        facts = adapter.collect_facts(plan.base_url, log_text)
        facts.setdefault("engine_version", launch["engine_version"])
        if facts.get("engine_version") is None:  # the engine did not say: detection did
            facts["engine_version"] = launch["engine_version"]
        facts["engine_install"] = launch["engine_install"]
        facts["ready_after_s"] = run.ready_s
        facts["gpus"] = gpu_memory()
        facts["cpu_model"] = cpu_model()  # with the GPUs: the fingerprint of its noise
        # An engine may echo its own secrets (/server_info's api_key): never store them.
        run.folder.write("facts.json", scrub(facts, secret_values(plan.argv or [], plan.env)))
        run.facts = facts
        run.model = _model_name(plan, run.headers)
        run.tok = load_tokenizer(plan.tokenizer_path or spec.server.tokenizer or spec.server.model)
        run.context_tokens = served_context_tokens(spec.server, run.settings.models_dir)
    run.check_cancel()


def _probe(run: _Run, name: str) -> None:
    bench, plan = run.spec.plan, _need(run.plan)
    if bench.probe is None:
        run.steps.append({"step": name, "outcome": "skipped", "detail": "no probe in plan"})
        run.check_cancel()
        return
    with run.step(name) as rec:
        probe = run_probe(
            plan.base_url,
            run.model,
            bench.probe,
            timeout_s=bench.request_timeout_s,
            headers=run.headers,
            should_stop=run.should_stop,
        )
        run.folder.write("probe.json", probe.as_dict())
        rec["detail"] = f"{probe.answer[:80]!r}: {probe.reason}"
        if probe.verdict == "warning":  # degenerate, not broken: measured, flagged
            rec["outcome"] = "warning"
        if not probe.passed:
            raise _Failed("invalid", f"sanity probe failed: {probe.reason}")
    run.check_cancel()


def _answers(run: _Run, name: str) -> None:
    """The answers check (core/run/answers_step.py): off unless the plan or an experiment asks."""
    spec, server = run.spec.plan.answers, run.spec.server
    weights = weights_kind(server, run.settings.models_dir)
    if not answers_enabled(spec, run.spec.tags, weights):
        return
    with run.step(name) as rec:
        adapter, plan = _need(run.adapter), _need(run.plan)
        support = get_engine(server.engine).logprobs
        target = AnswersTarget(
            plan.base_url,
            run.model,
            adapter,
            support,
            _need(run.tok),
            run.headers,
            run.spec.plan.request_timeout_s,
            run.should_stop,
        )
        tags, own = run.spec.tags, run.folder.run_id
        reference = find_reference(run.folder.path.parent, tags, spec.baseline_tag, own)
        is_baseline = spec.baseline_tag is None or spec.baseline_tag in tags
        data = collect_answers(target, spec, weights, reference, is_baseline)
        run.folder.write(ANSWERS_FILE, data)
        rec["detail"], rec["outcome"] = answers_step_words(data)
    run.check_cancel()


def _exact_length(run: _Run, name: str) -> None:
    bench, adapter, plan = run.spec.plan, _need(run.adapter), _need(run.plan)
    if not (bench.ignore_eos and adapter.asks_exact_length):  # the endpoint engine asks
        return
    with run.step(name) as rec:
        chosen = adapter.choose_exact_length(
            plan.base_url, run.model, run.headers, bench.request_timeout_s
        )
        if chosen is None:
            rec["detail"] = "the launch plan's own fields"
        else:
            mechanism, run.exact_body, why = chosen
            rec["detail"] = f"{mechanism}: {why}"
            run.launch.update(
                exact_length_body=run.exact_body,
                exact_length={"mechanism": mechanism, "why": why},
            )
            run.folder.write("launch.json", run.launch)


def _kv_fill(run: _Run, name: str) -> None:
    """The kv_fill points sized: before the warm-up, so it runs at the sized concurrency,
    and again after it with the chat template's tokens it measured (fewer requests, not
    more)."""
    asked = run.spec.plan
    if not any(p.kv_fill is not None for p in asked.points):
        return
    with run.step(name) as rec:
        if run.pool is None:  # before the warm-up
            run.own_pool = kv_pool_tokens(run.facts)
            pool = run.pool = _sizing_pool(run, run.own_pool)
            run.bench, run.sizings = _size_plan(asked, pool, None, run.own_pool)
            rec["detail"] = f"pool {pool.tokens} tokens ({pool.whose}); preliminary"
            return
        pool = run.pool
        template = None if run.warm_records is None else template_tokens(run.warm_records)
        run.bench, run.sizings = _size_plan(asked, pool, template, run.own_pool)
        rec["detail"] = f"pool {pool.tokens} tokens ({pool.whose}); " + "; ".join(
            f"point {i}: c={z.sized.concurrency} in={z.sized.input_len} "
            f"out={z.sized.output_len} ({z.tokens_per_request:.0f} tokens each, "
            f"template {'excluded' if z.template is None else z.template})"
            for i, z in run.sizings.items()
        )


def _warmup(run: _Run, name: str) -> None:
    bench, plan = run.bench, _need(run.plan)
    gen = run.gen = LoadGenerator(
        plan.base_url,
        # enough connections for every request a point may have in flight (an open-loop
        # trace: all of its window)
        max(p.concurrency or p.num_prompts for p in bench.points),
        bench.request_timeout_s,
        headers=run.headers,
        event_loop=run.settings.event_loop,
        json_parser=run.settings.json_parser,
    )
    with run.step(name) as rec:
        n_warm, first = bench.effective_warmup, bench.points[0]
        out_len = min(first.output_len, WARMUP_MAX_OUTPUT)
        warm = (
            make_prompts(
                _need(run.tok), n_warm, first.input_len, out_len, seed=bench.seed * 1000 + 999
            )
            if n_warm
            else []
        )
        if not warm:
            rec["outcome"] = "skipped"
            return
        wopts = LoadOptions(
            base_url=plan.base_url,
            model=run.model,
            concurrency=max(p.warmup_slots for p in bench.points),
            request_rate=float("inf"),
            seed=bench.seed,
            exact_length_body=run.exact_body,
            request_timeout_s=bench.request_timeout_s,
            point_timeout_s=bench.point_timeout_s,
            should_stop=run.should_stop,
        )
        wrecs, _ = gen.run(wopts, warm)
        run.warm_records = wrecs
        run.folder.write_table("warmup.parquet", records_to_table(wrecs))
        run.check_cancel()  # cancelled requests are not a failed warm-up
        bad = [r.error for r in wrecs if not r.ok]
        rec["detail"] = f"{n_warm} requests of {out_len} output tokens, {len(bad)} failed"
        if len(bad) == len(wrecs):
            raise _Failed("failed", f"every warm-up request failed: {bad[0]}")


def _points(run: _Run, name: str) -> None:
    """One step per point (``point_step``; ``name`` stands for them all), /metrics and GPU
    memory sampled throughout."""
    plan, bench = _need(run.plan), run.bench
    metrics_url = plan.base_url + "/metrics" if plan.argv or run.spec.server.engine else None
    run.sampler = Sampler(metrics_url, bench.metrics_interval_s, time.perf_counter()).start()
    for i, point in enumerate(bench.points):
        run.check_cancel()
        with run.step(point_step(i)) as rec:
            records = _run_point(run, i, point)
            summary = run.folder.read(f"points/{i:03d}/summary.json")
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


# --- the clean-up steps, whatever happened, and the index step -----------------------------


def _metrics(run: _Run, name: str) -> None:
    """The load generator closed, the samples kept; a /metrics that could not be read is
    recorded as a skipped step."""
    if run.gen is not None:
        run.gen.close()
    if run.sampler is None:
        return
    run.sampler.stop()
    with contextlib.suppress(StoreError):
        run.folder.write_table("samples.parquet", run.sampler.table())
        if run.sampler.metrics_error:
            detail = f"no /metrics: {run.sampler.metrics_error}"
            run.steps.append({"step": name, "outcome": "skipped", "detail": detail})


def _stop(run: _Run, name: str) -> None:
    if run.server is None:
        return
    with run.step(name) as rec:
        t_stop = time.monotonic()
        run.survivors = run.server.stop(STOP_GRACE_S)
        rec["outcome"], rec["detail"] = stop_step(
            run.server.poll(), run.server.killed_after_term, time.monotonic() - t_stop
        )


def _verify(run: _Run, name: str) -> None:
    if run.server is None:
        return
    with run.step(name) as rec:
        problem = _verify_gone(run.server, run.survivors, run.gpu_before)
        rec["detail"] = problem or "no server process left; GPU memory released"
        if problem:
            rec["outcome"] = "failed"
            if run.final_state == "succeeded":
                run.final_state, run.reason = "failed", problem


def _store(run: _Run, name: str) -> None:
    with run.step(name) as rec:
        try:
            Catalog(run.settings.catalog_path, run.settings.runs_dir).index_run(run.folder)
            rec["detail"] = "indexed in the catalog"
        except StoreError as exc:
            rec["outcome"] = "failed"
            rec["detail"] = f"not indexed ({exc}); `python -m core reindex` will pick it up"


StepFn = Callable[[_Run, str], None]
# The function of each step name in core.run_folder.RUN_STEPS (the order is that list's).
STEP_FUNCTIONS: dict[str, StepFn] = {
    "preflight": _preflight,
    "launch": _launch,
    "wait_ready": _wait_ready,
    "facts": _facts,
    "probe": _probe,
    "answers": _answers,
    "exact_length": _exact_length,
    "kv_fill": _kv_fill,
    "warmup": _warmup,
    "points": _points,
    "metrics": _metrics,
    "stop": _stop,
    "verify": _verify,
    "store": _store,
}


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


def _run_point(run: _Run, index: int, point: Point) -> list[RequestRecord]:
    """One point: its workload built, sent, its records and summary written; raises when
    a cancel or the server's exit cut it short."""
    plan, bench, gen, tok = _need(run.plan), run.bench, _need(run.gen), _need(run.tok)
    sampler = _need(run.sampler)
    if bench.flush_cache and plan.supports_flush_cache:
        with contextlib.suppress(httpx.HTTPError):
            httpx.post(plan.base_url + "/flush_cache", timeout=60.0, headers=run.headers)
    # Seeded per point, not per run: every arm of a comparison gets the same prompts (a
    # point sized by time sends a prefix of the same sequence).
    low, high = bench.point_requests(point)
    budget = gen.budget(
        low, high, point.concurrency, point.request_rate, point.output_len, bench.min_steady_s
    )
    built = build_workload(tok, point, budget, bench.seed * 1000 + index, run.context_tokens)
    opts = _point_options(run, index, point, built, low)
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
    records, health = gen.run(opts, built.prompts, on_done)
    _retokenize(tok, records)
    started = {"started_at": started_at, "started_run_s": started_run_s}
    planned = {"at_least": low, "at_most": high, "prepared": budget}
    summary = _point_summary(run, index, point, built, records, health, started, planned)
    run.folder.write_table(f"points/{index:03d}/records.parquet", records_to_table(records))
    run.folder.write(f"points/{index:03d}/summary.json", summary)
    if run.should_stop():
        raise RunCancelled(f"cancelled during point {index}")
    _check_server_lived(run, index, records)
    return records


def _point_options(
    run: _Run, index: int, point: Point, built: BuiltWorkload, low: int
) -> LoadOptions:
    """How a point's requests are sent."""
    plan, bench, gen = _need(run.plan), run.bench, _need(run.gen)
    # A trace, a shared-prefix set and sessions are the workload's own requests: all of them
    # go (the steady-state sizing is for the length kinds, whose prompts are a sequence).
    own_count = point.workload.kind in ("trace", "shared_prefix", "multi_turn")
    return LoadOptions(
        base_url=plan.base_url,
        model=run.model,
        concurrency=point.concurrency,
        request_rate=point.request_rate,
        seed=bench.seed + index,
        exact_length_body=run.exact_body,
        request_timeout_s=bench.request_timeout_s,
        point_timeout_s=bench.point_timeout_s,
        should_stop=run.should_stop,
        min_requests=None if own_count else low,
        min_steady_s=None if own_count else bench.min_steady_s,
        workers=gen.workers_for(bench.client_workers, point.concurrency, len(built.prompts)),
        arrivals_s=None if built.arrivals_s is None else tuple(built.arrivals_s),
        sessions=None if built.sessions is None else tuple(tuple(s) for s in built.sessions),
        think_time_s=built.think_time_s,
    )


def _point_summary(
    run: _Run,
    index: int,
    point: Point,
    built: BuiltWorkload,
    records: list[RequestRecord],
    health: ClientHealth,
    started: dict[str, Any],
    planned: dict[str, int],
) -> dict[str, Any]:
    """A point's summary.json; ``started``: when it started (UTC, and on the samples'
    clock), ``planned``: the requests it was to send."""
    bench, sizing = run.bench, run.sizings.get(index)
    # The slots a steady state fills: the cap, or every request sent at once (none for
    # arrivals spread in time: Poisson or a trace's timestamps).
    at_once = math.isinf(point.request_rate) and built.arrivals_s is None
    target = point.concurrency or (len(records) if at_once else None)
    metrics = compute_point_metrics(records, "server", target)
    server_counts = any(r.output_tokens_server is not None for r in records)
    warnings = point_warnings(metrics, point.concurrency, bench.min_steady_s)
    if sizing is not None:
        warnings = [*warnings, *sizing.warnings()]
    prompts = built.prompts
    return {
        "index": index,
        # the context check's drops and clips go where the point is named
        "label": point.label + (f" ({note})" if (note := built.over_context_note) else ""),
        "point": point.model_dump(mode="json"),
        **started,
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
        "requests_planned": planned,
        "token_source": "server" if server_counts else "requested (server sent no usage)",
        "metrics": metrics,
        "metrics_retokenized": compute_point_metrics(records, "retokenized", target),
        "client": health.as_dict(),
        "warnings": warnings,
        # cut short by a cancel: what finished is kept, the cut requests are no errors
        "cancelled": bool(metrics["cancelled_requests"]),
    }


def _check_server_lived(run: _Run, index: int, records: list[RequestRecord]) -> None:
    """ServerExitedError when our server exited during point ``index``."""
    if run.server is None or run.server.proc is None:
        return
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


def _verify_gone(
    server: ManagedServer, survivors: list[int], gpu_before: dict[int, list[int]]
) -> str:
    problems = []
    if survivors:
        problems.append(f"processes still alive after stop: {survivors}")
    if gpu_before or gpu_pids():
        for gpu, held in gpu_still_held(set(server.pids)).items():
            problems.append(f"GPU {gpu} still held by server pids {held}")
    return "; ".join(problems)


def execute_run(
    folder: RunFolder,
    settings: Settings,
    progress: ProgressFn | None = None,
    stop_event: threading.Event | None = None,
) -> RunStatus:
    """Run the pipeline for an already-prepared folder; return the final status. The steps
    are core.run_folder's: MEASURE_STEPS until one ends the run, CLEANUP_STEPS whatever
    happened, INDEX_STEPS once the final state is recorded."""
    run = _Run(folder, _stored_spec(folder), settings, progress, stop_event or threading.Event())
    if run.should_stop():
        # Cancelled between queueing and starting: launch nothing.
        return folder.end("cancelled", folder.read_status().reason or "cancelled before it started")
    run.report(
        force=True,
        state="running",
        pid=os.getpid(),
        started_at=folder.read_status().started_at or utc_now(),
    )
    run.gpu_before = gpu_pids()
    try:
        for name in MEASURE_STEPS:
            STEP_FUNCTIONS[name](run, name)
    except Exception as exc:  # a bug too: still stop the server and record it
        run.final_state, run.reason = _ending(exc)
    finally:
        for name in CLEANUP_STEPS:
            STEP_FUNCTIONS[name](run, name)
    status, recorded = _end(run)
    if recorded:
        for name in INDEX_STEPS:
            STEP_FUNCTIONS[name](run, name)
        with contextlib.suppress(StoreError):
            status = RunStatus.model_validate(folder.update_status(steps=run.steps))
    if progress:
        progress(status)
    return status


def _stored_spec(folder: RunFolder) -> RunSpec:
    """spec.json as a RunSpec, with the API keys RunFolder.prepare kept out of it restored."""
    spec = RunSpec.model_validate(
        {k: v for k, v in folder.read("spec.json").items() if k not in ("run_id", "created_at")}
    )
    hidden = folder.read_secrets().get("extra_args") or {}
    if not hidden:
        return spec
    extra_args = restore_secrets(spec.server.extra_args, hidden)
    return spec.model_copy(
        update={"server": spec.server.model_copy(update={"extra_args": extra_args})}
    )


def _ending(exc: Exception) -> tuple[EndState, str]:
    """How a run that a step ended ends: its state, and the reason in words."""
    if isinstance(exc, _Failed):
        return exc.state, exc.reason
    if isinstance(exc, RunCancelled):
        return "cancelled", str(exc)
    if isinstance(exc, ServerExitedError):
        return "failed", str(exc)
    if isinstance(exc, ServeLabError):
        return "failed", f"{type(exc).__name__}: {exc}"
    if isinstance(exc, InterruptedError):
        return "cancelled", "cancelled while waiting for the server"
    return "failed", f"internal error: {type(exc).__name__}: {exc}"


def _end(run: _Run) -> tuple[RunStatus, bool]:
    """result.json and the final status.json written: (the status, whether it was)."""
    folder = run.folder
    with contextlib.suppress(StoreError):
        folder.write("result.json", run_result(folder))
    duration_s = round(time.monotonic() - run.t_start, 3)
    try:
        status = folder.end(run.final_state, run.reason, steps=run.steps, duration_s=duration_s)
    except StoreError as exc:
        # The folder cannot take the final state (disk full, read-only): say so, and leave
        # the folder "running" for recover_runs to close once it can be written again.
        unrecorded = {
            "run_id": folder.run_id,
            "state": run.final_state,
            "reason": run.reason,
            "phase": "done",
            "finished_at": utc_now(),
            "duration_s": duration_s,
            "progress": None,
            "steps": run.steps,
            "unrecorded": f"the final state could not be written: {exc}",
        }
        return RunStatus.model_validate(unrecorded), False
    return status, True


def install_signal_handlers(stop_event: threading.Event) -> None:
    """SIGTERM/SIGINT ask the run to stop cleanly (server stopped, state recorded)."""

    def handler(signum: int, _frame: object) -> None:
        stop_event.set()

    signal.signal(signal.SIGTERM, handler)
    signal.signal(signal.SIGINT, handler)
