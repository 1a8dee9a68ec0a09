"""Which KV pool an experiment's kv_fill points are sized from, fixed when it is queued.

Every arm must get the same load, so every arm is sized from the smallest arm's pool. The
pool is only known once a server of that configuration has started, so when an experiment
with kv_fill is queued each arm's pool is taken from the newest earlier run of the same server
configuration that reported one (the run folders: the source of truth), and for an arm with
none a short pool run is queued ahead of the experiment (its server started once, one request,
no warm-up). Every arm's plan then names the same runs in ``plan.kv_pool.runs``; the pipeline
takes the smallest of their pools (core/load/kv_fill.py ``smallest_pool``) after its own
start-up, so all arms and trials are sized alike whatever order they run in.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import ValidationError

from core.analysis.noise import fingerprint
from core.config import BenchmarkPlan, KvPool, Point, RunSpec, ServerConfig
from core.errors import StoreError
from core.experiments.design import ExperimentSpec, arm_tag, expand
from core.launch.host import detect_host
from core.run_folder import RunFolder, kv_pool_tokens
from core.settings import Settings

__all__ = ["PoolPlan", "known_pool_run", "plan_pools", "pool_run_spec", "same_server"]

# Fields of a server config that do not change its KV pool (where it listens, how long
# ServeLab waits for it).
_NOT_POOL = ("port", "startup_timeout_s")
# A machine as a fingerprint reads it (core.analysis.noise): its GPU models and CPU model.
Machine = tuple[tuple[str, ...], str | None]
# How many run folders (newest first) are read to find an earlier run of a configuration.
MAX_FOLDERS_READ = 2000


def same_server(a: ServerConfig, b: ServerConfig) -> bool:
    """Would these two configurations get the same KV pool on this host?"""
    da, db = a.model_dump(mode="json"), b.model_dump(mode="json")
    return all(da[k] == db[k] for k in da if k not in _NOT_POOL)


def _pool_of(folder: RunFolder, machine: Machine) -> int | None:
    """The run's KV pool, where it was measured on ``machine`` (its facts' GPUs and CPU)."""
    try:
        facts = folder.read("facts.json") if (folder.path / "facts.json").is_file() else {}
    except StoreError:
        return None
    return kv_pool_tokens(facts) if fingerprint(facts).machine == machine else None


def known_pool_run(settings: Settings, server: ServerConfig, machine: Machine) -> str | None:
    """The newest earlier run of ``server`` (same_server) on ``machine`` that reported a KV
    pool: a pool measured on other GPUs (an imported run, the shipped H200 demo on a laptop)
    would size this machine's load wrongly."""
    root = settings.runs_dir
    if not root.is_dir():
        return None
    for path in sorted(root.iterdir(), reverse=True)[:MAX_FOLDERS_READ]:
        if not (path / "spec.json").is_file():
            continue
        folder = RunFolder(path)
        try:
            theirs = ServerConfig.model_validate(folder.read("spec.json").get("server") or {})
        except (StoreError, ValidationError, AttributeError):
            continue
        if same_server(theirs, server) and _pool_of(folder, machine) is not None:
            return folder.run_id
    return None


def pool_run_spec(arm_spec: RunSpec, exp_id: str, arm: str) -> RunSpec:
    """A run that only starts the arm's server once, so its pool is known: one short
    request (the server must answer), no probe, no warm-up."""
    plan = BenchmarkPlan(
        points=(Point(concurrency=1, num_prompts=1, input_len=8, output_len=4),),
        seed=arm_spec.plan.seed,
        warmup_requests=0,
        probe=None,
        request_timeout_s=arm_spec.plan.request_timeout_s,
    )
    return RunSpec(
        server=arm_spec.server,
        plan=plan,
        tags=(f"kvpool-for:{exp_id}", arm_tag(arm)),
        note=f"the KV pool of arm {arm!r}, for the kv_fill points of experiment {exp_id}",
        placement=arm_spec.placement,
    )


@dataclass(frozen=True)
class PoolPlan:
    """What queueing a kv_fill experiment adds: the pool runs to queue first (arm, spec) and
    the experiment with ``plan.kv_pool`` naming one run per arm (a pool run's id is filled
    in once it is queued: ``with_runs``)."""

    experiment: ExperimentSpec
    known: dict[str, str]  # arm → an earlier run's id
    to_run: dict[str, RunSpec]  # arm → a pool run to queue

    def with_runs(self, queued: dict[str, str]) -> ExperimentSpec:
        runs = {**self.known, **queued}
        arms = tuple(a.label for a in self.experiment.arms)
        pool = KvPool(runs=tuple(runs[a] for a in arms), arms=arms)
        plan = self.experiment.base.plan.model_copy(update={"kv_pool": pool})
        return self.experiment.model_copy(
            update={"base": self.experiment.base.model_copy(update={"plan": plan})}
        )


def plan_pools(settings: Settings, exp: ExperimentSpec, exp_id: str) -> PoolPlan | None:
    """None when the experiment needs no pool (no kv_fill point, or plan.kv_pool given)."""
    planned = expand(exp, exp_id)
    if not any(p.kv_fill is not None for _, _, s in planned for p in s.plan.points):
        return None
    if any(s.plan.kv_pool is not None for _, _, s in planned):
        return None
    first: dict[str, RunSpec] = {}
    for arm, _trial, spec in planned:
        first.setdefault(arm, spec)
    known: dict[str, str] = {}
    to_run: dict[str, RunSpec] = {}
    host = detect_host(settings)
    for arm, spec in first.items():
        here = host.fingerprint(spec.server)  # None on a cluster: no node is known, reuse none
        rid = None if here is None else known_pool_run(settings, spec.server, here.machine)
        if rid is not None:
            known[arm] = rid
        else:
            to_run[arm] = pool_run_spec(spec, exp_id, arm)
    return PoolPlan(exp, known, to_run)
