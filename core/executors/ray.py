"""The Ray executor: queued runs go to an existing Ray cluster, one Ray actor per run.

``RayExecutor`` lives in the portal's worker thread (``core.executors.worker.Worker`` drives
it); the
actor and what else runs on a node are in ``core.executors.ray_node``:

1. **submit**: a queued run whose executor is ``ray`` becomes a detached, named actor
   ``RunHost`` (``servelab-run-<run_id>``, namespace ``servelab``) that asks for
   ``num_gpus`` = ``tp_size`` (0 for ``device=cpu`` and the endpoint engine), one CPU, and
   ``accelerator_type`` when the run names one. All queued Ray runs are submitted at once:
   Ray starts each actor when a node has the GPUs free, so runs go in parallel on different
   GPUs and never two on one GPU. The folder stays ``queued`` (phase ``waiting for Ray
   resources``) until the actor starts.
2. **run**: the actor, on its node, recreates the run folder (spec.json, status.json,
   secrets) in a scratch data folder and starts the same run process as the local executor,
   ``python -m core run --run-id ID --quiet`` (parent-death signal SIGTERM: if the actor
   dies, the run process stops its server). Ray sets ``CUDA_VISIBLE_DEVICES`` to the GPUs it
   granted, and the run process and its server inherit it. The actor records where it runs
   (``node_ip``, ``node_id``, ``node_name``, ``gpu_ids``, its worker pid).
3. **progress**: each tick polls the actor for the run's status.json and copies it into the
   local folder (remote pids renamed ``remote_pid`` / ``remote_server_pid``: they are not
   processes of this host), plus where it runs.
4. **end**: when the run process has exited, the actor returns the whole folder as a gzip
   tar; it is unpacked into ``data/runs/<run_id>/``, status.json and facts.json get the
   placement, the catalog indexes it, and the actor is killed (its GPUs are free again).
5. **cancel**: ``core.executors.queue.cancel`` writes the ``CANCEL`` file; the next tick asks
   the actor
   to cancel (``CANCEL`` in the scratch folder plus SIGTERM to the run process, which stops
   its server and records ``cancelled``); after ``CANCEL_GRACE_S`` the actor is killed.
6. **death**: when the actor dies (its worker process or node died), a small task pinned to
   the same node fetches whatever the run wrote (server log, points so far) when the node is
   still there, and the run is marked ``interrupted`` with ``Ray worker died: ...`` (a run
   that had already ended on its own keeps its result). Between two snapshots, the server
   log's last 8 KB is kept here too.
7. **portal restart**: the actors are detached and named, so the next worker re-attaches to
   them; one that is gone is handled as in 6, from the node and scratch folder the run's
   status.json recorded. A finished run nobody collects frees its GPUs after
   ``UNCOLLECTED_TTL_S`` (its actor exits; the folder stays on the node for that fetch).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import socket
import tarfile
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from core.config import RunSpec
from core.engines.registry import get_engine
from core.errors import ConfigError, StoreError
from core.executors.base import end_unfinished, ray_address, run_env, save_ray_nodes
from core.executors.ray_node import LOG_TAIL_BYTES, UNCOLLECTED_TTL_S, RunHost, salvage_folder
from core.run_folder import FINAL_STATES, EndState, RunFolder, RunStatus, utc_now
from core.settings import Settings, environ_values

__all__ = ["NAMESPACE", "RayExecutor", "actor_name", "num_gpus_for"]

log = logging.getLogger(__name__)

NAMESPACE = "servelab"
CANCEL_GRACE_S = 30.0  # after asking the run to cancel, kill its actor if it is still there
SALVAGE_TIMEOUT_S = 30.0  # fetching a dead actor's folder from its node
POLL_TIMEOUT_S = 120.0  # an actor that does not answer a poll for this long is taken as dead
RECONNECT_S = 15.0  # after a failed connection attempt
UNAVAILABLE_GRACE_S = 60.0  # an actor Ray calls "unavailable" this long is taken as dead
# What every run on a node is given from here, besides settings.ray_forward_env.
_FORWARD = ("PYTHONPATH", "HF_HOME", "HF_HUB_OFFLINE")


def actor_name(run_id: str) -> str:
    return f"servelab-run-{run_id}"


def num_gpus_for(spec: RunSpec) -> int:
    """GPUs a run asks Ray for: its tensor-parallel size; none on CPU or for an endpoint."""
    server = spec.server
    if not get_engine(server.engine).launched or server.device in ("cpu", "mps"):
        return 0
    return server.tp_size


def _unpack(data: bytes, folder: RunFolder) -> dict[str, Any]:
    """Unpack a returned run folder over ``folder``; return its status.json (not copied:
    the caller merges it)."""
    with tempfile.TemporaryDirectory(dir=folder.path.parent, prefix=".unpack-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
            tar.extractall(tmp, filter="data")
        src = Path(tmp)
        status = RunFolder(src).status_or_empty().as_json()
        for path in sorted(src.rglob("*")):
            if not path.is_file() or path.name == "status.json":
                continue
            dest = folder.path / path.relative_to(src)
            dest.parent.mkdir(parents=True, exist_ok=True)
            path.replace(dest)
    return status


def _remote_status(status: dict[str, Any]) -> dict[str, Any]:
    """A status.json from a node, fit for this host: its pids are not processes here."""
    out = {k: v for k, v in status.items() if k not in ("pid", "server_pid", "run_id")}
    for key in ("pid", "server_pid"):
        if status.get(key) is not None:
            out[f"remote_{key}"] = status[key]
    return out


def _short(exc: BaseException) -> str:
    text = str(exc).strip() or type(exc).__name__
    text = " ".join(ln.strip() for ln in text.splitlines() if ln.strip())
    # Ray's actor errors: keep why it died and how, not the actor's ids and advice.
    m = re.search(r"(The actor (?:is dead|died) because [^.]*\.)", text)
    if m:
        how = re.search(r"Worker exit type: \w+|the actor's node was terminated[^.;]*", text)
        return m.group(1) + (f" ({how.group(0)[:160]})" if how else "")
    return text.split(" lease_id=")[0][:400]


class _NotConnected(Exception):
    """Not connected to the Ray cluster (yet): the message says why."""


@dataclass
class _Remote:
    run_id: str
    actor: Any
    info_ref: Any = None
    placement: dict[str, Any] | None = None
    poll_ref: Any = None
    poll_sent: float = 0.0
    collect_ref: Any = None
    cancel_sent: float | None = None
    salvage_ref: Any = None
    salvage_deadline: float = 0.0
    death: str = ""
    unavailable_since: float = 0.0
    start_error: str = ""
    log_tail: str = ""
    hint: dict[str, Any] = field(default_factory=dict)  # placement known from status.json
    last: dict[str, Any] = field(default_factory=dict)


class RayExecutor:
    """Runs ``executor == "ray"`` folders on a Ray cluster. Called from one thread only
    (the worker's); ``running()`` may be called from any."""

    name: ClassVar[str] = "ray"
    runs_here: ClassVar[bool] = False

    def __init__(self, settings: Settings, **_options: Any) -> None:
        """``_options``: the local executor's (GPU sets and settling): Ray decides those."""
        self.settings = settings
        self._remotes: dict[str, _Remote] = {}
        self._lock = threading.Lock()
        self._connected = False
        self._we_connected = False
        self._connector: threading.Thread | None = None
        self._connect_error = ""
        self._retry_at = 0.0
        self._address: str | None = None  # the address of the last connection attempt
        self._errors: list[str] = []
        self.error = ""  # this tick's problems, for the worker's snapshot

    # --- connection -------------------------------------------------------------------
    def _connect(self) -> Any:
        """The ray module once connected. Connecting happens in a thread of its own (an
        unreachable cluster makes ``ray.init`` wait for minutes, and the worker thread must
        keep running local runs): until it is done this raises ``_NotConnected``."""
        import ray

        address = ray_address(self.settings)
        if (
            self._connected
            and self._we_connected
            and address != self._address
            and not self._remotes
        ):  # the address was changed in the portal
            with contextlib.suppress(Exception):
                ray.shutdown()
            self._connected = self._we_connected = False
        if self._connected:
            return ray
        if ray.is_initialized():
            self._connected = True
            return ray
        if not address:
            raise ConfigError(
                "SERVELAB_RAY_ADDRESS",
                "the ray executor needs the address of a Ray cluster, e.g. 10.0.0.5:6379",
            )
        busy = self._connector is not None and self._connector.is_alive()
        if not busy and address != self._address:
            self._retry_at = 0.0  # a new address is tried at once
        if not busy and time.monotonic() >= self._retry_at:
            self._connector = threading.Thread(
                target=self._connect_now,
                args=(ray, address),
                name="servelab-ray-connect",
                daemon=True,
            )
            self._connector.start()
            self._connector.join(2.0)  # a reachable cluster answers within this
            if self._connected:
                return ray
        raise _NotConnected(self._connect_error or f"connecting to the Ray cluster at {address}")

    def _connect_now(self, ray: Any, address: str) -> None:
        self._address = address
        try:
            host, sep, port = address.rpartition(":")
            if sep and port.isdigit() and "://" not in address:
                # Fail fast on a wrong address instead of ray.init's minutes of retries.
                socket.create_connection((host, int(port)), timeout=5).close()
            pythonpath = [str(self.settings.ray_repo)]
            if here := environ_values(["PYTHONPATH"]).get("PYTHONPATH"):
                pythonpath.append(here)
            ray.init(
                address=address,
                namespace=NAMESPACE,
                log_to_driver=False,
                configure_logging=False,
                runtime_env={"env_vars": {"PYTHONPATH": os.pathsep.join(pythonpath)}},
            )
        except Exception as exc:
            self._connect_error = f"cannot connect: {_short(exc)}"
            self._retry_at = time.monotonic() + RECONNECT_S
            return
        self._connect_error = ""
        self._we_connected = self._connected = True
        with contextlib.suppress(Exception):  # a hint for launch checks, never a failure
            save_ray_nodes(self.settings, address, ray.nodes())

    def close(self) -> None:
        """Drop the connection (the actors keep running: a later dispatcher re-attaches)."""
        if self._we_connected:
            import ray

            with contextlib.suppress(Exception):
                ray.shutdown()
        self._connected = self._we_connected = False
        with self._lock:
            self._remotes.clear()

    # --- what the worker calls ---------------------------------------------------------
    def running(self) -> list[dict[str, Any]]:
        with self._lock:
            out = []
            for r in self._remotes.values():
                if r.placement is None:
                    continue  # still waiting for Ray resources: the worker lists it as queued
                out.append(
                    {
                        "run_id": r.run_id,
                        "gpus": r.placement.get("gpu_ids") or [],
                        "pid": None,
                        "attached": False,
                        "executor": "ray",
                        "node": r.placement.get("node_ip"),
                    }
                )
            return out

    def tracks(self, run_id: str) -> bool:
        with self._lock:
            return run_id in self._remotes

    def admit(self, queued: Sequence[RunFolder]) -> tuple[list[str], bool]:
        """Submit every queued folder: Ray starts each actor when a node has its GPUs free,
        and the folder stays queued until then."""
        changed = False
        for folder in queued:
            changed |= self.consider(folder, folder.status_or_empty())
        return [f.run_id for f in queued if f.status_or_empty().state == "queued"], changed

    def adopt(self, folder: RunFolder, status: RunStatus) -> bool:
        return self.consider(folder, status)

    def poll(self) -> bool:
        return self.tick()

    def describe(self, folder: RunFolder, status: RunStatus) -> dict[str, Any]:
        return {
            "run_id": folder.run_id,
            "gpus": status.gpu_ids or [],
            "pid": None,
            "attached": True,
            "executor": self.name,
            "node": status.node_ip,
        }

    @classmethod
    def cancel_running(cls, settings: Settings, folder: RunFolder, status: RunStatus) -> str:
        """The worker's next poll passes the CANCEL file on to the actor."""
        return (
            f"cancel requested for {folder.run_id}: its Ray run on "
            f"{status.node_ip or 'a Ray node'} stops the server and records the result"
        )

    @classmethod
    def recover(cls, settings: Settings, folders: Sequence[RunFolder]) -> list[str]:
        """Nothing here: a Ray run's process is on its node; the worker's executor
        re-attaches to its actor (or ends the run when the actor is gone)."""
        return []

    def consider(self, folder: RunFolder, status: RunStatus) -> bool:
        """An active folder that belongs to Ray and is not tracked yet: submit it (queued)
        or re-attach to its actor (after a portal restart). True when the folder changed."""
        if self.tracks(folder.run_id):
            return False
        try:
            ray = self._connect()
        except _NotConnected as exc:
            problem = f"Ray cluster {ray_address(self.settings)}: {exc}"
            if not exc.args[0].startswith("connecting") and problem not in self._errors:
                self._errors.append(problem)
            return False
        except Exception as exc:
            problem = f"Ray cluster {ray_address(self.settings)}: {_short(exc)}"
            if problem not in self._errors:
                self._errors.append(problem)
            return False
        if status.extra("ray_actor"):
            return self._reattach(ray, folder, status)
        if status.state == "queued":
            return self._submit(ray, folder)
        return False

    def tick(self) -> bool:
        """Advance every tracked run; True when some folder changed."""
        changed = False
        for remote in list(self._remotes.values()):
            try:
                changed |= self._advance(remote)
            except Exception as exc:  # keep the others going; say what went wrong
                log.exception("ray run %s", remote.run_id)
                self._errors.append(f"{remote.run_id}: {type(exc).__name__}: {_short(exc)}")
        self.error, self._errors = "; ".join(self._errors), []
        return changed

    # --- steps --------------------------------------------------------------------------
    def _folder(self, run_id: str) -> RunFolder:
        return RunFolder(self.settings.runs_dir / run_id)

    def _write(self, folder: RunFolder, **changes: Any) -> bool:
        """Update status.json unless the run already has a final state (a cancel won)."""
        with folder.transition():
            if folder.read_status().final:
                return False
            folder.update_status(**changes)
            return True

    def _end(self, folder: RunFolder, state: EndState, reason: str, **extra: Any) -> bool:
        """End the run unless it already has a final state (a cancel won)."""
        with folder.transition():
            if folder.read_status().final:
                return False
            folder.end(state, reason, **extra)
            return True

    def _forwarded_env(self) -> dict[str, str]:
        s = self.settings
        # The node's run uses its own scratch data folder (RunHost sets it).
        env = {k: v for k, v in run_env(s).items() if k != "SERVELAB_DATA_DIR"}
        return {**environ_values((*_FORWARD, *s.ray_forward_env)), **env}

    def _submit(self, ray: Any, folder: RunFolder) -> bool:
        rid = folder.run_id
        try:
            spec = folder.spec()
            gpus = num_gpus_for(spec)
            problem = self._unplaceable(ray, spec, gpus)
        except Exception as exc:
            problem = f"cannot read its spec.json: {_short(exc)}"
        if problem:
            self._end(folder, "failed", problem, executor=self.name)
            return True
        options: dict[str, Any] = {
            "name": actor_name(rid),
            "namespace": NAMESPACE,
            "lifetime": "detached",
            "num_gpus": gpus,
            "num_cpus": 1,
            "max_restarts": 0,
            "max_concurrency": 4,
        }
        if spec.placement.accelerator_type:
            options["accelerator_type"] = spec.placement.accelerator_type
        with folder.transition():
            if folder.read_status().state != "queued":
                return False
            if folder.cancel_requested:
                folder.end("cancelled", "cancelled before it started")
                return True
            files = {
                name: (folder.path / name).read_bytes()
                for name in ("spec.json", "status.json", ".secrets.json")
                if (folder.path / name).is_file()
            }
            try:
                actor = (
                    ray.remote(RunHost)
                    .options(**options)
                    .remote(rid, files, self._forwarded_env(), str(self.settings.ray_repo))
                )
            except ValueError:  # its name is taken: a portal that died right after making it
                actor = ray.get_actor(actor_name(rid), namespace=NAMESPACE)
            folder.update_status(
                executor=self.name,
                ray_actor=actor_name(rid),
                phase="waiting for Ray resources",
                ray_request={"num_gpus": gpus, "accelerator_type": spec.placement.accelerator_type},
            )
        with self._lock:
            self._remotes[rid] = _Remote(rid, actor, info_ref=actor.info.remote())
        log.info("run %s submitted to Ray (%d GPU(s))", rid, gpus)
        return True

    def _unplaceable(self, ray: Any, spec: RunSpec, gpus: int) -> str:
        if spec.server.device.startswith("cuda:"):
            return (
                "server.device names a GPU index; on Ray, Ray chooses the GPUs "
                "(it sets CUDA_VISIBLE_DEVICES): use auto or cuda"
            )
        live = ray.nodes()
        save_ray_nodes(self.settings, self._address or "", live)
        nodes = [n.get("Resources") or {} for n in live if n.get("Alive")]
        accel = spec.placement.accelerator_type
        fits = [
            r
            for r in nodes
            if r.get("GPU", 0) >= gpus and (not accel or f"accelerator_type:{accel}" in r)
        ]
        if not fits:
            most = max((int(r.get("GPU", 0)) for r in nodes), default=0)
            what = f"{gpus} GPU(s)" + (f" of type {accel}" if accel else "")
            return (
                f"no node of the Ray cluster has {what} (the largest has {most}); "
                "lower tp_size or add a node"
            )
        return ""

    def _reattach(self, ray: Any, folder: RunFolder, status: RunStatus) -> bool:
        rid = folder.run_id
        # Where it ran, as this folder last heard: enough to fetch the folder from its node
        # if the actor is gone.
        hint = {
            k: getattr(status, k)
            for k in ("node_ip", "node_id", "node_name", "gpu_ids")
            if getattr(status, k) is not None
        }
        if status.extra("ray_scratch"):
            hint.update(executor=self.name, scratch=status.extra("ray_scratch"))
        try:
            actor = ray.get_actor(status.extra("ray_actor"), namespace=NAMESPACE)
        except Exception:
            why = (
                "its Ray actor is gone (the cluster restarted, its node died, or nobody "
                f"collected the run for {UNCOLLECTED_TTL_S / 3600:.0f} h)"
            )
            if not hint.get("scratch"):
                return self._finish_dead(folder, why)
            r = _Remote(rid, None, hint=hint)
            with self._lock:
                self._remotes[rid] = r
            return self._died(ray, r, folder, why)
        with self._lock:
            self._remotes[rid] = _Remote(rid, actor, info_ref=actor.info.remote(), hint=hint)
        return False

    def _finish_dead(self, folder: RunFolder, why: str) -> bool:
        with folder.transition():
            if folder.read_status().final:
                return False
            end_unfinished(folder, why)
            return True

    def _ready(self, ray: Any, ref: Any) -> bool:
        done, _ = ray.wait([ref], timeout=0)
        return bool(done)

    def _advance(self, r: _Remote) -> bool:
        """One look at a remote run: a cancel passed on, its placement, a poll, its folder
        collected; True when the folder changed in a way the catalog must see."""
        ray = self._connect()
        folder = self._folder(r.run_id)
        if r.salvage_ref is not None:
            return self._advance_salvage(ray, r, folder)
        if folder.read_status().final and r.collect_ref is None:
            # Cancelled while waiting for resources (core.executors.queue.cancel), or deleted.
            self._drop(ray, r)
            return False
        ended = self._pass_cancel(ray, r, folder)
        if ended is not None:
            return ended
        try:
            answer = self._ask(ray, r, folder)
        except ray.exceptions.ActorUnavailableError as exc:
            return self._unavailable(ray, r, folder, exc)
        except ray.exceptions.RayError as exc:
            return self._died(ray, r, folder, _short(exc))
        if isinstance(answer, bool):
            return answer
        self._take_poll(r, folder, answer)
        return False

    def _pass_cancel(self, ray: Any, r: _Remote, folder: RunFolder) -> bool | None:
        """A requested cancel passed to the actor (or the run ended at once, while it still
        waited for resources), then its grace kept; None while the run goes on."""
        if folder.cancel_requested and r.cancel_sent is None:
            r.cancel_sent = time.monotonic()
            if r.placement is None and not self._ready(ray, r.info_ref):
                self._drop(ray, r)
                self._end(
                    folder,
                    "cancelled",
                    "cancelled before it started (it was waiting for Ray resources)",
                )
                return True
            r.actor.cancel.remote()
        elif (
            r.cancel_sent is not None
            and r.collect_ref is None
            and time.monotonic() - r.cancel_sent > CANCEL_GRACE_S
        ):
            ray.kill(r.actor, no_restart=True)
            return self._died(
                ray, r, folder, f"killed {CANCEL_GRACE_S:.0f} s after the cancel was sent"
            )
        return None

    def _ask(self, ray: Any, r: _Remote, folder: RunFolder) -> bool | dict[str, Any]:
        """The actor's next answer: its placement, its folder, or a poll's snapshot (the
        dict); a bool when there is none to read yet (or the run changed: True)."""
        if r.placement is None:
            if not self._ready(ray, r.info_ref):
                return False
            self._placed(ray, r, folder, ray.get(r.info_ref))
            return True
        if r.collect_ref is not None:
            if not self._ready(ray, r.collect_ref):
                return False
            self._finish(ray, r, folder, ray.get(r.collect_ref))
            return True
        if r.poll_ref is None:
            r.poll_ref, r.poll_sent = r.actor.poll.remote(), time.monotonic()
            return False
        if not self._ready(ray, r.poll_ref):
            if time.monotonic() - r.poll_sent > POLL_TIMEOUT_S:
                ray.kill(r.actor, no_restart=True)
                return self._died(
                    ray, r, folder, f"its actor did not answer for {POLL_TIMEOUT_S:.0f} s"
                )
            return False
        snap: dict[str, Any] = ray.get(r.poll_ref)
        r.poll_ref = None
        r.unavailable_since = 0.0
        return snap

    def _placed(self, ray: Any, r: _Remote, folder: RunFolder, p: dict[str, Any]) -> None:
        """The run started on a node: where, in its status."""
        r.placement = p
        # The address the node joined the cluster with (a node may have several).
        p["node_ip"] = (
            next(
                (
                    n.get("NodeManagerAddress")
                    for n in ray.nodes()
                    if n.get("NodeID") == p["node_id"]
                ),
                None,
            )
            or p["node_ip"]
        )
        self._write(
            folder,
            state="running",
            phase="starting",
            executor=self.name,
            started_at=folder.read_status().started_at or utc_now(),
            node_ip=p["node_ip"],
            node_id=p["node_id"],
            node_name=p["node_name"],
            gpu_ids=p["gpu_ids"],
            ray_worker_pid=p["ray_worker_pid"],
            remote_pid=p.get("run_pid"),
            ray_scratch=p["scratch"],
        )
        log.info("run %s started on %s, GPUs %s", r.run_id, p["node_ip"], p["gpu_ids"])

    def _unavailable(self, ray: Any, r: _Remote, folder: RunFolder, exc: Exception) -> bool:
        """Unreachable right now (a network blip, or a node that is dying): ask again until
        Ray says the actor is dead, or for UNAVAILABLE_GRACE_S."""
        r.unavailable_since = r.unavailable_since or time.monotonic()
        if time.monotonic() - r.unavailable_since < UNAVAILABLE_GRACE_S:
            # A failed reference keeps its error: ask again with a new call.
            r.poll_ref = None
            if r.placement is None:
                r.info_ref = r.actor.info.remote()
            elif r.collect_ref is not None:
                r.collect_ref = r.actor.collect.remote()
            return False
        return self._died(ray, r, folder, _short(exc))

    def _take_poll(self, r: _Remote, folder: RunFolder, snap: dict[str, Any]) -> None:
        """A poll's snapshot into the local folder: the node's status (never a final state:
        only the unpacked folder ends a run), the server log's tail; at the run process's
        exit, the folder asked for."""
        status = _remote_status(snap.get("status") or {})
        if status.get("state") != "running":
            # Only the unpacked folder ends a run here: a final state is written once its
            # files are in place; "queued" is the moment before the run process starts.
            for key in ("state", "finished_at", "reason", "duration_s"):
                status.pop(key, None)
        if status and status != r.last:
            r.last = status
            self._write(folder, **status)  # progress: not a change the catalog must see now
        tail = str(snap.get("log_tail") or "")
        if tail and tail != r.log_tail:
            # The server log's last lines, for the Run page and in case the node dies; the
            # whole log replaces this file when the folder comes back.
            r.log_tail = tail
            with contextlib.suppress(OSError):
                tmp = folder.log_path.with_name(".server.log.tail")
                tmp.write_text(
                    f"[servelab: the last {LOG_TAIL_BYTES // 1024} KB of the "
                    f"server log on Ray node {(r.placement or {}).get('node_ip')}; "
                    "the whole log comes back when the run ends]\n" + tail
                )
                tmp.replace(folder.log_path)
        if snap.get("exit_code") is not None:
            r.start_error = str(snap.get("error") or "")
            r.collect_ref = r.actor.collect.remote()

    def _finish(self, ray: Any, r: _Remote, folder: RunFolder, data: bytes) -> None:
        node = (r.placement or {}).get("node_ip")
        problem = ""
        try:
            remote = _unpack(data, folder)
            if not remote:
                problem = "the folder that came back has no status.json"
        except (OSError, tarfile.TarError, StoreError) as exc:
            remote, problem = {}, f"its folder could not be unpacked here: {exc}"
        if problem:  # the scratch folder stays on the node for a look by hand
            self._drop(ray, r)
            self._end(folder, "failed", f"the run ended on Ray node {node} but {problem}")
            return
        with contextlib.suppress(Exception):  # unpacked here: its scratch folder can go
            ray.get(r.actor.cleanup.remote(), timeout=10)
        self._drop(ray, r)  # its GPUs are free again
        self._record_final(folder, r, remote)

    def _record_final(
        self, folder: RunFolder, r: _Remote, remote: dict[str, Any], death: str = ""
    ) -> None:
        where = r.placement or r.hint
        p = {
            k: v
            for k, v in where.items()
            if k
            in ("executor", "node_ip", "node_id", "node_name", "gpu_ids", "cuda_visible_devices")
        }
        with contextlib.suppress(StoreError):
            facts = folder.read("facts.json")
            if isinstance(facts, dict):
                folder.write("facts.json", {**facts, **p})
            folder.write("placement.json", {**where, **p})
        status = _remote_status(remote)
        if death and status.get("state") in ("succeeded", "failed", "invalid"):
            # The run had ended on its own before its actor went: its result stands.
            status["ray_note"] = f"its folder was fetched from its node after: {death}"
            death = ""
        record = {**status, **p, "executor": self.name}
        if death or status.get("state") not in FINAL_STATES:
            # It stopped without recording its end (or its actor died first): end it here,
            # with what it recorded so far.
            why = (
                death
                or r.start_error
                or ("its run process ended without recording a final state (see runner.log)")
            )
            for key in ("state", "reason", "phase", "progress"):
                record.pop(key, None)
            with folder.transition():
                if not folder.read_status().final:
                    end_unfinished(
                        folder,
                        f"Ray worker died: {why}" if death else why,
                        step_why=why,
                        tail="; server log and results so far kept"
                        if folder.log_path.exists()
                        else "",
                        **record,
                    )
        else:  # the run's own end, as it recorded it on the node
            self._write(folder, **record)
        from core.store import Catalog

        try:
            Catalog(self.settings.catalog_path, self.settings.runs_dir).index_run(folder)
        except StoreError as exc:
            log.warning("run %s: not indexed: %s", r.run_id, exc)

    def _died(self, ray: Any, r: _Remote, folder: RunFolder, why: str) -> bool:
        """The actor is gone: fetch what its node still has, then mark the run."""
        r.death = why
        r.poll_ref = r.collect_ref = None
        node_id = (r.placement or r.hint).get("node_id")
        scratch = (r.placement or r.hint).get("scratch")
        if node_id and scratch:
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            task = ray.remote(salvage_folder).options(
                num_cpus=0,
                max_retries=0,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            )
            r.salvage_ref = task.remote(scratch)
            r.salvage_deadline = time.monotonic() + SALVAGE_TIMEOUT_S
            self._write(folder, phase="fetching what the dead Ray worker left")
            return True
        self._drop(ray, r)
        self._record_final(folder, r, folder.status_or_empty().as_json(), death=why)
        return True

    def _advance_salvage(self, ray: Any, r: _Remote, folder: RunFolder) -> bool:
        data: bytes | None = None
        note = ""
        if self._ready(ray, r.salvage_ref):
            try:
                data = ray.get(r.salvage_ref)
            except Exception as exc:
                note = f"; its folder could not be fetched from the node: {_short(exc)}"
        elif time.monotonic() < r.salvage_deadline:
            return False
        else:
            ray.cancel(r.salvage_ref, force=True)
            note = "; its node did not answer, so its folder stays there"
        self._drop(ray, r)
        remote = folder.status_or_empty().as_json()
        if data:
            try:
                remote = _unpack(data, folder) or remote
            except (OSError, tarfile.TarError, StoreError) as exc:
                note = f"; its folder could not be unpacked: {exc}"
        self._record_final(folder, r, remote, death=r.death + note)
        return True

    def _drop(self, ray: Any, r: _Remote) -> None:
        with contextlib.suppress(Exception):
            ray.kill(r.actor, no_restart=True)
        with self._lock:
            self._remotes.pop(r.run_id, None)
