"""The Compare page's "Explain this difference" block (core/launch/explain.py does the work:
the plan, and the check shown before anything is queued)."""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from core.analysis.runs import RunView
from core.config import knob_text, parse_whole_number
from core.errors import ConfigError
from core.experiments.design import MAX_TRIALS
from core.launch.explain import check_explanation, explain_plan, submit_explanation
from core.settings import Settings
from pages._auth import can_launch


def typed_trials(typed: str) -> tuple[int, str | None]:
    """The typed trials per arm, read as strictly as the Launch form's whole numbers (a
    value out of range is refused, never clamped), or 0 and what is wrong, naming the field."""
    try:
        trials = parse_whole_number(typed, example=3)
    except ValueError as exc:
        return 0, f"Trials: {exc}"
    if not 1 <= trials <= MAX_TRIALS:
        return 0, f"Trials: give between 1 and {MAX_TRIALS} trials, not {trials}"
    return trials, None


def explain_block(settings: Settings, views: Sequence[RunView], baseline: int) -> None:
    """Per run that differs from the baseline in two or more knobs: what the factorial would
    vary, how many runs and GPU-minutes it takes, whether it can run where it would go, the
    experiment that already answers it if one does, and a button that queues it."""
    base = views[baseline]
    for other in (v for i, v in enumerate(views) if i != baseline):
        plan = explain_plan(base, other)
        if len(plan.knobs) < 2:
            continue
        st.subheader("Explain this difference")
        st.write(
            f"**{other.run_id}** differs from **{base.run_id}** in "
            f"{len(plan.knobs)} knobs: "
            + ", ".join(f"`{k}` {knob_text(a)}→{knob_text(b)}" for k, (a, b) in plan.knobs.items())
            + ". A factorial experiment over exactly these knobs (every other field at "
            f"{base.run_id}'s value) splits the difference into each knob's effect "
            "and their interactions."
        )
        for field, why in plan.not_explainable.items():
            st.caption(f"Not explainable: `{field}` {why}.")
        for line in plan.explained:
            st.caption(f"Explained by the installation knob: {line}.")
        key = f"explain-{base.run_id}-{other.run_id}"
        c1, c2 = st.columns(2)
        trials, trials_error = typed_trials(c1.text_input("Trials", "3", key=f"{key}-trials"))
        if trials_error is not None:
            c1.error(trials_error)
            continue
        arms = 2 ** len(plan.knobs)
        c2.caption(
            f"{arms} arms × {trials} trials = {arms * trials} runs, each a fresh "
            "server on the same prompts."
        )
        try:
            check = check_explanation(settings, base, other, trials)
        except ConfigError as exc:
            st.error(f"{exc.field}: {exc.message}")
            continue
        gpu = (
            f" · about **{check.gpu_minutes:.0f} GPU-minutes** ({check.gpus_per_run} GPU per run)"
            if check.gpu_minutes is not None
            else ""
        )
        st.caption(f"Estimate: {check.estimate.rstrip('.')}{gpu}.")
        if check.answered_by:
            st.info(
                f"Experiment {check.answered_by} already varies exactly these knobs on the "
                "same engine and model: its page has each knob's effect over all its trials."
            )
            st.page_link(
                "pages/experiment.py",
                label="Open the experiment that already answers this",
                query_params={"experiment": check.answered_by},
                icon=":material/science:",
            )
        for field, why in check.problems.items():
            st.error(f"Cannot run on {check.where}: `{field}`: {why}")
        allowed = can_launch() and check.runnable
        if (
            st.button("Explain this difference", key=key, disabled=not allowed) and allowed
        ):  # never trust a disabled button alone
            try:
                exp_id, _ = submit_explanation(settings, base.run_id, other.run_id, trials)
            except ConfigError as exc:
                st.error(f"{exc.field}: {exc.message}")
            else:
                st.session_state[key + "-queued"] = (exp_id, trials)
        queued = st.session_state.get(key + "-queued")
        if queued:
            exp_id, n = queued
            # What was queued, in words: the ids alone do not say it.
            st.success(
                f"Queued experiment {exp_id}: {arms} arms × {n} trials = {arms * n} "
                f"runs over {', '.join(f'`{k}`' for k in plan.knobs)}. The worker "
                "starts them when the GPUs are free; the experiment page fills in "
                "as they finish."
            )
            st.page_link(
                "pages/experiment.py",
                label=f"Open experiment {exp_id}",
                query_params={"experiment": exp_id},
                icon=":material/science:",
            )
