"""FAKE SGLang 0.5.14 for the ServeLab tests: a second installation of another version.

It is the 0.5.23 fake (``tests/fakes/sglang_pkg/sglang``, added to this package's path, so
``python -m sglang.launch_server`` runs the same server) with 0.5.14's version and option
list: the one-phase CUDA graph flags (``--cuda-graph-max-bs``, ``--disable-cuda-graph``)
and none of the per-phase ones, and no ``--incremental-streaming-output``
(``sglang._fake_args.OLD_FLAGS``). Put this folder, not ``sglang_pkg``, on PYTHONPATH.
"""

from pathlib import Path

__version__ = "0.5.14"
__path__.append(str(Path(__file__).resolve().parents[2] / "sglang_pkg" / "sglang"))
