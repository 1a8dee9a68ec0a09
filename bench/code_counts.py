"""Code-shape counts for the "One door in, one voice out" issue (docs/BENCHMARKS.md §9).

    python -m bench.code_counts [ROOT]

Prints, over ``core/`` and ``pages/`` (and app.py): lines of core, functions longer than 60
and 100 lines (by their ast span, decorators included), number formatters (functions whose body
formats a number with a format spec: ``:.1f``, ``:+,.0f``, ``%``), inline number format specs
outside the display vocabulary, and places outside ``core/engines/`` that name an engine in a
string literal. Pure reading: nothing is imported from the tree it counts.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

ENGINE_WORDS = {"sglang", "transformers", "endpoint", "vllm"}
# a format spec that formats a number: precision, thousands, sign, percent or exponent
NUMBER_SPEC = re.compile(r"^[<>^=]?[+\- ]?#?0?\d*[,_]?(\.\d+)?[eEfFgG%]$|^[+\- ]?,?d?$|^,$")
VOCABULARY = ("core/numbers.py", "core/metric_info.py")


def _files(root: Path) -> list[Path]:
    found = [*sorted((root / "core").rglob("*.py")), *sorted((root / "pages").rglob("*.py"))]
    app = root / "app.py"
    return [*found, app] if app.exists() else found


def _specs(tree: ast.AST) -> list[ast.JoinedStr]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FormattedValue) and isinstance(node.format_spec, ast.JoinedStr):
            parts = node.format_spec.values
            one = len(parts) == 1 and isinstance(parts[0], ast.Constant)
            if one and NUMBER_SPEC.match(str(parts[0].value)):  # type: ignore[attr-defined]
                out.append(node.format_spec)
    return out


def counts(root: Path) -> dict[str, object]:
    core_lines = 0
    long60: list[str] = []
    long100: list[str] = []
    formatters: list[str] = []
    inline_specs = 0
    engine_names: list[str] = []
    for path in _files(root):
        rel = path.relative_to(root).as_posix()
        text = path.read_text()
        if rel.startswith("core/"):
            core_lines += len(text.splitlines())
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                start = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                span = (node.end_lineno or node.lineno) - start + 1
                where = f"{rel}:{node.name} ({span})"
                if span > 60:
                    long60.append(where)
                if span > 100:
                    long100.append(where)
                own = [n for n in ast.walk(node) if n is not node]
                has_spec = any(_specs(n) for n in own if isinstance(n, ast.JoinedStr))
                if has_spec and re.search(r"text|fmt|format|pct|percent|duration|num", node.name):
                    formatters.append(f"{rel}:{node.name}")
        if rel not in VOCABULARY:
            inline_specs += len(_specs(tree))
        if not rel.startswith("core/engines/"):
            for node in ast.walk(tree):
                if isinstance(node, ast.Constant) and node.value in ENGINE_WORDS:
                    engine_names.append(f"{rel}:{node.lineno}")
    return {
        "core_lines": core_lines,
        "functions_over_60": long60,
        "functions_over_100": long100,
        "number_formatters": formatters,
        "inline_number_specs_outside_vocabulary": inline_specs,
        "engine_names_outside_core_engines": engine_names,
    }


def main(argv: list[str]) -> None:
    root = Path(argv[0]) if argv else Path.cwd()
    for key, value in counts(root).items():
        if isinstance(value, list):
            print(f"{key}: {len(value)}")
            for item in value:
                print(f"    {item}")
        else:
            print(f"{key}: {value}")


if __name__ == "__main__":
    main(sys.argv[1:])
