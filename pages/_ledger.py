"""The memory ledger (core/analysis/ledger.py) as one stacked bar per arm, for Run, Compare
and Experiment: a run whose server stated no part gets one line, not an empty chart."""

from __future__ import annotations

from collections.abc import Mapping

import streamlit as st

from core.analysis.ledger import MemoryLedger
from core.views.figures_ledger import ledger_figure, ledger_parts
from pages._chart import chart


def ledger_section(
    ledgers: Mapping[str, MemoryLedger], colours: Mapping[str, str], key: str
) -> None:
    st.subheader("Memory ledger")
    stated = {a: lg for a, lg in ledgers.items() if any(ledger_parts(lg).values())}
    for arm in ledgers:
        if arm not in stated:
            st.caption(f"{arm}: no memory ledger (the server stated none, no GPU was sampled).")
    if stated:
        chart(ledger_figure(stated, colours), key=key)
