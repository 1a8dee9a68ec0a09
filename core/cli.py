"""The command line: run, runs, show, cancel, parse-log, reindex, engines.

``python -m core run`` *is* the run process: the portal starts the same command
in its own session, so a run never shares a process with the UI.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import math
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from core.config import parse_request_rate, parse_whole_number
from core.errors import ConfigError, ServeLabError, StoreError
from core.executors.base import EXECUTORS
from core.executors.registry import runs_here
from core.interop.transfer import HANDLERS as TRANSFER_HANDLERS
from core.interop.transfer import add_parsers as add_transfer_parsers
from core.run_folder import is_run_id

if TYPE_CHECKING:  # imported where used: `python -m core` starts without them
    from core.config import RunSpec
    from core.launch.preflight import Problem
    from core.run_folder import RunStatus
    from core.settings import Settings
    from core.store import Catalog

__all__ = ["main"]


def _whole(text: str) -> int:
    """A whole-number flag, strictly (``parse_whole_number``: ``1e9`` is refused, never read
    as another value)."""
    try:
        return parse_whole_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _csv_ints(text: str) -> list[int]:
    try:
        return [parse_whole_number(x) for x in text.split(",") if x.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{exc}; give comma-separated integers") from None


def _trials(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return parse_whole_number(text, 3)
    except ValueError:
        raise argparse.ArgumentTypeError(f"give a number of trials or auto, not {text!r}") from None


def _rate(text: str) -> float:
    try:
        return parse_request_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _run_id(text: str) -> str:
    """A run id as the folders name them (``core.run_folder.is_run_id``); anything else
    (``../x``, ``/etc``, a non-ASCII letter) is refused."""
    if not is_run_id(text):
        raise argparse.ArgumentTypeError(
            f"{text[:60]!r} is not a run id; `python -m core runs` lists them"
        )
    return text


def _parser() -> argparse.ArgumentParser:

    p = argparse.ArgumentParser(prog="python -m core", description="ServeLab command line")
    sub = p.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_reading(sub)
    _add_experiment(sub)
    _add_tools(sub)
    return p


def _add_run(sub: Any) -> None:
    """``run``: a run spec from a plan file and the flags, executed here or on Ray."""
    r = sub.add_parser("run", help="launch a server, probe it, benchmark it, store everything")
    r.add_argument("--plan", type=Path, help="a JSON or YAML run spec (flags below override it)")
    r.add_argument(
        "--run-id", type=_run_id, help="execute an already-prepared run folder (used by the portal)"
    )
    _add_server_flags(r)
    _add_plan_flags(r)
    r.add_argument(
        "--executor",
        choices=EXECUTORS,
        help="where to run it: here (local) or on the Ray cluster at "
        "SERVELAB_RAY_ADDRESS (ray); default SERVELAB_EXECUTOR",
    )
    r.add_argument("--accelerator-type", help="ray: only on nodes with this accelerator (H200)")
    r.add_argument("--quiet", action="store_true", help="no progress line")
    r.add_argument("--json", action="store_true", help="print the final status as JSON")


def _add_server_flags(r: argparse.ArgumentParser) -> None:
    from core.engines.registry import engine_names

    s = r.add_argument_group("server")
    s.add_argument("--engine", choices=engine_names())
    s.add_argument(
        "--engine-install",
        metavar="NAME",
        help="a named installation of the engine (`python -m core installs` lists them)",
    )
    s.add_argument("--model")
    s.add_argument(
        "--shape",
        help="a model shape run with dummy weights (`python -m core shapes` lists them); "
        "speed only, answers meaningless",
    )
    s.add_argument(
        "--uniform-experts",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="MoE shape: simulate uniform expert routing (default: where the engine can)",
    )
    s.add_argument("--tokenizer")
    s.add_argument("--endpoint-url")
    s.add_argument("--port", type=_whole)
    s.add_argument("--device")
    s.add_argument("--dtype")
    s.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--cuda-graph-max-bs", type=_whole)
    s.add_argument("--continuous-batching", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--cb-max-memory-percent", type=float)
    s.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None)
    s.add_argument("--tp-size", type=_whole)
    s.add_argument("--mem-fraction-static", type=float)
    s.add_argument("--attention-backend")
    s.add_argument(
        "--extra-arg",
        action="append",
        dest="extra_args",
        help="one extra engine argv item (repeat for each)",
    )
    s.add_argument("--startup-timeout-s", type=float)


def _add_plan_flags(r: argparse.ArgumentParser) -> None:
    b = r.add_argument_group("benchmark plan (lists make one point per combination)")
    b.add_argument("--concurrency", type=_csv_ints, help="e.g. 1,4,16")
    b.add_argument("--request-rate", type=_rate, help="requests/s, or inf (default)")
    b.add_argument("--num-prompts", type=_whole)
    b.add_argument("--input-len", type=_csv_ints)
    b.add_argument("--output-len", type=_csv_ints)
    b.add_argument("--seed", type=_whole)
    b.add_argument("--warmup-requests", type=_whole)
    b.add_argument("--no-probe", action="store_true", help="skip the sanity probe")
    b.add_argument(
        "--exact-length",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="ask for exactly --output-len tokens per reply (default; the request "
        "field is the engine's, or what an endpoint accepts); "
        "--no-exact-length: replies end where the model stops",
    )
    b.add_argument("--probe-prompt")
    b.add_argument("--probe-expect", help="regex the answer must match; '' = non-empty only")
    b.add_argument("--request-timeout-s", type=float)
    b.add_argument("--point-timeout-s", type=float, help="whole-point limit in seconds")
    b.add_argument(
        "--min-waves",
        type=float,
        help="each point sends at least this many x its concurrency requests",
    )
    b.add_argument(
        "--min-steady-s",
        type=float,
        help="each point runs on until all its slots were busy this long (s)",
    )
    b.add_argument(
        "--max-point-requests",
        type=_whole,
        help="most requests a point sized by --min-steady-s may send",
    )
    b.add_argument(
        "--client-workers", help="load-generator processes per point: a number, or auto (default 1)"
    )
    _add_workload_flags(b)
    b.add_argument("--tag", action="append", dest="tags")


def _add_workload_flags(b: argparse._ArgumentGroup) -> None:
    # a point's workload: the Launch form's fields (core/launch/forms.py workload_fields)
    b.add_argument(
        "--workload",
        choices=["fixed", "uniform", "trace_lengths", "trace", "shared_prefix"],
        help="what every point's prompts are (docs/METRICS.md, Workloads)",
    )
    b.add_argument("--range-ratio", help="uniform: lowest length / length (0-1)")
    b.add_argument("--trace", help="trace/trace_lengths: a file of data/workloads/ or a path")
    b.add_argument("--arrivals", choices=["closed_loop", "timestamps"], help="trace arrivals")
    b.add_argument(
        "--over-context", choices=["error", "drop", "clip"], help="longer than the context"
    )
    b.add_argument("--groups", help="shared_prefix: prefix groups")
    b.add_argument("--prompts-per-group", help="shared_prefix: prompts per group")
    b.add_argument("--system-prompt-len", help="shared_prefix: shared prefix tokens")
    b.add_argument("--question-len", help="shared_prefix: tokens after the prefix")
    b.add_argument(
        "--kv-fill", help="in-flight tokens = this x the server's KV pool (sglang; 0 < F <= 10)"
    )
    b.add_argument(
        "--kv-fill-by",
        choices=["concurrency", "lengths"],
        help="what --kv-fill sizes (default concurrency)",
    )


def _add_reading(sub: Any) -> None:
    """``runs``, ``show``, ``cancel``, ``parse-log``: what is stored, and one cancel."""
    ls = sub.add_parser("runs", help="list stored runs")
    ls.add_argument("--engine")
    ls.add_argument("--state")
    ls.add_argument("--tag")
    ls.add_argument("--limit", type=_whole, default=50)
    ls.add_argument("--json", action="store_true")

    sh = sub.add_parser("show", help="one run in full")
    sh.add_argument("run_id", type=_run_id)
    sh.add_argument("--json", action="store_true")

    c = sub.add_parser("cancel", help="cancel a queued or running run")
    c.add_argument("run_id", type=_run_id)

    pl = sub.add_parser("parse-log", help="server facts from an SGLang start-up log, as JSON")
    pl.add_argument("file", type=Path)


def _add_experiment(sub: Any) -> None:
    ex = sub.add_parser(
        "experiment", help="run an experiment (arms x trials) from a plan file, or show one"
    )
    ex.add_argument(
        "plan",
        type=Path,
        nargs="?",
        help="JSON/YAML: name, base {server, plan}, arms [{label, changes}], trials",
    )
    ex.add_argument(
        "--trials",
        type=_trials,
        help="override the plan's number of trials: a number, or auto (min_trials to "
        "max_trials, until every headline contrast is decided)",
    )
    ex.add_argument("--show", metavar="EXPERIMENT_ID", help="print an experiment's verdict")
    ex.add_argument(
        "--json",
        action="store_true",
        help="with --show: the story as JSON (verdict, card, knob_checks, ledger per arm)",
    )
    ex.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs it would queue, the estimated duration and the smallest effect "
        "its trials can resolve on this host; queue nothing",
    )
    ex.add_argument(
        "--executor",
        choices=EXECUTORS,
        help="run the arms here (local) or on the Ray cluster (ray)",
    )
    ex.add_argument(
        "--no-wait",
        action="store_true",
        help="queue the runs and return (the portal's worker runs them)",
    )


def _add_tools(sub: Any) -> None:
    """``workload``, ``history``, ``reindex``, ``engines``, ``installs``, ``import`` /
    ``export``, ``explain``."""
    wl = sub.add_parser("workload", help="what a point's workload will send")
    wl_sub = wl.add_subparsers(dest="workload_command", required=True)
    pv = wl_sub.add_parser("preview", help="per request: arrival, input/output/shared tokens")
    pv.add_argument("source", metavar="SPEC_OR_TRACE", type=Path, help="spec.json or trace .jsonl")
    pv.add_argument("--limit", type=_whole, default=None, help="the first N requests")
    pv.add_argument("--point", type=_whole, default=0, help="which point of a spec (default 0)")
    pv.add_argument("--model", help="model folder (tokenizer, context length); default the spec's")
    pv.add_argument(
        "--over-context", choices=["error", "drop", "clip"], help="trace: over the context"
    )
    pv.add_argument("--json", action="store_true", help="JSON lines instead of a table")

    hi = sub.add_parser(
        "history",
        help="a configuration's runs over time and versions, its band and regression alert",
    )
    hi.add_argument(
        "target",
        metavar="RUN_OR_SERIES",
        help="a run id (its series, that run checked) or a series key (ser-..., newest checked)",
    )
    hi.add_argument("--json", action="store_true", help="the series, bands and checks as JSON")

    sub.add_parser("reindex", help="rebuild the catalog from the run folders")
    sub.add_parser("engines", help="which engines are installed here, and their versions")
    sub.add_parser(
        "installs", help="every engine installation (default and named): python, version"
    )
    sp = sub.add_parser("shapes", help="the model shapes a run can use with dummy weights")
    sp.add_argument(
        "--materialise",
        nargs=2,
        metavar=("SHAPE", "FOLDER"),
        help="write FOLDER: the shape's config.json and a tokenizer's files, no weights",
    )
    sp.add_argument("--tokenizer", type=Path, help="the tokenizer folder for --materialise")
    add_transfer_parsers(sub)  # import, export (core/interop/transfer.py)
    # explain RUN_A RUN_B: defined here, run by core/launch/explain.py, imported only when used:
    # it pulls in pandas and scipy (~1.5 s), which every run process would pay otherwise.
    xp = sub.add_parser(
        "explain",
        help="queue the factorial experiment that splits the "
        "difference between two runs into the knobs' effects",
    )
    xp.add_argument("run_a", metavar="RUN_A", help="the baseline run")
    xp.add_argument("run_b", metavar="RUN_B", help="the run whose difference is explained")
    xp.add_argument("--trials", type=_whole, default=3, help="trials per arm (default 3)")
    xp.add_argument("--design", choices=["factorial", "one-at-a-time"], default="factorial")


def _load_plan_file(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError("--plan", f"cannot read {path}: {exc.strerror}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise ConfigError(
            "--plan", f"{path} is not valid {path.suffix[1:] or 'JSON'}: {exc}"
        ) from exc
    if not isinstance(data, dict):
        raise ConfigError("--plan", f"{path} must hold a mapping with 'server' and 'plan'")
    return data


class FieldErrors(ConfigError):
    """Several bad fields at once: every one is reported, each with its flag and fix."""

    def __init__(self, problems: dict[str, str]) -> None:
        field, message = next(iter(problems.items()))
        super().__init__(field, message)
        self.problems = problems


def spec_from_args(args: argparse.Namespace, here: Settings | None = None) -> RunSpec:
    """Merge the plan file (if any) with the flags into a validated RunSpec; every
    problem is reported at once (FieldErrors). ``here`` (Settings): the run executes on
    this host, so its engine and model are checked too (``check_here``), in the same pass."""
    from core.config import RunSpec, ServerConfig
    from core.launch.forms import check_spec_data
    from core.settings import load_settings

    data: dict[str, Any] = _load_plan_file(args.plan) if args.plan else {}
    server = _server_from_args(args, data)
    plan = _plan_from_args(args, data)
    spec_data = {**data, "server": server, "plan": plan}
    if getattr(args, "executor", None) or getattr(args, "accelerator_type", None):
        placement = dict(data.get("placement") or {})
        if args.executor:
            placement["executor"] = args.executor
        if args.accelerator_type:
            placement["accelerator_type"] = args.accelerator_type
        spec_data["placement"] = placement
    if args.tags:
        spec_data["tags"] = args.tags
    settings = load_settings()
    spec, problems = check_spec_data(spec_data, settings.allowed_model_roots, must_exist=False)
    if here is not None:  # THE gate, as the queue and the portal ask it
        with contextlib.suppress(ValidationError):  # a bad server field is reported above
            target = spec or RunSpec(server=ServerConfig.model_validate(server))
            for p in _preflight_here(target, here):
                if spec is not None or p.field.startswith("server."):
                    problems.setdefault(p.field, p.text)
    if problems or spec is None:
        raise FieldErrors(problems)
    return spec


def _server_from_args(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """The plan file's server fields, each flag given over them."""
    server = dict(data.get("server") or {})
    for name in (
        "engine",
        "engine_install",
        "model",
        "shape",
        "uniform_experts",
        "tokenizer",
        "endpoint_url",
        "port",
        "device",
        "dtype",
        "cuda_graphs",
        "cuda_graph_max_bs",
        "continuous_batching",
        "cb_max_memory_percent",
        "compile",
        "tp_size",
        "mem_fraction_static",
        "attention_backend",
        "extra_args",
        "startup_timeout_s",
    ):
        value = getattr(args, name)
        if value is not None:
            server[name] = value
    return server


def _plan_from_args(args: argparse.Namespace, data: dict[str, Any]) -> dict[str, Any]:
    """The plan file's benchmark plan, the flags given over it: the points (one per
    combination of the listed loads), their workload, the plan's fields and its probe."""
    plan = dict(data.get("plan") or {})
    if any(
        v is not None
        for v in (
            args.concurrency,
            args.input_len,
            args.output_len,
            args.num_prompts,
            args.request_rate,
        )
    ):
        base = (plan.get("points") or [{}])[0]
        combos = itertools.product(
            args.concurrency or [base.get("concurrency", 1)],
            args.input_len or [base.get("input_len", 32)],
            args.output_len or [base.get("output_len", 32)],
        )
        plan["points"] = [
            {
                "concurrency": c,
                "input_len": i,
                "output_len": o,
                "num_prompts": args.num_prompts or base.get("num_prompts") or max(4, 2 * c),
                "request_rate": args.request_rate
                if args.request_rate is not None
                else base.get("request_rate", math.inf),
            }
            for c, i, o in combos
        ]
    _workload_from_args(args, plan)
    for name in (
        "seed",
        "warmup_requests",
        "request_timeout_s",
        "point_timeout_s",
        "min_waves",
        "min_steady_s",
        "max_point_requests",
        "client_workers",
    ):
        if getattr(args, name) is not None:
            plan[name] = getattr(args, name)
    if getattr(args, "exact_length", None) is not None:
        plan["ignore_eos"] = args.exact_length
    if args.no_probe:
        plan["probe"] = None
    elif args.probe_prompt is not None or args.probe_expect is not None:
        probe = dict(plan.get("probe") or {})
        if args.probe_prompt is not None:
            probe["prompt"] = args.probe_prompt
        if args.probe_expect is not None:
            probe["expect"] = args.probe_expect or None
        plan["probe"] = probe
    return plan


def _preflight_here(spec: RunSpec, settings: Settings) -> list[Problem]:
    """``preflight`` of one run against where it would go (this host, or the Ray cluster)."""
    from core.executors import executor_for
    from core.launch.host import host_for
    from core.launch.preflight import preflight

    executor = executor_for(spec, settings)
    where = host_for(settings, executor, [spec.server.engine], [spec.server.engine_install])
    return preflight(spec, where, settings)


_WORKLOAD_FLAGS = {
    "workload_kind": "workload",
    "range_ratio": "range_ratio",
    "trace": "trace",
    "arrivals": "arrivals",
    "over_context": "over_context",
    "groups": "groups",
    "prompts_per_group": "prompts_per_group",
    "system_prompt_len": "system_prompt_len",
    "question_len": "question_len",
    "kv_fill": "kv_fill",
    "kv_fill_by": "kv_fill_by",
}


def _workload_from_args(args: argparse.Namespace, plan: dict[str, Any]) -> None:
    """The workload flags into every point of ``plan``, read as the Launch form reads its
    fields (the same names and checks); a point keeps the plan file's workload unless
    --workload is given."""
    from core.config import BenchmarkPlan
    from core.launch.forms import workload_fields

    values = {
        key: getattr(args, flag, None)
        for key, flag in _WORKLOAD_FLAGS.items()
        if getattr(args, flag, None) is not None
    }
    if not values:
        return
    errors: dict[str, str] = {}
    extras = workload_fields(values, errors)
    if errors:
        raise FieldErrors({"--" + k.replace("_", "-"): v for k, v in errors.items()})
    if "workload_kind" not in values:
        extras.pop("workload")
    points = plan.get("points") or [p.model_dump(mode="json") for p in BenchmarkPlan().points]
    plan["points"] = [{**dict(p), **extras} for p in points]


def _progress_printer(quiet: bool) -> Callable[[RunStatus], None]:
    tty = sys.stderr.isatty()
    last: list[tuple[Any, Any]] = []

    def show(status: RunStatus) -> None:
        if quiet:
            return
        key = (status.state, status.phase)
        if not tty and last and last[-1] == key:
            return  # a log file gets one line per phase, not every progress tick
        last.append(key)
        phase = status.phase or ""
        prog = status.progress or {}
        line = f"[{status.run_id or ''}] {status.state or ''}: {phase}"
        if prog:
            line += (
                f"  point {prog['point'] + 1}/{prog['points_total']}"
                f"  requests {prog['requests_done']}/{prog['requests_total']}"
            )
        if tty:
            sys.stderr.write("\r\033[K" + line)
            if status.phase == "done":
                sys.stderr.write("\n")
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    return show


def _cmd_run(args: argparse.Namespace) -> int:
    from core.run.pipeline import execute_run, install_signal_handlers
    from core.run_folder import RunFolder
    from core.settings import load_settings
    from core.views.report import format_run

    stop = threading.Event()
    install_signal_handlers(stop)  # first, so an early cancel is still recorded cleanly
    settings = load_settings()
    if args.run_id:
        folder = RunFolder(settings.runs_dir / args.run_id)
        if not (folder.path / "spec.json").is_file():
            raise ConfigError("--run-id", f"no prepared run {args.run_id} in {settings.runs_dir}")
        now = folder.read_status()
        mine = now.state == "running" and now.pid == os.getpid()
        if now.state != "queued" and not mine:
            raise ConfigError(
                "--run-id",
                f"run {args.run_id} is {now.state}, not queued; only a queued run can be started",
            )
    else:
        spec = spec_from_args(args, here=settings)
        from core.executors import executor_for

        if not runs_here(executor_for(spec, settings)):  # e.g. Ray: queue it and wait
            return _run_queued(spec, settings, args)
        # Runs in this process: its folder starts running, never queued for a worker.
        folder = RunFolder.prepare(settings.runs_dir, spec, run_now=True)
    status = execute_run(folder, settings, _progress_printer(args.quiet), stop)
    if args.json:
        print(json.dumps(status.as_json(), indent=2))
    else:
        print(format_run(folder))
    return 0 if status.state == "succeeded" else 1


def _run_queued(spec: RunSpec, settings: Settings, args: argparse.Namespace) -> int:
    """Queue one run for the worker's executor (Ray) and wait for it here: this process
    runs the queue unless a portal's worker already owns the data folder."""
    import time

    from core.executors import executor_for
    from core.executors.queue import cancel
    from core.executors.worker import Worker
    from core.launch.host import host_for
    from core.launch.queue import queue_launch
    from core.run_folder import RunFolder
    from core.views.report import format_run

    where = host_for(
        settings, executor_for(spec, settings), [spec.server.engine], [spec.server.engine_install]
    )
    (run_id,) = queue_launch(settings, [spec], host=where).run_ids
    folder = RunFolder(settings.runs_dir / run_id)
    show = _progress_printer(args.quiet)
    worker = Worker(settings, poll_interval_s=0.5, settle_s=0.0)
    worker.start()
    cancelled = False
    try:
        while True:
            try:
                status = folder.status_or_empty()
                show(status)
                if status.final:
                    break
                time.sleep(0.5)
            except KeyboardInterrupt:
                if cancelled:
                    raise
                cancelled = True
                print(f"\n{cancel(settings, run_id)}", file=sys.stderr)
    finally:
        worker.stop()
    if args.json:
        print(json.dumps(status.as_json(), indent=2))
    else:
        print(format_run(folder))
    return 0 if status.state == "succeeded" else 1


def _catalog() -> Catalog:
    from core.settings import load_settings
    from core.store import Catalog

    settings = load_settings()
    return Catalog(settings.catalog_path, settings.runs_dir)


def _cmd_runs(args: argparse.Namespace) -> int:
    from core.executors.queue import recover_runs
    from core.settings import load_settings
    from core.views.report import format_runs

    # A run whose process is gone is shown as interrupted (and what is left of its server
    # killed), as the portal does when it starts.
    recover_runs(load_settings())
    cat = _catalog()
    cat.sync()
    rows = cat.list_runs(limit=args.limit, engine=args.engine, state=args.state, tag=args.tag)
    print(json.dumps(rows, indent=2, default=str) if args.json else format_runs(rows))
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from core.run_folder import RunFolder
    from core.settings import load_settings
    from core.views.report import format_run, run_details

    folder = RunFolder(load_settings().runs_dir / args.run_id)
    if not (folder.path / "spec.json").is_file():
        raise ConfigError("RUN_ID", f"no run {args.run_id}; `python -m core runs` lists them")
    print(
        json.dumps(run_details(folder), indent=2, default=str) if args.json else format_run(folder)
    )
    return 0


def _cmd_cancel(args: argparse.Namespace) -> int:
    from core.executors.queue import cancel
    from core.settings import load_settings

    settings = load_settings()
    if not (settings.runs_dir / args.run_id / "spec.json").is_file():
        raise ConfigError("RUN_ID", f"no run {args.run_id}; `python -m core runs` lists them")
    print(cancel(settings, args.run_id))
    return 0


def _cmd_parse_log(args: argparse.Namespace) -> int:
    from core.engines.sglang_log import parse_sglang_log

    try:
        text = args.file.read_text(errors="replace")
    except OSError as exc:
        raise ConfigError("FILE", f"cannot read {args.file}: {exc.strerror}") from exc
    from core.scheduler_log import parse_scheduler_lines, scheduler_summary

    # The start-up facts, then what the scheduler lines said while it served.
    facts = parse_sglang_log(text) | scheduler_summary(parse_scheduler_lines(text))
    print(json.dumps(facts, indent=2))
    return 0


def _cmd_experiment(args: argparse.Namespace) -> int:
    import time

    from core.executors.worker import Worker
    from core.experiments.design import load_experiment, parse_experiment
    from core.launch.queue import queue_experiment
    from core.settings import load_settings
    from core.views.report import format_experiment

    settings = load_settings()
    if args.show:
        record = load_experiment(settings, args.show)
        if record is None:
            raise ConfigError("--show", f"no experiment {args.show}")
        if args.json:
            from core.views.report import experiment_json

            print(json.dumps(experiment_json(settings, record), indent=2, default=str))
        else:
            print(format_experiment(settings, record))
        return 0
    if args.json:
        raise ConfigError("--json", "--json goes with --show EXPERIMENT_ID")
    if args.plan is None:
        raise ConfigError("PLAN", "give a plan file (or --show EXPERIMENT_ID)")
    data = _load_plan_file(args.plan)
    if args.trials is not None:
        data["trials"] = args.trials
    if args.executor:
        base = dict(data.get("base") or {})
        base["placement"] = {**(base.get("placement") or {}), "executor": args.executor}
        data["base"] = base
    exp = parse_experiment(data)
    from core.executors import executor_for
    from core.experiments.design import expand
    from core.launch.host import host_for

    # where it would run: this host (its engines detected), or the Ray cluster's report;
    # queue_experiment asks THE gate (every arm, every pool run) before it writes anything
    arms = [spec.server for _, trial, spec in expand(exp, "check") if trial == 0]
    where = host_for(
        settings,
        executor_for(exp.base, settings),
        [s.engine for s in arms],
        [s.engine_install for s in arms],
    )
    if args.dry_run:
        from core.launch.queue import dry_run

        print("\n".join(dry_run(settings, exp, host=where)))
        return 0
    exp_id = queue_experiment(settings, exp, host=where)
    print(f"experiment {exp_id} queued")
    if args.no_wait:
        return 0
    # Run the queue here unless a portal's worker already owns this data folder. Polled
    # every 0.5 s (as `run` does): the next run starts sooner after one ends.
    # trials: auto adds trials as it goes (core/launch/adaptive.py): this worker runs the
    # controller when it owns the queue; a portal's worker does otherwise.
    from core.analysis.sequential import progress_text
    from core.launch.adaptive import advance_experiments
    from core.run_folder import RunFolder

    worker = Worker(
        settings, poll_interval_s=0.5, on_change=lambda: bool(advance_experiments(settings))
    )
    worker.start()
    try:
        while True:
            record = load_experiment(settings, exp_id)  # read again: trials: auto adds runs
            if record is None:
                raise StoreError(
                    f"experiment {exp_id} was queued but its experiment.json is unreadable"
                )
            ids = record.run_ids
            states = [RunFolder(settings.runs_dir / i).status_or_empty().state for i in ids]
            done = sum(s not in ("queued", "running") for s in states)
            progress = progress_text(record)
            stopped = record.adaptive is not None and record.adaptive.stop is not None
            sys.stderr.write(
                f"\r[{exp_id}] {done}/{len(ids)} runs finished"
                + (f"; {progress}" if progress else "")
            )
            sys.stderr.flush()
            if done == len(ids) and (stopped or not record.is_adaptive):
                sys.stderr.write("\n")
                break
            time.sleep(0.5)
    finally:
        worker.stop()
    print(format_experiment(settings, record))
    return 0


def _cmd_explain(args: argparse.Namespace) -> int:
    from core.launch.explain import handle

    return handle(args)


def _cmd_history(args: argparse.Namespace) -> int:
    from core.analysis.history import is_series_key, load_history
    from core.run_folder import is_run_id
    from core.settings import load_settings
    from core.views.history import history_json, history_lines

    target = str(args.target).strip()
    if not (is_series_key(target) or is_run_id(target)):
        raise ConfigError("RUN_OR_SERIES", f"{target[:40]!r} is neither a run id nor a series key")
    history = load_history(load_settings().runs_dir, target)
    if history is None:
        raise ConfigError(
            "RUN_OR_SERIES",
            f"no succeeded run of {target}: a series holds the runs that finished with "
            "results; `python -m core runs` lists them",
        )
    print(
        json.dumps(history_json(history, load_settings()), indent=2)
        if args.json
        else "\n".join(history_lines(history, load_settings()))
    )
    return 0


def _cmd_reindex(_args: argparse.Namespace) -> int:
    n = _catalog().reindex()
    print(f"indexed {n} run folder(s)")
    return 0


def _cmd_engines(_args: argparse.Namespace) -> int:
    from core.engines import engine_names, get_adapter
    from core.settings import load_settings

    settings = load_settings()
    for name in engine_names():
        info = get_adapter(name, settings).detect()
        state = f"installed {info.version or ''}".strip() if info.installed else "not installed"
        print(f"{name:14} {state}  {info.reason}")
        for note in info.notes:
            print(f"{'':14} note: {note}")
    return 0


def _cmd_installs(_args: argparse.Namespace) -> int:
    """Every engine installation: the default ones and the named ones, each detected."""
    from core.engines import engine_names, get_adapter, get_engine
    from core.errors import ConfigError
    from core.settings import load_settings

    settings = load_settings()
    rows: list[tuple[str, str, str | None, str]] = [
        ("(default)", e, None, settings.engine_python(e))
        for e in engine_names()
        if get_engine(e).has_install
    ]
    rows += [(i.name, i.engine, i.name, i.python) for i in settings.engine_installs]
    print(f"{'name':24} {'engine':13} {'version':12} {'detected':9} python")
    for label, engine, name, python in rows:
        try:
            info = get_adapter(engine, settings, name).detect()
        except ConfigError as exc:  # an installation of an engine no registration knows
            print(f"{label:24} {engine:13} {'-':12} {'no':9} {python}")
            print(f"{'':24} why: {exc.message}")
            continue
        detected = "yes" if info.installed else "no"
        print(f"{label:24} {engine:13} {info.version or '-':12} {detected:9} {python}")
        if not info.installed:
            print(f"{'':24} why: {info.reason}")
    return 0


def _flag_of(field: str) -> str:
    """The flag that sets a spec field: server.extra_args → --extra-arg,
    plan.points.0.num_prompts → --num-prompts."""
    named = {"extra_args": "--extra-arg", "tags": "--tag", "kind": "--workload"}
    if "." not in field:
        return named.get(field, field)
    name = field.split(".")[-1]
    if name.isdigit():
        name = field.split(".")[-2]
    return named.get(name, "--" + name.replace("_", "-"))


def _cmd_workload(args: argparse.Namespace) -> int:
    from core.config import Point, RunSpec, Workload
    from core.load.workloads import preview_point
    from core.settings import load_settings

    if args.source.suffix == ".jsonl":
        workload = Workload(kind="trace", trace=str(args.source))
        point = Point(num_prompts=args.limit or 100_000, workload=workload)
        seed, model = 42 * 1000, args.model
    else:
        spec = RunSpec.model_validate_json(args.source.read_text())
        point = spec.plan.points[args.point]
        seed = spec.plan.seed * 1000 + args.point  # the pipeline's per-point seed
        model = args.model or spec.server.tokenizer or spec.server.model
    if args.over_context:
        wl = point.workload.model_copy(update={"over_context": args.over_context})
        point = point.model_copy(update={"workload": wl})
    from core.engines.model_setup import model_folder

    folder = model_folder(model, load_settings().models_dir)  # as the engine serves it
    rows, summary = preview_point(point, seed, folder, args.limit)
    for row in rows:
        if args.json:
            print(json.dumps(row))
        else:
            print(" ".join(f"{k}={v}" for k, v in row.items()))
    print(json.dumps(summary), file=sys.stderr)
    return 0


def _cmd_shapes(args: argparse.Namespace) -> int:
    """Each shipped shape in one line, or one materialised as a model folder."""
    from core.config import DEFAULT_MODEL
    from core.engines.model_setup import model_folder
    from core.settings import load_settings
    from core.shapes import DUMMY_WEIGHTS, load_shape, materialise, shape_names

    if args.materialise:
        name, folder = args.materialise
        tokenizer = args.tokenizer or model_folder(DEFAULT_MODEL, load_settings().models_dir)
        print(materialise(load_shape(name), Path(folder), tokenizer))
        return 0
    for name in shape_names():
        print(f"{name:<16} {load_shape(name).summary}")
    print(f"(a shape runs with {DUMMY_WEIGHTS}; data/shapes/README.md: sources, licence)")
    return 0


def _problems_of(exc: ConfigError) -> dict[str, str]:
    """Every field a refusal names: FieldErrors' and the gate's (``Refused``), else one."""
    from core.launch.preflight import Refused

    if isinstance(exc, FieldErrors):
        return exc.problems
    if isinstance(exc, Refused):
        return {p.field: p.text for p in exc.problems}
    return {exc.field: exc.message}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    handler = {
        "run": _cmd_run,
        "runs": _cmd_runs,
        "show": _cmd_show,
        "cancel": _cmd_cancel,
        "parse-log": _cmd_parse_log,
        "reindex": _cmd_reindex,
        "experiment": _cmd_experiment,
        "engines": _cmd_engines,
        "installs": _cmd_installs,
        "shapes": _cmd_shapes,
        "explain": _cmd_explain,
        "history": _cmd_history,
        "workload": _cmd_workload,
        **TRANSFER_HANDLERS,
    }[args.command]
    try:
        return int(handler(args))
    except ConfigError as exc:
        problems = _problems_of(exc)
        for field, message in problems.items():
            flag = _flag_of(field)
            print(
                f"error: {field}{f' ({flag})' if flag != field else ''}: {message}", file=sys.stderr
            )
        return 2
    except ServeLabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
