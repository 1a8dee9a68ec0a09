"""An engine-version change in History, read as its experiment reads it.

A series holds the runs of every installation (the version is a fact, not part of its key),
so an experiment whose arms differ only in ``server.engine_install`` may have measured the
very change a History page shows. Where one did, History quotes that experiment's own
story (``core.analysis.card.experiment_story``: the same card rows, words and family as its
Experiment page) rather than set a single run against another installation's band, so the
two pages can never disagree.
"""

from __future__ import annotations

from collections.abc import Collection

from core.analysis.card import experiment_story, regressions_paragraph
from core.experiments.design import list_experiments
from core.experiments.records import ExperimentRecord
from core.metric_info import verdict_metrics
from core.settings import Settings

__all__ = ["version_experiment", "version_reading"]

INSTALL_FIELD = "server.engine_install"


def version_experiment(settings: Settings, run_ids: Collection[str]) -> ExperimentRecord | None:
    """The newest experiment over an engine-installation change (an arm's changes name
    ``server.engine_install``) that ran any of ``run_ids``; None when none did."""
    wanted = set(run_ids)
    for record in list_experiments(settings):
        arms = record.spec.get("arms") or []
        over_versions = any(INSTALL_FIELD in (a.get("changes") or {}) for a in arms)
        if over_versions and wanted & set(record.run_ids):
            return record
    return None


def version_reading(settings: Settings, run_ids: Collection[str]) -> list[str]:
    """The version change in the words of its experiment: every headline metric at every
    point with its interval and word, then its Regressions paragraph (if any) and its
    family; [] without such an experiment."""
    record = version_experiment(settings, run_ids)
    if record is None:
        return []
    story = experiment_story(settings, record)
    rows = [r for r in story.card if r.metric in verdict_metrics() and r.concurrency is not None]
    if not rows:
        return []
    arm = rows[0].arm
    parts = [f"{r.name} {r.where} {r.change_text()}, {r.word_text()}" for r in rows]
    head = (
        f"The version change ({arm} vs {story.baseline}) as experiment {record.experiment_id} "
        f"reads it, over its {len(record.runs)} runs: "
    )
    family = story.family
    return [head + "; ".join(parts) + ".", *regressions_paragraph(story.card)] + (
        [family] if family else []
    )
