"""Plain-text views of runs for the command line, and the rows of a run's steps as the
Run page shows them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from core.answers import probe_verdict
from core.engines.registry import DEFAULT_ENGINE
from core.experiments.records import ExperimentRecord
from core.metrics import DEFINITION, caveat_lines, point_cancelled, point_caveats
from core.numbers import EMPTY, duration_text, is_number, number_text, pct_text, share_text
from core.run_folder import RunFolder, RunStatus, Step, stop_step_read
from core.settings import Settings
from core.shapes import runs_routing, shapes_line
from core.views.progress import point_words

__all__ = [
    "experiment_json",
    "format_experiment",
    "format_run",
    "format_runs",
    "node_line",
    "run_details",
    "run_why",
    "step_rows",
]


def node_line(status: RunStatus) -> str:
    """Where a Ray run runs or ran, in words (status.json's placement fields, see
    core/executors); "" for a local run."""
    if status.executor != "ray":
        return ""
    if not status.node_ip:
        return "Ray: waiting for a node with free GPUs"
    gpus = ",".join(map(str, status.gpu_ids or [])) or "none"
    return f"Ray node {status.node_ip} ({status.node_name or '?'}) · GPU ids {gpus}"


def _f(v: Any) -> str:
    """A cell of the CLI's tables: a number by ``core.numbers.number_text``, text as it is."""
    return str(v) if isinstance(v, str | bool) else number_text(v)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(lines)


def step_rows(
    steps: Sequence[Step],
    points_total: int | None = None,
    probe: Mapping[str, Any] | None = None,
) -> list[dict[str, str]]:
    """A run's steps for reading: when each started (UTC, to the tenth of a second; the day
    only where it changes) and how long it took, in the unit that fits; points counted
    from 1 of ``points_total`` (the plan's; else the point steps recorded), the stop in
    ``stop_step``'s words, the probe (``probe.json``) by today's rule (core.answers)."""
    rows, day = [], None
    total = points_total or sum(1 for s in steps if point_words(s.step, None) != s.step)
    for s in steps:
        outcome, detail = stop_step_read(s)
        if s.step == "probe" and outcome == "ok" and probe:  # a folder older than the rule
            verdict, why = probe_verdict(probe)
            if verdict == "warning":
                outcome, detail = "warning", f"{str(probe.get('answer'))[:80]!r}: {why}"
        started = s.started_at or ""
        when = started[11:21] if len(started) >= 21 else started
        if started[:10] and started[:10] != day:
            day = started[:10]
            when = f"{day} {when}"
        took = s.duration_s
        rows.append(
            {
                "step": point_words(s.step, total),
                "outcome": outcome,
                "started (UTC)": when,
                "took": _took(took),
                "detail": point_words(detail, total),
            }
        )
    return rows


def _took(seconds: Any) -> str:
    return duration_text(seconds)  # "" while still running, or never timed


def run_details(folder: RunFolder) -> dict[str, Any]:
    return {
        "run_id": folder.run_id,
        "path": str(folder.path),
        "spec": folder.read("spec.json"),
        "status": folder.status(),
        "launch": folder.read("launch.json"),
        "facts": {
            k: v for k, v in (folder.read("facts.json") or {}).items() if k != "server_info_raw"
        },
        "probe": folder.read("probe.json"),
        "answers": folder.read("answers.json"),  # the answers check (core/run/answers_step.py)
        "points": folder.point_summaries(),
    } | run_why(folder)


def run_why(folder: RunFolder) -> dict[str, Any]:
    """The server's side of one run, for scripts: ``knob_checks`` (did this run reach the
    resource each of its settings acts on), ``server_view`` (None where the engine reports
    none) and the memory ``ledger``."""
    from core.analysis.knob_checks import run_knob_checks
    from core.analysis.ledger import run_ledger
    from core.analysis.runs import load_run
    from core.analysis.server_view import no_view_line, server_view

    view = load_run(folder)
    seen = server_view(view)
    return {
        "knob_checks": run_knob_checks(view),
        "server_view": seen.as_json() if seen.source != "none" else None,
        "server_view_note": no_view_line(view) if seen.source == "none" else None,
        "ledger": run_ledger(view).as_json(),
    }


def format_run(folder: RunFolder) -> str:
    d = run_details(folder)
    st, launch, facts, probe = folder.status_or_empty(), d["launch"] or {}, d["facts"], d["probe"]
    out = [
        f"run {folder.run_id}: {st.state}" + (f" — {st.reason}" if st.reason else ""),
        f"  folder:  {folder.path}",
    ]
    spec = folder.read("spec.json") or {}
    if shape_line := shapes_line([spec], launch.get("uniform_experts")):
        out.append(f"  {shape_line}")
    if where := node_line(st):  # a run an executor placed elsewhere (core/executors)
        out.append(f"  ran on:  {where}")
    if launch.get("command"):
        out.append(f"  command: {launch['command']}")
    for note in launch.get("notes") or []:
        out.append(f"  note:    {note}")
    if facts:
        out.append(
            f"  engine {facts.get('engine_version') or '?'}"
            + (f" (installation {facts['engine_install']})" if facts.get("engine_install") else "")
            + f"; ready after {_f(facts.get('ready_after_s'))} s; KV pool tokens "
            f"{_f(facts.get('kv_cache_tokens'))}"
        )
    if probe:  # today's rule (core.answers): a degenerate answer is a WARNING
        verdict, why = probe_verdict(probe)
        word = {"passed": "pass", "warning": "WARNING", "failed": "FAIL"}[verdict]
        out.append(f"  probe:   {probe['prompt']!r} -> {probe['answer'][:60]!r} ({word}: {why})")
    out.append(
        "  steps:   "
        + ", ".join(f"{r['step']} {r['outcome']}" for r in step_rows(st.steps, probe=probe))
    )
    rows = []
    for p in d["points"]:
        m = p["metrics"]
        rows.append(
            [
                p["label"] + (" (cancelled)" if point_cancelled(p, st) else ""),
                f"{_f(m.get('completed'))}/{_f(m.get('num_requests'))}",
                _f(m["output_throughput"]),
                _f(m.get("steady_output_throughput")),
                _f(m["median_ttft_ms"]),
                _f(m["p99_ttft_ms"]),
                _f(m["median_itl_ms"]),
                _f(m["median_tpot_ms"]),
                _f(m["median_e2e_ms"]),
                _f(p["client"].get("loop_lag_ms_p99")),
            ]
        )
    if rows:
        out.append("")
        out.append(
            _table(
                [
                    "point",
                    "ok",
                    "out tok/s",
                    "steady out tok/s",
                    "TTFT p50 ms",
                    "TTFT p99 ms",
                    "ITL p50 ms",
                    "TPOT p50 ms",
                    "E2E p50 ms",
                    "client lag p99 ms",
                ],
                rows,
            )
        )
        src = d["points"][0].get("token_source", "server")
        definition = d["points"][0].get("metrics", {}).get("definition") or DEFINITION
        out.append(f"\nmetrics: {definition}; output tokens counted by: {src}")
        out += ["", _lengths_table(folder)]
        for p in d["points"]:  # read with care (docs/METRICS.md): one rule, core.metrics
            label = f"point {p.get('label', p.get('index'))}"
            out += [f"WARNING: {line}" for line in caveat_lines(label, point_caveats(p, st))]
    return "\n".join(out)


def _lengths_table(folder: RunFolder) -> str:
    """Per point: input/output tokens per request, the server's prefix-cache hits over it and
    a kv_fill point's sizing (core.analysis.points.point_rows)."""
    from core.analysis.points import point_rows
    from core.analysis.runs import load_run

    rows = [
        [
            str(r["point"]),
            "/".join(_f(r[f"input_tokens_{k}"]) for k in ("p50", "p90", "p99", "max")),
            "/".join(_f(r[f"output_tokens_{k}"]) for k in ("p50", "p90", "p99", "max")),
            share_text(r["prefix_cache_hit_rate"], 1),
            EMPTY
            if r["kv_fill"] is None
            else f"{number_text(r['kv_fill'])} x {r['kv_fill_pool_tokens']} "
            f"({r['kv_fill_pool_whose']}) -> {r['kv_fill_computed']}",
        ]
        for r in point_rows(load_run(folder))
    ]
    return _table(
        ["point", "in tok p50/p90/p99/max", "out tok p50/p90/p99/max", "prefix hits", "kv_fill"],
        rows,
    )


def format_runs(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return f"no runs yet: `python -m core run --engine {DEFAULT_ENGINE}` makes one"
    table = [
        [
            r["run_id"],
            str(r["state"]),
            str(r["engine"]),
            str(r["model"])[-32:],
            _f(r["cuda_graphs"]),
            _f(r["output_throughput"]),
            _f(r["median_ttft_ms"]),
            _f(r["duration_s"]),
            (r.get("reason") or "")[:60],
        ]
        for r in rows
    ]
    return _table(
        ["run", "state", "engine", "model", "graphs", "out tok/s", "TTFT p50", "wall s", "reason"],
        table,
    )


def experiment_json(settings: Settings, record: ExperimentRecord) -> dict[str, Any]:
    """The experiment's story for scripts and CI (``experiment --show ID --json``): the
    same Story as the pages and ``format_experiment``, plus the runs' states."""
    from core.analysis.card import experiment_story
    from core.analysis.trials import experiment_runs

    runs = experiment_runs(settings, record)
    states = [str(r.view.status.state) for r in runs]
    head = {
        "experiment_id": record.experiment_id,
        "name": record.name,
        "runs": {s: states.count(s) for s in sorted(set(states))},
    }
    if not runs or not record.arm_labels:
        return head | {"baseline": None, "arms": record.arm_labels, "verdict": [], "card": []}
    return head | experiment_story(settings, record, runs).as_json()


def format_experiment(settings: Settings, record: ExperimentRecord) -> str:
    """The verdict, then per point and arm the mean output throughput with its interval."""
    from core.analysis.attribution import format_attribution
    from core.analysis.card import arm_table, experiment_story
    from core.analysis.trials import experiment_runs

    spec = record.spec
    arms = record.arm_labels
    runs = experiment_runs(settings, record)
    states = [str(r.view.status.state) for r in runs]
    out = [
        f"experiment {record.experiment_id}: {record.name} "
        f"({len(arms)} arms x {spec.get('trials')} trials, order seed "
        f"{spec.get('order_seed')}); runs: "
        + ", ".join(f"{s}={states.count(s)}" for s in sorted(set(states)))
    ]
    # model shapes: dummy weights, speed only; how the runs' MoE routing ran
    if shape_line := shapes_line([spec], runs_routing(r.view.launch for r in runs)):
        out.append(shape_line)
    if not runs or not arms:
        return "\n".join(out)
    story = experiment_story(settings, record, runs)  # the same story as the pages
    baseline = story.baseline
    table = arm_table(runs, story)
    out += story.verdict
    out += [story.noise] if story.noise else []  # this host's run-to-run noise, if known
    # a grid's split of the difference into knobs; an unexercised knob's part is "not tested"
    out += format_attribution(settings, record, untested=story.untested_knobs)
    rows = []
    for _, r in table[table["metric"] == "output_throughput"].iterrows():
        ci = (
            EMPTY
            if not is_number(r["ci_low"])
            else f"{number_text(r['ci_low'])}..{number_text(r['ci_high'])}"
        )
        rel = r.get("rel")
        rows.append(
            [
                str(r["point"]),
                str(r["arm"]),
                str(r["n"]),
                _f(r["mean"]),
                ci,
                pct_text(rel),
                "baseline" if r["arm"] == baseline else str(r.get("label")),
            ]
        )
    if rows:
        out.append("")
        out.append(
            _table(["point", "arm", "n", "out tok/s", "95% CI", "vs baseline", "label"], rows)
        )
    return "\n".join(out)
