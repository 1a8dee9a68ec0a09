"""The DuckDB catalog: an index of the run folders, rebuildable from them.

DuckDB lets one process hold a database file for writing, and a second
process's open fails at once (even read-only). ServeLab therefore never keeps the
catalog open: every operation takes an advisory file lock
(``servelab.duckdb.lock``), opens the file, does its work in milliseconds and
closes it. The run processes, the CLI and the portal all go through this module,
so they queue on the lock instead of failing. Run processes write only their own
folder while they measure and index themselves at the end; ``sync`` picks up any
folder the catalog has not seen (or has seen in an older state), and ``reindex``
rebuilds the catalog from scratch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb

from core.errors import StoreError
from core.run_folder import RunFolder

__all__ = ["Catalog"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    created_at VARCHAR,
    started_at VARCHAR,
    finished_at VARCHAR,
    state VARCHAR,
    phase VARCHAR,
    reason VARCHAR,
    engine VARCHAR,
    engine_version VARCHAR,
    model VARCHAR,
    device VARCHAR,
    cuda_graphs BOOLEAN,
    tp_size INTEGER,
    mem_fraction_static DOUBLE,
    tags VARCHAR[],
    duration_s DOUBLE,
    kv_cache_tokens BIGINT,
    output_throughput DOUBLE,
    median_ttft_ms DOUBLE,
    median_itl_ms DOUBLE,
    error_rate DOUBLE,
    spec_json VARCHAR,
    facts_json VARCHAR,
    status_mtime DOUBLE
);
CREATE TABLE IF NOT EXISTS points (
    run_id VARCHAR,
    point_index INTEGER,
    label VARCHAR,
    concurrency INTEGER,
    request_rate DOUBLE,
    input_len INTEGER,
    output_len INTEGER,
    output_throughput DOUBLE,
    median_ttft_ms DOUBLE,
    median_itl_ms DOUBLE,
    median_tpot_ms DOUBLE,
    median_e2e_ms DOUBLE,
    error_rate DOUBLE,
    metrics_json VARCHAR,
    PRIMARY KEY (run_id, point_index)
);
"""

LOCK_TIMEOUT_S = 30.0


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) else None


class Catalog:
    """Short-lived, lock-serialised access to ``servelab.duckdb``."""

    def __init__(self, path: Path, runs_dir: Path) -> None:
        self.path = path
        self.runs_dir = runs_dir
        self.lock_path = path.with_name(path.name + ".lock")

    @contextlib.contextmanager
    def connect(self) -> Iterator[duckdb.DuckDBPyConnection]:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lock = self.lock_path.open("a")
        except OSError as exc:
            raise StoreError(f"data folder not writable ({self.path.parent}): "
                             f"{exc.strerror or exc}; fix its permissions or set "
                             "SERVELAB_DATA_DIR") from exc
        with lock:
            deadline = time.monotonic() + LOCK_TIMEOUT_S
            while True:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise StoreError(f"catalog busy for {LOCK_TIMEOUT_S:.0f} s "
                                         f"(lock {self.lock_path})") from None
                    time.sleep(0.02)
            try:
                con = duckdb.connect(str(self.path))
            except duckdb.Error as exc:
                raise StoreError(f"cannot open the catalog {self.path.name}: {exc}. "
                                 "Another program may hold it open; close it, or run "
                                 "`python -m core reindex` to rebuild it from the run "
                                 "folders") from exc
            try:
                con.execute(_SCHEMA)
                yield con
            finally:
                con.close()

    # --- writing -------------------------------------------------------------
    def index_run(self, folder: RunFolder) -> None:
        with self.connect() as con:
            self._index(con, folder)

    def _index(self, con: duckdb.DuckDBPyConnection, folder: RunFolder) -> None:
        spec = folder.read("spec.json") or {}
        status = folder.status()
        facts = folder.read("facts.json") or {}
        result = folder.read("result.json") or {}
        server = spec.get("server", {})
        head = result.get("headline", {})
        try:
            mtime = (folder.path / "status.json").stat().st_mtime
        except OSError:
            mtime = 0.0
        con.execute("DELETE FROM runs WHERE run_id = ?", [folder.run_id])
        con.execute("DELETE FROM points WHERE run_id = ?", [folder.run_id])
        con.execute(
            "INSERT INTO runs VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
            [
                folder.run_id, spec.get("created_at"), status.get("started_at"),
                status.get("finished_at"), status.get("state", "unknown"), status.get("phase"),
                status.get("reason"), server.get("engine"), facts.get("engine_version"),
                server.get("model"), server.get("device"), server.get("cuda_graphs"),
                server.get("tp_size"), server.get("mem_fraction_static"),
                list(spec.get("tags", [])), _num(status.get("duration_s")),
                facts.get("kv_cache_tokens"), _num(head.get("output_throughput")),
                _num(head.get("median_ttft_ms")), _num(head.get("median_itl_ms")),
                _num(head.get("error_rate")), json.dumps(spec), json.dumps(facts, default=str),
                mtime,
            ],
        )
        for s in folder.point_summaries():
            p, m = s.get("point", {}), s.get("metrics", {})
            rate = p.get("request_rate")
            con.execute(
                "INSERT INTO points VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                [
                    folder.run_id, s.get("index"), s.get("label"), p.get("concurrency"),
                    float("inf") if rate in ("inf", "Infinity") else _num(rate),
                    p.get("input_len"), p.get("output_len"), _num(m.get("output_throughput")),
                    _num(m.get("median_ttft_ms")), _num(m.get("median_itl_ms")),
                    _num(m.get("median_tpot_ms")), _num(m.get("median_e2e_ms")),
                    _num(m.get("error_rate")), json.dumps(m),
                ],
            )

    def sync(self) -> int:
        """Index every run folder that is new or changed since it was indexed."""
        if not self.runs_dir.is_dir():
            return 0
        changed = 0
        with self.connect() as con:
            known = dict(con.execute("SELECT run_id, status_mtime FROM runs").fetchall())
            for path in sorted(self.runs_dir.iterdir()):
                status_file = path / "status.json"
                if not status_file.is_file():
                    continue
                if known.get(path.name) != status_file.stat().st_mtime:
                    self._index(con, RunFolder(path))
                    changed += 1
            for gone in set(known) - {p.name for p in self.runs_dir.iterdir()}:
                con.execute("DELETE FROM runs WHERE run_id = ?", [gone])
                con.execute("DELETE FROM points WHERE run_id = ?", [gone])
        return changed

    def reindex(self) -> int:
        """Rebuild the catalog from the run folders alone."""
        with self.connect() as con:
            con.execute("DELETE FROM runs")
            con.execute("DELETE FROM points")
        return self.sync()

    # --- reading -------------------------------------------------------------
    def list_runs(self, limit: int = 1000, **filters: str) -> list[dict[str, Any]]:
        where, args = [], []
        for col in ("engine", "model", "state"):
            if filters.get(col):
                where.append(f"{col} = ?")
                args.append(filters[col])
        if filters.get("tag"):
            where.append("list_contains(tags, ?)")
            args.append(filters["tag"])
        sql = "SELECT * EXCLUDE (spec_json, facts_json) FROM runs"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY run_id DESC LIMIT ?"
        with self.connect() as con:
            cur = con.execute(sql, [*args, limit])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def get_run(self, run_id: str) -> dict[str, Any] | None:
        with self.connect() as con:
            cur = con.execute("SELECT * FROM runs WHERE run_id = ?", [run_id])
            cols = [d[0] for d in cur.description]
            row = cur.fetchone()
            return None if row is None else dict(zip(cols, row, strict=True))

    def points(self, run_id: str) -> list[dict[str, Any]]:
        with self.connect() as con:
            cur = con.execute("SELECT * FROM points WHERE run_id = ? ORDER BY point_index",
                              [run_id])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

