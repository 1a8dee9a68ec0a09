"""Log output of the FAKE SGLang, in the 0.5.23 formats (reference §2).

SGLang lines: ``[YYYY-mm-dd HH:MM:SS{.mmm if SGLANG_LOG_MS=1}{ TPn}] message`` on stderr.
Uvicorn lines: ``[ts] INFO:     message`` on stderr, except access lines, which uvicorn writes
to **stdout** (so a launcher must merge the two streams, as with the real server).
Every line is flushed at once; a lock keeps lines from different threads whole.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from typing import TextIO

_LOCK = threading.Lock()
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}


class Logger:
    def __init__(self, level: str = "info", http_level: str | None = None) -> None:
        self.level = _LEVELS.get(level.lower(), 20)
        self.http_level = _LEVELS.get((http_level or level).lower(), 20)
        self.with_ms = os.environ.get("SGLANG_LOG_MS", "") in ("1", "true", "True")

    def _ts(self) -> str:
        now = time.time()
        ts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        if self.with_ms:
            ts += f".{int(now * 1000) % 1000:03d}"
        return ts

    @staticmethod
    def write_raw(text: str, stream: TextIO | None = None) -> None:
        out = stream or sys.stderr
        with _LOCK:
            try:
                out.write(text)
                out.flush()
            except (OSError, ValueError):
                pass

    def sglang(self, msg: str, tag: str = "", level: int = 20) -> None:
        """An SGLang line; ``tag`` is e.g. ``" TP1"`` (empty when tp == 1)."""
        if level >= self.level:
            self.write_raw(f"[{self._ts()}{tag}] {msg}\n")

    def uvicorn(self, msg: str, level: str = "INFO") -> None:
        lv = _LEVELS.get(level.lower(), 20)
        if lv >= self.http_level:
            self.write_raw(f"[{self._ts()}] {(level + ':').ljust(9)} {msg}\n")

    def access(self, client: str, method: str, path: str, code: int, phrase: str) -> None:
        if self.http_level <= 20:
            req = f'"{method} {path} HTTP/1.1"'
            line = f"[{self._ts()}] INFO:     {client} - {req} {code} {phrase}\n"
            self.write_raw(line, sys.stdout)


_SITE = "/usr/local/lib/python3.11/dist-packages/sglang"


def crash_on_start_traceback(model_path: str) -> str:
    return (
        "Traceback (most recent call last):\n"
        '  File "<frozen runpy>", line 198, in _run_module_as_main\n'
        '  File "<frozen runpy>", line 88, in _run_code\n'
        f'  File "{_SITE}/launch_server.py", line 84, in <module>\n'
        "    launch_server(server_args)\n"
        f'  File "{_SITE}/srt/entrypoints/http_server.py", line 2431, in launch_server\n'
        "    tokenizer_manager, template_manager, scheduler_info, port_args = "
        "_launch_subprocesses(\n"
        "                                                                     "
        "^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{_SITE}/srt/entrypoints/engine.py", line 1201, in _launch_subprocesses\n'
        "    model_config = ModelConfig.from_server_args(server_args)\n"
        "                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f'  File "{_SITE}/srt/configs/model_config.py", line 312, in from_server_args\n'
        "    return ModelConfig(\n"
        "           ^^^^^^^^^^^^\n"
        f'  File "{_SITE}/srt/configs/model_config.py", line 128, in __init__\n'
        "    self.hf_config = get_config(\n"
        "                     ^^^^^^^^^^^\n"
        f'  File "{_SITE}/srt/utils/hf_transformers_utils.py", line 241, in get_config\n'
        "    config = AutoConfig.from_pretrained(\n"
        "             ^^^^^^^^^^^^^^^^^^^^^^^^^^^\n"
        f"OSError: {model_path} does not appear to have a file named config.json. "
        f"Checkout 'https://huggingface.co/{model_path}/tree/main' for available files.\n"
    )


def scheduler_traceback(frames: list[tuple[str, int, str, str]], final: str) -> str:
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{_SITE}/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(final)
    return "\n".join(lines)


_SCHED_FRAMES = [
    ("srt/managers/scheduler.py", 6331, "run_scheduler_process",
     "scheduler = Scheduler("),
    ("srt/managers/scheduler.py", 412, "__init__", "self.init_model_worker()"),
    ("srt/managers/scheduler.py", 731, "init_model_worker",
     "self.tp_worker = TpModelWorker("),
    ("srt/managers/tp_worker.py", 268, "__init__", "self._init_model_runner()"),
    ("srt/managers/tp_worker.py", 351, "_init_model_runner",
     "self._model_runner = ModelRunner("),
    ("srt/model_executor/model_runner.py", 512, "__init__",
     "self.initialize(pre_model_load_memory)"),
]  # fmt: skip


def negative_kv_traceback(mem_fraction_static: float) -> str:
    frames = [
        *_SCHED_FRAMES,
        ("srt/model_executor/model_runner.py", 741, "initialize",
         "self.init_memory_pool(pre_model_load_memory)"),
        ("srt/mem_cache/kv_cache_configurator.py", 312, "init_memory_pool",
         "pool_config = self.resolve_memory_pool_config(pre_model_load_memory)"),
        ("srt/mem_cache/kv_cache_configurator.py", 468, "resolve_memory_pool_config",
         "return MemoryPoolConfig("),
        ("srt/mem_cache/pool_configurator.py", 86, "__post_init__", "raise RuntimeError(msg)"),
    ]  # fmt: skip
    final = (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: mem_fraction_static={mem_fraction_static}"
    )
    return scheduler_traceback(frames, final)


def capture_failure_traceback(oom: bool, gpu_total: float) -> str:
    frames = [
        *_SCHED_FRAMES,
        ("srt/model_executor/model_runner.py", 760, "initialize", "self.init_device_graphs()"),
        ("srt/model_executor/model_runner_components/cuda_graph_setup.py", 771,
         "init_device_graphs", "self.graph_runner = DecodeCudaGraphRunner(self)"),
        ("srt/model_executor/runner/base_cuda_graph_runner.py", 188, "__init__",
         "raise Exception("),
    ]  # fmt: skip
    if oom:
        cause = (
            "CUDA out of memory. Tried to allocate 672.00 MiB. GPU 0 has a total capacity of "
            f"{gpu_total:.2f} GiB of which 200.75 MiB is free. Process {os.getpid()} has "
            f"{gpu_total - 0.2:.2f} GiB memory in use. Of the allocated memory 128.50 GiB is "
            "allocated by PyTorch, with 3.23 GiB allocated in private pools (e.g., CUDA Graphs), "
            "and 1.01 GiB is reserved by PyTorch but unallocated. If reserved but unallocated "
            "memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to "
            "avoid fragmentation.  See documentation for Memory Management  "
            "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
        )
        inner_final = f"torch.OutOfMemoryError: {cause}"
    else:
        cause = (
            "CUDA error: an illegal memory access was encountered\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the "
            "stacktrace below might be incorrect.\n"
            "For debugging consider passing CUDA_LAUNCH_BLOCKING=1"
        )
        inner_final = f"RuntimeError: {cause}"
    inner = [
        "Traceback (most recent call last):",
        f'  File "{_SITE}/srt/model_executor/runner/base_cuda_graph_runner.py", line 176, '
        "in __init__",
        "    self.capture()",
        f'  File "{_SITE}/srt/model_executor/runner/decode_cuda_graph_runner.py", line 402, '
        "in capture",
        "    graph, output_buffers = self.capture_one_batch_size(bs, forward)",
        "                            ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
        inner_final,
        "",
        "During handling of the above exception, another exception occurred:",
        "",
    ]
    outer = scheduler_traceback(frames, "")
    head, _, rest = outer.partition("Traceback (most recent call last):\n")
    final = (
        f"Exception: Capture cuda graph failed: {cause}\n"
        "Possible solutions:\n"
        "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
        "3. disable torch compile by not using --enable-torch-compile\n"
        "4. disable CUDA graph by --cuda-graph-backend-decode=disabled. "
        "(Not recommended. Huge performance loss)\n"
        "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
    )
    return head + "\n".join(inner) + "\nTraceback (most recent call last):\n" + rest + final
