"""``python -m core import`` and ``python -m core export``: results in, results out.

    python -m core import FILE... [--dry-run] [--json] [--log SERVER_LOG] [--split]
                                  [--engine E --model M --concurrency N --request-rate R
                                   --input-len N --output-len N --num-prompts N --tag T]
    python -m core export ID... --format csv|parquet|html|png --out DIR [--baseline RUN_ID]

``--dry-run --json`` stores nothing and prints, per file, the runs and the values it would
store (ServeLab's metric names, values as read). The load flags state what a file does not
(a pasted table rarely says its input length); a value the file states always wins.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from core.config import parse_request_rate
from core.errors import ConfigError
from core.metric_info import verdict_metrics
from core.numbers import number_text

__all__ = ["HANDLERS", "add_parsers", "import_rate"]


def import_rate(text: str) -> float | str | None:
    """A request rate typed for an import (CLI or page): None when empty, ``"inf"`` (as
    imported points store it) or requests/s; ``parse_request_rate`` is the one rule."""
    if not text.strip():
        return None
    value = parse_request_rate(text)
    return "inf" if math.isinf(value) else value


def _rate(text: str) -> float | str:
    try:
        value = import_rate(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value is None:
        raise argparse.ArgumentTypeError("give requests/s or inf")
    return value


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of at least 1")
    return value


def add_parsers(sub: Any) -> None:
    """Add the ``import`` and ``export`` subcommands to the CLI's subparsers."""
    im = sub.add_parser(
        "import", help="import bench_serving / vLLM results and SGLang logs as runs"
    )
    im.add_argument(
        "files",
        nargs="+",
        type=Path,
        metavar="FILE",
        help="result tables, JSON/JSONL, SGLang start-up logs ('-' = stdin)",
    )
    im.add_argument("--dry-run", action="store_true", help="store nothing; show what would be")
    im.add_argument("--json", action="store_true", help="print the runs and values as JSON")
    im.add_argument(
        "--log", type=Path, help="an SGLang start-up log of the server the results were measured on"
    )
    im.add_argument(
        "--split",
        action="store_true",
        help="one run per result (default: results of one server at different loads form one run)",
    )
    g = im.add_argument_group("what the files do not state (a value in the file wins)")
    g.add_argument("--engine", help="the server engine, e.g. sglang or vllm")
    g.add_argument("--model")
    g.add_argument("--concurrency", type=_positive)
    g.add_argument("--request-rate", type=_rate)
    g.add_argument("--input-len", type=_positive)
    g.add_argument("--output-len", type=_positive)
    g.add_argument("--num-prompts", type=_positive)
    g.add_argument("--tag", action="append", dest="tags", default=[])

    ex = sub.add_parser(
        "export",
        help="export runs, a comparison or an experiment as "
        "csv, parquet, a self-contained html report, or png",
    )
    ex.add_argument("ids", nargs="+", metavar="ID", help="run ids, or one experiment id (exp-...)")
    ex.add_argument("--format", required=True, choices=["csv", "parquet", "html", "png"])
    ex.add_argument("--out", type=Path, required=True, help="folder to write into")
    ex.add_argument("--baseline", help="the run the others are compared with (default: the first)")
    ex.add_argument("--json", action="store_true", help="print the files written as JSON")


def _read(path: Path) -> tuple[str, bytes, str]:
    if str(path) == "-":
        data = sys.stdin.buffer.read()
        name = "stdin.txt"
    else:
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise ConfigError("FILE", f"cannot read {path}: {exc.strerror or exc}") from exc
        name = path.name
    return data.decode("utf-8", errors="replace"), data, name


def _given(args: argparse.Namespace) -> Any:
    from core.interop.importers import Given

    return Given(
        engine=args.engine,
        model=args.model,
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        input_len=args.input_len,
        output_len=args.output_len,
        num_prompts=args.num_prompts,
        tags=tuple(args.tags),
    )


def _fmt(value: Any) -> str:
    return number_text(value) if isinstance(value, float) else str(value)


def _print_text(files: list[dict[str, Any]], dry_run: bool) -> None:
    for f in files:
        print(f"{f['file']}: {f['format']}, {len(f['runs'])} run(s)")
        for note in f["not_understood"]:
            print(f"  not read: {note}")
        for run in f["runs"]:
            if run["already_imported"]:
                what = "already imported as"
            else:
                what = "would store" if dry_run else "stored"
            print(
                f"  {what} {run['run_id']} ({run['state']}; engine "
                f"{run['engine'] or 'not stated'}; model {run['model'] or 'not stated'})"
            )
            if run.get("reason"):
                print(f"    {run['reason']}")
            facts = {
                k: v
                for k, v in run["facts"].items()
                if k
                in (
                    "engine_version",
                    "kv_cache_tokens",
                    "tp_size",
                    "cuda_graph_enabled",
                    "weight_mem_gb",
                    "failure",
                )
            }
            if facts:
                print("    facts: " + ", ".join(f"{k}={_fmt(v)}" for k, v in facts.items()))
            for p in run["points"]:
                m = p["metrics"]
                shown = ", ".join(
                    f"{k}={_fmt(m[k])}" for k in (*verdict_metrics(), "completed") if k in m
                )
                print(f"    point {p['index']} {p['label']}: {shown}")
                print(
                    f"      {len(m)} metric(s) read; unknown: "
                    f"{', '.join(u for u in p['unknown'] if u.startswith('point.')) or '-'}"
                    f" and {sum(not u.startswith('point.') for u in p['unknown'])} metric(s)"
                )
                for note in p["not_understood"]:
                    print(f"      not read: {note}")


def cmd_import(args: argparse.Namespace) -> int:
    from core.interop.importers import parse_text, plan_runs, store_runs
    from core.settings import load_settings

    settings = load_settings()
    given = _given(args)
    log = None
    if args.log is not None:
        text, data, name = _read(args.log)
        log = parse_text(text, name, data)
        if log.log_facts is None:
            raise ConfigError("--log", f"{args.log} holds no SGLang start-up log lines")
    out: list[dict[str, Any]] = []
    nothing = 0
    for path in args.files:
        text, data, name = _read(path)
        parsed = parse_text(text, name, data)
        planned = plan_runs(parsed, settings, given, log=log, split=args.split)
        if not planned:
            nothing += 1
        stored: set[str] = set()
        if not args.dry_run and planned:
            stored = set(store_runs(planned, settings))
        runs = []
        for p in planned:
            preview = p.preview()
            preview["stored"] = p.run_id in stored
            preview["link"] = f"/run?run={p.run_id}"
            runs.append(preview)
        out.append(
            {
                "file": name,
                "sha256": parsed.sha256,
                "format": parsed.format,
                "not_understood": parsed.not_understood,
                "runs": runs,
            }
        )
    if args.json:
        print(json.dumps({"dry_run": args.dry_run, "files": out}, indent=2, default=str))
    else:
        _print_text(out, args.dry_run)
    return 1 if nothing == len(args.files) else 0


def cmd_export(args: argparse.Namespace) -> int:
    from core.interop.export import select, write_export
    from core.settings import load_settings

    settings = load_settings()
    sel = select(settings, args.ids, args.baseline)
    files, note = write_export(sel, args.format, args.out)
    if args.json:
        print(
            json.dumps(
                {
                    "kind": sel.kind,
                    "name": sel.name,
                    "format": args.format,
                    "files": [str(f) for f in files],
                    "note": note,
                },
                indent=2,
            )
        )
    else:
        print(
            f"{sel.kind} {sel.name}: {len(files)} file(s) in {args.out}"
            + (f" ({note})" if note else "")
        )
        for f in files:
            print(f"  {f}")
    return 0


HANDLERS: dict[str, Callable[[argparse.Namespace], int]] = {
    "import": cmd_import,
    "export": cmd_export,
}
