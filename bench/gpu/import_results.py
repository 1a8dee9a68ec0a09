"""Bring the run folders and experiment that bench/gpu/device.sh returned (gpu-data.tar.gz)
into data/demo/, so the portal installs them on first start (core/portal/demo.py).

    python -m bench.gpu.import_results GPU_DATA_TAR_GZ [DEST=data/demo]

Two things change on the way, and each changed run says so in its facts (``demo_import``):
* SGLang facts are read again from the stored /server_info body (``server_info_raw``) and
  start-up log with the current adapter, so fixes made after the device call (0.5.17's
  CUDA-graph batch sizes, docs/ENGINES.md) show in the demo. Keys the pipeline added beside
  the engine's facts (GPU memory, placement) are kept as measured.
* uvicorn's per-request access lines are dropped from server.log (they are most of its size
  and state no fact); every SGLang line stays.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

from core.engines.sglang import facts_from

_ACCESS = ("INFO:     127.0.0.1:",)


def _slim_log(path: Path) -> int:
    lines = path.read_text(errors="replace").splitlines(keepends=True)
    kept = [ln for ln in lines if not any(a in ln for a in _ACCESS)]
    path.write_text("".join(kept))
    return len(lines) - len(kept)


def import_run(src: Path, dest: Path) -> None:
    shutil.copytree(src, dest)
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
        dropped = _slim_log(log)
        note.append(f"{dropped} uvicorn access lines dropped from server.log")
        facts["demo_import"] = "; ".join(note)
        facts_path.write_text(json.dumps(facts, indent=2))
    elif log.is_file():
        _slim_log(log)


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
                print(f"{out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]) if len(sys.argv) > 2 else Path("data/demo"))
