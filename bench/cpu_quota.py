"""Run a command as on a slower host: every process it starts shares a CPU quota.

    python -m bench.cpu_quota 0.75 -- python -m bench.page_speed --repeats 5 --against BEFORE

0.75 = 75 ms of CPU per 100 ms for the command and all its children (the portal, chromium),
through the cgroup ``servelab-bench`` (v2 ``cpu.max``, or v1 ``cpu.cfs_quota_us``; needs
root). The hosts this project is measured on differ 2-4x from session to session
(docs/BENCHMARKS.md §7.6, §8.4): a quota at which older code reads its old figures again
tells whether a goal would hold on the slower host. CFS throttling stalls every process of
the group at once, so it slows fixed costs (Streamlit's own first paint) more than a slower
CPU would; compare the results only with each other.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

PERIOD_US = 100_000
CGROUP = "servelab-bench"


def enter_quota(cpus: float, root: Path = Path("/sys/fs/cgroup")) -> Path:
    """Put this process (and so whatever it execs) into a cgroup limited to ``cpus`` CPUs."""
    quota_us = int(cpus * PERIOD_US)
    if (root / "cgroup.controllers").exists():  # v2: one hierarchy
        group = root / CGROUP
        group.mkdir(exist_ok=True)
        (group / "cpu.max").write_text(f"{quota_us} {PERIOD_US}\n")
    else:  # v1: the cpu controller's own hierarchy
        group = root / "cpu" / CGROUP
        group.mkdir(exist_ok=True)
        (group / "cpu.cfs_period_us").write_text(f"{PERIOD_US}\n")
        (group / "cpu.cfs_quota_us").write_text(f"{quota_us}\n")
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    return group


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("cpus", type=float, help="CPUs the command may use in all, e.g. 0.75")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command's argv")
    a = ap.parse_args()
    argv = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not argv or a.cpus <= 0:
        ap.error("give a positive CPU count, then -- and the command")
    group = enter_quota(a.cpus)
    print(f"cpu_quota: {a.cpus:g} CPU for {argv[0]} ({group})", flush=True)
    os.execvp(argv[0], argv)


if __name__ == "__main__":
    main()
