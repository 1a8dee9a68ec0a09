"""Arms that run different engines (core/analysis/engines.py), for Compare and Experiment:
each arm's engine, version, own settings and engine defaults (its configuration, not a
confounder), and the flags that mean the same thing in each engine side by side."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import streamlit as st

from core.analysis.engines import arm_engines, engines_differ, same_meaning_flags
from core.analysis.runs import RunView


def engine_section(first: Mapping[str, RunView]) -> None:
    """Nothing unless the arms run more than one engine."""
    arms = {a: [v] for a, v in first.items()}
    if not engines_differ(arms):
        return
    st.subheader("Engines: each arm's configuration")
    st.caption(
        "The engine is the knob. What each arm set to suit its engine, and what its engine "
        "does by default, is that arm's configuration, not a confounder."
    )
    rows = []
    for e in arm_engines(arms):
        own = ", ".join(f"{k}={v}" for k, v in e.settings.items()) or "—"
        defaults = "; ".join(f"{k}: {v}" for k, v in e.defaults.items()) or "—"
        rows.append(
            {
                "arm": e.arm,
                "engine": e.title,
                "version": e.version or "—",
                "set for this arm": own,
                "engine defaults": defaults,
            }
        )
    st.table(pd.DataFrame(rows).set_index("arm"))
    st.markdown("**The same setting in each engine** (from each engine's declared flags)")
    flags = same_meaning_flags([e.engine for e in arm_engines(arms)])
    st.table(pd.DataFrame(flags).set_index("field"))
