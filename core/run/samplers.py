"""Background sampling while a point runs: the server's Prometheus /metrics and
GPU memory. Samples are long-format rows (t_s, source, name, labels, value).

The sampler thread shares the GIL with the load generator's event loop, so it does as
little Python as it can while a point runs: it keeps each scrape's text and parses them
all in ``table()``, after the points (parsing SGLang 0.5.17's ~750 lines of /metrics took
~31 ms of pure Python a scrape, long enough to delay token timestamps: docs/BENCHMARKS.md §2)."""

from __future__ import annotations

import threading
import time
from typing import Any

import httpx
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from core.run.gpu import gpu_memory

__all__ = ["SAMPLE_SCHEMA", "Sampler", "parse_prometheus"]

SAMPLE_SCHEMA = pa.schema(
    [
        ("t_s", pa.float64()),
        ("point", pa.int32()),
        ("source", pa.string()),
        ("name", pa.string()),
        ("labels", pa.string()),
        ("value", pa.float64()),
    ]
)


def parse_prometheus(text: str) -> list[tuple[str, str, float]]:
    """(name, labels, value) for every sample; histogram buckets are dropped to keep
    the table small (their _sum and _count stay)."""
    out = []
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name.endswith("_bucket"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out.append((s.name, labels, float(s.value)))
    return out


class Sampler:
    """Samples until stopped; ``metrics_url`` None skips the server side."""

    def __init__(self, metrics_url: str | None, interval_s: float, t0: float) -> None:
        self.metrics_url = metrics_url
        self.interval_s = interval_s
        self.t0 = t0
        self.point = -1
        self.rows: list[dict[str, Any]] = []  # NVML rows as taken; metrics rows in table()
        self.metrics_error: str | None = None
        self._scrapes: list[tuple[float, int, str]] = []  # (t_s, point, /metrics text)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="servelab-sampler", daemon=True)

    @property
    def unparsed_scrapes(self) -> int:
        """Scrapes taken and kept as text, to be parsed by ``table()``."""
        return len(self._scrapes)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def sample_once(self, client: httpx.Client) -> None:
        t = time.perf_counter() - self.t0
        for g in gpu_memory():
            self.rows.append(
                {
                    "t_s": t,
                    "point": self.point,
                    "source": "nvml",
                    "name": "gpu_used_mib",
                    "labels": f"gpu={g['gpu']}",
                    "value": g["used_mib"],
                }
            )
        if self.metrics_url and self.metrics_error is None:
            try:
                resp = client.get(self.metrics_url)
                if resp.status_code != 200:
                    # No /metrics on this server: stop asking, say why once.
                    self.metrics_error = f"HTTP {resp.status_code} from {self.metrics_url}"
                    return
                self._scrapes.append((t, self.point, resp.text))
            except httpx.HTTPError as exc:
                self.metrics_error = f"{type(exc).__name__}: {exc}"[:200]

    def _loop(self) -> None:
        with httpx.Client(timeout=5.0) as client:
            while not self._stop.is_set():
                self.sample_once(client)
                self._stop.wait(self.interval_s)

    def table(self) -> pa.Table:
        """Every sample so far; parses the scrapes kept since the last call. A scrape that
        is not Prometheus text is dropped and named in ``metrics_error``."""
        scrapes, self._scrapes = self._scrapes, []
        for t, point, text in scrapes:
            try:
                parsed = parse_prometheus(text)
            except ValueError as exc:
                self.metrics_error = self.metrics_error or f"ValueError: {exc}"[:200]
                continue
            self.rows.extend(
                {
                    "t_s": t,
                    "point": point,
                    "source": "metrics",
                    "name": name,
                    "labels": labels,
                    "value": value,
                }
                for name, labels, value in parsed
            )
        return pa.Table.from_pylist(sorted(self.rows, key=lambda r: r["t_s"]), schema=SAMPLE_SCHEMA)
