"""What an export or a report is about: a *selection* of runs (one run, a comparison of two
or more, or an experiment's runs with their arm and trial) and the one story told about it
(``core.analysis.card``: baseline, arm names, summary card, verdict). The tables
(``core.interop.export_tables``), the HTML report (``core.interop.export_html``) and the PNG charts
(``core.interop.export_png``) all start from a Selection, so they name, order and judge the runs
the same way as the portal's pages.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from core.analysis.card import Story, comparison_story, experiment_story, noise_note
from core.analysis.roles import arm_names, baseline_index
from core.analysis.runs import RunView, load_run, run_labels
from core.errors import ConfigError, ServeLabError
from core.experiments.design import load_experiment
from core.experiments.records import ExperimentRecord
from core.metric_info import verdict_metrics
from core.numbers import is_number, number_text, trial_text
from core.run_folder import find_runs, is_run_id
from core.settings import Settings
from core.views.figures import arm_colours

__all__ = [
    "ExportError",
    "Selection",
    "origin_of",
    "origin_text",
    "select",
    "selection_of",
    "verdict_lines",
]


class ExportError(ServeLabError):
    """An export could not be produced (for PNG: no working browser)."""


# --- what to export ---------------------------------------------------------------------------


@dataclass
class Selection:
    """The runs to export, in order (the baseline first for a comparison)."""

    views: list[RunView]
    kind: Literal["run", "comparison", "experiment"]
    name: str
    baseline: int = 0
    run_meta: dict[str, dict[str, Any]] = field(default_factory=dict)
    experiment: ExperimentRecord | None = None
    settings: Settings | None = None

    @property
    def labels(self) -> list[str]:
        """One key per run for the data tables: the run id."""
        return run_labels(self.views)

    @cached_property
    def names(self) -> list[str]:
        """One display name per run: what the report shows. An experiment's runs are named
        by the record's arm label and trial counted from 1 (``graphs on · trial 1``), so the
        report, the Experiment page and Compare spell an arm one way; otherwise
        ``core.analysis.roles.arm_names``."""
        if self.experiment is None:
            return arm_names(self.views)
        out = []
        for v in self.views:
            meta = self.run_meta.get(v.run_id, {})
            if "arm" not in meta:
                out.append(v.run_id)
                continue
            which = "closing" if meta.get("closing") else trial_text(meta.get("trial"))
            out.append(f"{meta['arm']} · {which}")
        return out

    @cached_property
    def colours(self) -> dict[str, str]:
        """Display name -> colour (``core.views.figures.arm_colours``). An experiment's arms
        take their colours in the record's arm order, baseline first, exactly as on the
        Experiment page (never in the shuffled order its runs happened to run in); the
        mapping also holds each arm label itself."""
        story = self.story
        if self.experiment is not None and story is not None:
            return arm_colours([*story.arms, *self.names], story.baseline)
        return arm_colours(self.names, self.names[self.baseline] if self.names else None)

    @cached_property
    def story(self) -> Story | None:
        """The one story (baseline, card, verdict) of a comparison or experiment."""
        if self.experiment is not None and self.settings is not None:
            return experiment_story(self.settings, self.experiment)
        if len(self.views) < 2:
            return None
        noise = noise_note(self.settings, self.views, self.views[self.baseline].spec.get("server"))
        return comparison_story(self.views, self.baseline, self.names, noise)


def _load_selected(
    settings: Settings, ids: Sequence[str]
) -> tuple[list[RunView], dict[str, dict[str, Any]], ExperimentRecord | None]:
    """The runs ``ids`` name (an experiment id: its runs, with arm and trial in the meta)."""
    views: list[RunView] = []
    meta: dict[str, dict[str, Any]] = {}
    experiment: ExperimentRecord | None = None
    for ident in ids:
        if not is_run_id(ident):
            raise ConfigError("RUN_ID", f"{ident[:60]!r} is not a run or experiment id")
        record = load_experiment(settings, ident) if ident.startswith("exp-") else None
        if record is not None:
            experiment = record if len(ids) == 1 else None
            for r in record.runs:
                found, _ = find_runs(settings.runs_dir, [r.run_id])
                if found:
                    views.append(load_run(found[0]))
                    meta[r.run_id] = {"experiment_id": ident, "arm": r.arm, "trial": r.trial}
                    if r.closing:  # the closing baseline run: no trial (core.analysis.drift)
                        meta[r.run_id]["closing"] = True
            continue
        found, _ = find_runs(settings.runs_dir, [ident])
        if not found:
            raise ConfigError(
                "RUN_ID", f"no run or experiment {ident}; `python -m core runs` lists runs"
            )
        views.append(load_run(found[0]))
    return views, meta, experiment


def select(settings: Settings, ids: Sequence[str], baseline: str | None = None) -> Selection:
    """Run ids (``RUN_ID``) and experiment ids (``exp-...``) -> a Selection. One run is a
    run export, several a comparison, one experiment id its runs with arm and trial."""
    if not ids:
        raise ConfigError("RUN_ID", "name at least one run (or an experiment exp-...)")
    views, meta, experiment = _load_selected(settings, ids)
    if not views:
        raise ConfigError("RUN_ID", f"{', '.join(ids)}: no runs to export")
    base = baseline_index(views)  # the control, unless told otherwise
    if baseline:
        ids_in = [v.run_id for v in views]
        if baseline not in ids_in:
            raise ConfigError("--baseline", f"{baseline} is not one of the exported runs")
        base = ids_in.index(baseline)
    if experiment is not None and not baseline:
        from core.experiments.design import baseline_arm

        arm = baseline_arm(experiment.spec)
        base = next(
            (i for i, v in enumerate(views) if meta.get(v.run_id, {}).get("arm") == arm), base
        )
    if experiment is not None:
        kind: Literal["run", "comparison", "experiment"] = "experiment"
        name = experiment.experiment_id
    elif len(views) == 1:
        kind, name = "run", views[0].run_id
    else:
        kind = "comparison"
        name = "compare-" + "-vs-".join(v.run_id for v in views[:3])
        if len(views) > 3:
            name += f"-and-{len(views) - 3}-more"
    return Selection(
        views=views,
        kind=kind,
        name=name[:150],
        baseline=base,
        run_meta=meta,
        experiment=experiment,
        settings=settings,
    )


def selection_of(
    views: Sequence[RunView], baseline: int | None = None, settings: Settings | None = None
) -> Selection:
    """A Selection of already-loaded views (the portal's pages); ``baseline`` None: the
    control (``core.analysis.roles.baseline_index``)."""
    views = list(views)
    kind: Literal["run", "comparison", "experiment"] = "run" if len(views) == 1 else "comparison"
    name = (
        views[0].run_id
        if len(views) == 1
        else "compare-" + "-vs-".join(v.run_id for v in views[:3])
    )
    return Selection(
        views=views,
        kind=kind,
        name=name[:150],
        baseline=baseline_index(views) if baseline is None else baseline,
        settings=settings,
    )


# --- origin -----------------------------------------------------------------------------------


def origin_of(view: RunView) -> dict[str, Any] | None:
    """The import block of an imported run; None for a run ServeLab launched."""
    if not view.imported:
        return None
    block = view.spec.get("import")
    return block if isinstance(block, dict) else {}


def origin_text(view: RunView) -> str:
    origin = origin_of(view)
    if origin is None:
        return "launched by ServeLab"
    return f"imported from {origin.get('source_file')} ({origin.get('format')})"


def verdict_lines(sel: Selection) -> list[str]:
    """The verdict of the selection: the story's (regressions first, then each arm against
    the baseline at the headline point), or a single run's headline metrics."""
    if sel.story is not None:
        return sel.story.verdict
    v = sel.views[0]
    last = v.points[-1] if v.points else None
    if last is None:
        return [f"Single run {v.run_id} ({v.status.state}): no benchmark points."]
    m = last.get("metrics") or {}
    parts = [f"{k} {number_text(m[k])}" for k in verdict_metrics() if is_number(m.get(k))]
    return [
        f"Single run {v.run_id} at {last.get('label')}: "
        + (", ".join(parts) or "no headline metric known")
        + "."
    ]
