"""Launch: a form for engine, model, knobs and plan; presets; queue the runs."""

from __future__ import annotations

import streamlit as st

from core.analysis.power import host_noise, power_lines
from core.config import RunSpec, ServerConfig, parse_whole_number
from core.engines.registry import DEFAULT_ENGINE, engine_names, engines_with_knob, get_engine
from core.errors import ConfigError, StoreError
from core.executors import EXECUTORS, executor_summary, ray_address, runs_here, save_ray_address
from core.experiments.design import load_experiment
from core.launch.forms import (
    FORM_DEFAULTS,
    SHAPE_FIELD_LABEL,
    WORKLOAD_KINDS,
    errors_summary,
    experiment_from_form,
    launch_from_form,
    launch_warnings,
    preview_from_form,
    refusal_errors,
    shape_choices,
    trace_choices,
)
from core.launch.host import detect_host, launch_host
from core.launch.presets import PRESETS, estimate_text
from core.launch.queue import queue_launch
from core.store import Catalog
from pages._auth import can_launch
from pages._grid import grid_fields, queue_grid
from pages._services import bootstrap

settings, _worker = bootstrap()
host = detect_host(settings)
st.title("Launch")
st.caption(
    "Host: "
    + (", ".join(host.gpus) if host.has_gpu else "no GPU (CPU only)")
    + " · engines: "
    + ", ".join(f"{n} {i.version or ''}".strip() for n, i in host.engines.items() if i.installed)
    + (" · installations: " + ", ".join(host.installs) if host.installs else "")
    + " · "
    + executor_summary(settings)
)
with st.expander("Ray cluster (run on other GPU hosts)", expanded=False):  # core/executors
    st.text_input(
        "Ray head address (HOST:PORT; empty = SERVELAB_RAY_ADDRESS)",
        ray_address(settings) or "",
        key="ray_address",
    )
    if (
        st.button("Save address", key="save_ray_address", disabled=not can_launch())
        and can_launch()
    ):
        try:
            now = save_ray_address(settings, st.session_state["ray_address"])
            st.toast(f"Ray cluster: {now or 'none'}")
            st.rerun()
        except ConfigError as exc:
            st.error(exc.message, icon=":material/error:")

D = FORM_DEFAULTS
default_preset = next(
    p.name for p in PRESETS if p.unavailable(host, DEFAULT_ENGINE) is None and len(p.arms) > 1
)


def _preset_label(name: str) -> str:
    preset = next(p for p in PRESETS if p.name == name)
    why = preset.unavailable(host, DEFAULT_ENGINE)
    return f"{name} — unavailable: {why}" if why else f"{name} — {preset.description}"


def _only(label: str, knob: str) -> str:
    """A knob's label with the engines that take it: "Attention backend (sglang)"."""
    return f"{label} ({', '.join(engines_with_knob(knob))})"


def _engine_label(name: str) -> str:
    why = host.unavailable(name)
    return f"{name} (unavailable: {why})" if why else name


errors: dict[str, str] = st.session_state.get("launch_errors", {})
# what the check found a point cannot measure (core.launch.forms.launch_warnings): shown
# beside the field, never blocking
warnings: dict[str, str] = st.session_state.get("launch_warnings", {})


def err(key: str) -> None:
    if key in errors:
        st.error(errors[key], icon=":material/error:")
    elif key in warnings:
        st.warning(warnings[key], icon=":material/warning:")


def estimate() -> str:
    """Runs this launch queues and their likely duration, from earlier runs like it."""
    preset = next(
        (p for p in PRESETS if p.name == st.session_state.get("preset", default_preset)), PRESETS[0]
    )
    auto = bool(st.session_state.get("trials_auto", D["trials_auto"]))
    key = "max_trials" if auto else "trials"  # trials: auto: at most max_trials
    try:
        trials = parse_whole_number(st.session_state.get(key, D[key]))
    except (TypeError, ValueError):
        trials = int(D[key])
    engine = st.session_state.get("engine", D["engine"])
    model = str(st.session_state.get("model", D["model"])).strip()
    chosen = st.session_state.get("executor")  # a Ray run's arms go in parallel
    return ("at most: " if auto else "") + estimate_text(
        preset,
        max(trials, 1),
        Catalog(settings.catalog_path, settings.runs_dir).recent_durations_s(engine, model),
        what=f"{engine} {model}",
        parallel=chosen is not None and not runs_here(chosen),
        spec=st.session_state.get("launch_spec"),  # the checked plan: a rough figure
    )


def power() -> str:
    """The smallest effect the preset's trials can resolve, from the noise this host has
    shown (core/analysis/power.py); empty for a single run."""
    preset = next(
        (p for p in PRESETS if p.name == st.session_state.get("preset", default_preset)), PRESETS[0]
    )
    if len(preset.arms) < 2:
        return ""
    try:
        trials = parse_whole_number(st.session_state.get("trials", D["trials"]))
    except (TypeError, ValueError):
        trials = int(D["trials"])
    engine = st.session_state.get("engine", D["engine"])
    model = str(st.session_state.get("model", D["model"])).strip()
    try:
        server = ServerConfig.model_validate({"engine": engine, "model": model})
        machine = detect_host(settings).fingerprint(server)
    except ValueError:  # a half-typed form: no machine to key the noise by yet
        machine = None
    noise = host_noise(settings, machine, engine=engine, model=model)
    lines = power_lines(noise, max(trials, 1))
    return "  \n".join(lines)


# Whole-number fields are text fields parsed strictly by core (core.config.parse_whole_number):
# a number widget read `1e9` as 1 in the browser, a different value and no message. A bad
# value reaches core's check and gets a message beside it.
# enter_to_submit=False: Enter in a field ran whichever check the browser picked (the hidden
# Grid / sweep one) and drew "Press Enter to submit form" over narrow number fields; a
# button says what runs.
with st.form("launch", enter_to_submit=False):
    st.subheader("Preset")
    st.selectbox(
        "Preset",
        [p.name for p in PRESETS],
        key="preset",
        index=[p.name for p in PRESETS].index(default_preset),
        format_func=_preset_label,
    )
    err("preset")
    st.text_input(
        "Trials per arm (a preset with two arms runs as an experiment; 3 or more give intervals)",
        str(D["trials"]),
        key="trials",
    )
    err("trials")
    st.checkbox(
        "Trials: auto (add trials until every headline contrast is decided: better, worse "
        "or equivalent; the trials above are then ignored)",
        value=D["trials_auto"],
        key="trials_auto",
    )
    t1, t2, t3 = st.columns(3)
    t1.text_input("Min trials (first look)", str(D["min_trials"]), key="min_trials")
    t2.text_input("Max trials", str(D["max_trials"]), key="max_trials")
    t3.text_input("Max minutes (optional)", D["max_minutes"], key="max_minutes")
    for key in ("min_trials", "max_trials", "max_minutes"):
        err(key)
    st.caption("Estimate: " + estimate())
    if text := power():  # next to the duration: what these trials can tell apart
        st.caption(text)
    if ray_address(settings) or not runs_here(settings.executor):  # core/executors
        st.selectbox(
            "Executor",
            EXECUTORS,
            index=EXECUTORS.index(settings.executor) if settings.executor in EXECUTORS else 0,
            key="executor",
            format_func=lambda e: (
                "this host (local)"
                if e == "local"
                else f"Ray cluster {ray_address(settings) or '(no address set)'}: arms run "
                "in parallel on free GPUs"
            ),
        )
    st.subheader("Server")
    c1, c2, c3 = st.columns(3)
    with c1:
        # every registered engine, in the registry's order: detect_host checked each one
        st.selectbox("Engine", list(host.engines), key="engine", format_func=_engine_label)
        err("engine")
        if host.installs:  # named installations (README "Engines"); "" = the default one
            st.selectbox(
                "Engine installation (of the engine above)",
                ["", *host.installs],
                key="engine_install",
                format_func=host.install_label,
            )
            err("engine_install")
        st.text_input("Model (folder, hub id, or the bundled default)", D["model"], key="model")
        err("model")
        shapes = shape_choices()
        st.selectbox(
            SHAPE_FIELD_LABEL,
            list(shapes),
            key="shape",
            format_func=shapes.__getitem__,
            help="A real model's config.json run with random weights (data/shapes): "
            "replaces the model above; SGLang only",
        )
        err("shape")
        st.text_input("Tokenizer folder (optional)", "", key="tokenizer")
        err("tokenizer")
        needs_url = [n for n in engine_names() if get_engine(n).needs_endpoint_url]
        st.text_input(f"Endpoint URL ({', '.join(needs_url)})", "", key="endpoint_url")
        err("endpoint_url")
    with c2:
        st.selectbox("Device", ["auto", "cpu", "cuda"], key="device")
        err("device")
        st.selectbox("dtype", ["auto", "bfloat16", "float16", "float32"], key="dtype")
        err("dtype")
        st.selectbox(
            "CUDA graphs (presets override)",
            ["engine default", "on", "off"],
            key="cuda_graphs",
            help=host.cuda_graphs_reason,
        )
        err("cuda_graphs")
        st.text_input("CUDA graph max batch size", "", key="cuda_graph_max_bs")
        err("cuda_graph_max_bs")
    with c3:
        # which engines take each knob: their declarations (core/engines/registry.py)
        st.text_input(
            _only("mem-fraction-static", "mem_fraction_static"), "", key="mem_fraction_static"
        )
        err("mem_fraction_static")
        st.text_input(_only("Tensor parallel size", "tp_size"), "1", key="tp_size")
        err("tp_size")
        st.text_input(_only("Attention backend", "attention_backend"), "", key="attention_backend")
        err("attention_backend")
        st.text_input(
            _only("KV cache memory fraction", "cb_max_memory_percent"),
            "",
            key="cb_max_memory_percent",
        )
        err("cb_max_memory_percent")
    st.text_input(
        "Extra engine flags (checked against the engine's own options)", "", key="extra_args"
    )
    err("extra_args")
    st.subheader("Benchmark plan")
    p1, p2, p3, p4 = st.columns(4)
    with p1:
        st.text_input("Concurrency (comma-separated points)", D["concurrency"], key="concurrency")
        err("concurrency")
    with p2:
        st.text_input("Prompts per point", str(D["num_prompts"]), key="num_prompts")
        err("num_prompts")
    with p3:
        st.text_input("Input tokens", str(D["input_len"]), key="input_len")
        err("input_len")
    with p4:
        st.text_input("Output tokens", str(D["output_len"]), key="output_len")
        err("output_len")
    q1, q2, q3, q4 = st.columns(4)
    with q1:
        st.text_input("Request rate (req/s or inf)", "inf", key="request_rate")
        err("request_rate")
    with q2:
        st.text_input("Seed", str(D["seed"]), key="seed")
        err("seed")
    with q3:
        st.text_input("Warm-up requests (empty = largest concurrency)", "", key="warmup_requests")
        err("warmup_requests")
    with q4:
        st.text_input("Tags (space-separated)", "", key="tags")
        err("tags")
    st.markdown('**Workload** (every point; docs/METRICS.md, "Workloads")')
    w1, w2, w3, w4 = st.columns(4)
    with w1:
        st.selectbox("Workload", WORKLOAD_KINDS, key="workload_kind")
        err("workload_kind")
        st.text_input("Uniform: lowest length / length (0-1)", "", key="range_ratio")
        err("range_ratio")
    with w2:
        st.text_input(
            "Trace (a file of data/workloads: " + ", ".join(trace_choices()) + "; or a path)",
            "",
            key="trace",
        )
        err("trace")
        st.selectbox("Trace arrivals", ["closed_loop", "timestamps"], key="arrivals")
        err("arrivals")
        st.selectbox(
            "Longer than the model's context", ["error", "drop", "clip"], key="over_context"
        )
        err("over_context")
    with w3:
        st.text_input("Shared prefix: groups", str(D["groups"]), key="groups")
        err("groups")
        st.text_input("Prompts per group", str(D["prompts_per_group"]), key="prompts_per_group")
        err("prompts_per_group")
        st.text_input("System prompt tokens", str(D["system_prompt_len"]), key="system_prompt_len")
        err("system_prompt_len")
        st.text_input("Question tokens", str(D["question_len"]), key="question_len")
        err("question_len")
    with w4:
        st.text_input(
            "KV fill (in-flight tokens = this x the server's KV pool; empty = off)",
            "",
            key="kv_fill",
        )
        err("kv_fill")
        st.selectbox("KV fill sizes", ["concurrency", "lengths"], key="kv_fill_by")
        err("kv_fill_by")
    previewed = st.form_submit_button(
        "Preview the workload (first point; queues nothing)", key="preview_workload"
    )
    st.checkbox(
        "Exact output lengths (ask the server for exactly the output tokens; the "
        "request field is chosen per server and recorded in the run)",
        True,
        key="exact_length",
    )
    st.checkbox("Sanity probe before the load", True, key="probe")
    err("probe")
    r1, r2 = st.columns([3, 1])
    with r1:
        st.text_input("Probe question", D["probe_prompt"], key="probe_prompt")
        err("probe_prompt")
    with r2:
        st.text_input(
            "Expected answer (regex; empty = any non-empty text)",
            D["probe_expect"],
            key="probe_expect",
        )
        err("probe_expect")
    grid_checked, grid_submitted = grid_fields(err, errors)  # Grid / sweep mode (pages/_grid.py)
    b1, b2 = st.columns(2)
    checked = b1.form_submit_button("Check and estimate (queues nothing)", key="check_launch")
    submitted = b2.form_submit_button(
        "Queue runs", type="primary", key="submit_launch", disabled=not can_launch()
    )
if not can_launch():
    st.info(
        "You are signed in to view: launching runs needs the launch token.", icon=":material/lock:"
    )

if submitted and not can_launch():  # never trust a disabled button alone
    st.session_state["launch_errors"] = {"submit": "this session may view, not launch"}
    st.rerun()
if submitted or checked:
    form = {k: st.session_state[k] for k in D if k in st.session_state}
    preset = next(p for p in PRESETS if p.name == form.get("preset"))
    st.session_state["launched"], st.session_state["experiment"] = [], None
    executor = st.session_state.get("executor") or settings.executor
    form_host = launch_host(settings, host, executor)  # Ray: the cluster's, not this host's
    local = runs_here(executor)  # a Ray run's engine and model are checked on its node
    checked_specs: list[RunSpec] = []
    try:
        if len(preset.arms) > 1:
            exp, errors = experiment_from_form(form, form_host, settings=settings, local=local)
            checked_specs = [exp.base] if exp is not None else []
            if exp is not None and submitted:
                queued = queue_launch(settings, exp, executor=executor, host=form_host)
                st.session_state["experiment"] = queued.experiment_id
        else:
            specs, errors = launch_from_form(form, form_host, settings=settings, local=local)
            checked_specs = specs
            if not errors and submitted:
                queued = queue_launch(settings, specs, executor=executor, host=form_host)
                st.session_state["launched"] = list(queued.run_ids)
    except StoreError as exc:  # data folder not writable, disk full
        errors = {"submit": f"could not queue: {exc}"}
    except ConfigError as exc:  # the queue's gate (core/launch/preflight.py), beside the fields
        errors = refusal_errors(exc, checked_specs[0] if checked_specs else None)
    st.session_state["launch_errors"] = errors
    st.session_state["launch_warnings"] = launch_warnings(checked_specs)
    st.session_state["launch_spec"] = checked_specs[0] if checked_specs else None
    st.session_state["launch_checked"] = checked and not errors
    st.rerun()

if previewed:
    form = {k: st.session_state[k] for k in D if k in st.session_state}
    preview, preview_errors = preview_from_form(form, settings)
    st.session_state["launch_errors"] = preview_errors
    st.session_state["workload_preview"] = preview
    st.rerun()
if (preview := st.session_state.get("workload_preview")) is not None:
    with st.container(key="workload_preview_box"):
        st.subheader("Workload preview")
        share = preview.prefix_reuse_share
        st.metric(
            "Prefix reuse (input tokens an earlier request already sent)",
            "n/a" if share is None else f"{share:.1%}",
        )
        st.caption(
            f"{len(preview.rows)} request(s) previewed; "
            + ", ".join(f"{k}: {v}" for k, v in preview.summary.items())
        )
        st.bar_chart(preview.histogram, x="tokens", y=["input requests", "output requests"])
        st.dataframe(preview.rows[:50], hide_index=True)

if grid_checked or grid_submitted:
    queue_grid(settings, host, D, submit=grid_submitted)

if "submit" in errors:
    st.error(f"Nothing was queued: {errors['submit']}", icon=":material/error:")
elif errors:
    st.error(errors_summary(errors), icon=":material/error:")
elif st.session_state.pop("launch_checked", False):
    if warnings:  # queueable, but a point cannot measure what it names: say so first
        st.warning(
            "Every field is valid, but some points cannot measure what they claim (the "
            "warning beside the field says why); nothing queued yet. " + estimate(),
            icon=":material/warning:",
        )
    else:
        st.success("Every field is fine; nothing queued yet. " + estimate())
exp_id = st.session_state.get("experiment")
if exp_id:
    record = load_experiment(settings, exp_id)
    exp_runs = record.runs if record is not None else []
    st.session_state["launched"] = [r.run_id for r in exp_runs if r.trial == 0]
    # one message, one count: the experiment's runs (the estimate's words), then its links
    st.success(f"Queued experiment {exp_id}: {estimate()}")
    st.page_link(
        "pages/experiment.py",
        label=f"Experiment {exp_id}",
        query_params={"experiment": exp_id},
        icon=":material/science:",
    )
if ids := st.session_state.get("launched"):
    if not exp_id:
        st.success("Queued " + estimate())
    for run_id in ids:
        st.page_link(
            "pages/run.py",
            label=f"Run {run_id}",
            query_params={"run": run_id},
            icon=":material/description:",
        )
    if len(ids) > 1:
        st.page_link(
            "pages/compare.py",
            label="Compare these runs",
            query_params={"runs": ",".join(ids)},
            icon=":material/compare_arrows:",
        )
