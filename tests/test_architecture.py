"""core/ is plain Python: no Streamlit anywhere below it, and no shell=True anywhere."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def test_core_never_imports_streamlit() -> None:
    offenders = [p for p in (REPO / "core").rglob("*.py") if "streamlit" in _imports(p)]
    assert offenders == []


def test_no_shell_true_outside_tests() -> None:
    offenders = []
    for p in [*(REPO / "core").rglob("*.py"), *(REPO / "pages").rglob("*.py"), REPO / "app.py"]:
        if not p.exists():
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (isinstance(node, ast.keyword) and node.arg == "shell"
                    and isinstance(node.value, ast.Constant) and node.value.value is True):
                offenders.append(f"{p.name}:{node.value.lineno}")
    assert offenders == []
