"""Bring the run folders and experiment that bench/gpu/device.sh returned (gpu-data.tar.gz)
into data/demo/, so the portal installs them on first start (core/portal/demo.py).

    python -m bench.gpu.import_results GPU_DATA_TAR_GZ [DEST=data/demo]

Two things change on the way, and each changed run says so in its facts (``demo_import``):
* SGLang facts are read again from the stored /server_info body (``server_info_raw``) and
  start-up log with the current adapter, so fixes made after the device call (0.5.17's
  CUDA-graph batch sizes, docs/ENGINES.md) show in the demo. Keys the pipeline added beside
  the engine's facts (GPU memory, placement) are kept as measured. A vLLM run gains only the
  log facts its stored facts lack (``over_budget_gb``); the rest stay as measured.
* uvicorn's per-request access lines are dropped from server.log (they are most of its size
  and state no fact); every SGLang line stays.
* The device's working folder (``G`` in bench/gpu/device.sh) becomes ``<device>`` in
  every text and Parquet string the run stored (model path, launch command, logs), so no
  machine path ships (runs imported before this step keep theirs).
* Per-request records are re-encoded (zstd, byte-stream split) with each chunk's arrival
  time (``chunk_s``, seconds on the point's clock) rounded to float32 precision: at most
  4 µs at 64 s, against inter-token gaps of milliseconds, and a third of the bytes (a
  point of 960 × 512 chunk times is 3.9 MB of float64 noise). summary.json stays as
  measured.
"""

from __future__ import annotations

import json
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.engines.sglang import facts_from
from core.engines.vllm_log import parse_vllm_log
from core.executors.base import end_unfinished
from core.run_folder import ACTIVE_STATES, RunFolder, utc_now

_ACCESS = ("INFO:     127.0.0.1:",)
# One source for the device's working folder: the ``G=`` line of device.sh.
DEVICE_ROOT = re.search(r"^G=(\S+)$", (Path(__file__).parent / "device.sh").read_text(), re.M)[1]
_TEXT = (".json", ".log", ".txt", ".jsonl")


def _strip_device_root(folder: Path) -> int:
    """``DEVICE_ROOT`` → ``<device>`` in every text file and Parquet string column."""
    changed = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        if path.suffix in _TEXT:
            text = path.read_text(errors="replace")
            if DEVICE_ROOT in text:
                path.write_text(text.replace(DEVICE_ROOT, "<device>"))
                changed += 1
        elif path.suffix == ".parquet":
            table = pq.read_table(path)
            cols = []
            hit = False
            for col in table.columns:
                if (
                    pa.types.is_string(col.type)
                    and pc.any(pc.match_substring(col, DEVICE_ROOT)).as_py()
                ):
                    col = pc.replace_substring(col, DEVICE_ROOT, "<device>")
                    hit = True
                cols.append(col)
            if hit:
                pq.write_table(pa.table(cols, schema=table.schema), path)
                changed += 1
    return changed


def _compact_records(path: Path) -> None:
    """``chunk_s`` rounded to float32 precision (kept as float64), zstd + byte-stream split."""
    table = pq.read_table(path)
    if "chunk_s" in table.column_names:
        col = table.column("chunk_s").combine_chunks()
        rounded = col.values.to_numpy(zero_copy_only=False).astype(np.float32).astype(np.float64)
        lists = pa.ListArray.from_arrays(col.offsets, pa.array(rounded), mask=col.is_null())
        i = table.schema.get_field_index("chunk_s")
        table = table.set_column(i, table.schema.field("chunk_s"), lists)
    floats = [
        f"{f.name}.list.element" if pa.types.is_list(f.type) else f.name
        for f in table.schema
        if pa.types.is_float64(f.type)
        or (pa.types.is_list(f.type) and pa.types.is_float64(f.type.value_type))
    ]
    pq.write_table(
        table, path, compression="zstd", compression_level=19, use_byte_stream_split=floats
    )


def _slim_log(path: Path) -> int:
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    kept = [ln for ln in lines if not any(a in ln for a in _ACCESS)]
    path.write_text("".join(kept))
    return len(lines) - len(kept)


def _end_if_active(dest: Path) -> None:
    """A run still queued or running in the device's last collection never ends there: the
    lent machine went back (idle release, spent device time) with it. It ships as
    ``interrupted`` with what it had, so no page shows it queued forever."""
    folder = RunFolder(dest)
    last = folder.status()
    if last.get("state") in ACTIVE_STATES:
        end_unfinished(
            folder,
            f"the lent GPU machine was released while this run was {last['state']} (the "
            "device's last collection had it so); ended on import by bench/gpu/import_results.py",
            finished_at=last.get("updated_at") or utc_now(),  # when it was last heard from
        )


def import_run(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
    _end_if_active(dest)
    log = dest / "server.log"
    facts_path = dest / "facts.json"
    note: list[str] = []
    if facts_path.is_file() and log.is_file():
        facts = json.loads(facts_path.read_text())
        spec = json.loads((dest / "spec.json").read_text())
        if spec.get("server", {}).get("engine") == "sglang":
            fresh = facts_from(facts.get("server_info_raw"), log.read_text(errors="replace"))
            changed = sorted(k for k, v in fresh.items() if facts.get(k) != v)
            facts.update(fresh)
            note.append(
                "SGLang facts re-read from the stored /server_info body and "
                f"server.log by bench/gpu/import_results.py; changed: {changed}"
            )
        elif spec.get("server", {}).get("engine") == "vllm":
            # vLLM's stored facts mix the log with the server's answers: only the log facts
            # the device's code did not know yet are added (e.g. over_budget_gb)
            fresh = parse_vllm_log(log.read_text(errors="replace"))
            added = sorted(k for k in fresh if k not in facts)
            facts.update({k: fresh[k] for k in added})
            note.append(f"vLLM log facts the run lacked read from server.log: {added}")
        dropped = _slim_log(log)
        note.append(f"{dropped} uvicorn access lines dropped from server.log")
        note.append(f"{DEVICE_ROOT} written as <device> in every stored path")
        note.append("records.parquet chunk_s rounded to float32 precision, zstd")
        facts["demo_import"] = "; ".join(note)
        facts_path.write_text(json.dumps(facts, indent=2))
    elif log.is_file():
        _slim_log(log)
    for records in sorted(dest.glob("points/*/records.parquet")):
        _compact_records(records)
    _strip_device_root(dest)


def main(tar_path: Path, dest: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tar_path) as tar:
            tar.extractall(tmp, filter="data")
        data = Path(tmp) / "data"
        for kind in ("runs", "experiments"):
            for src in sorted((data / kind).iterdir()):
                out = dest / kind / src.name
                if out.exists():
                    print(f"skip {out}: already there")
                    continue
                if kind == "runs":
                    import_run(src, out)
                else:
                    shutil.copytree(src, out)
                    _strip_device_root(out)
                print(f"{out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("data/demo"))
