"""core/ is plain Python: no Streamlit anywhere below it, no import cycle, no shell=True
anywhere; pages/ use only the core modules listed here; the worker only schedules."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from core.settings import Settings

REPO = Path(__file__).resolve().parent.parent

# The core modules pages/, app.py and serve.py may import (the thin-page rule: read input,
# call core, render). A page that needs another one is a change to review: add it here on purpose.
PAGES_MAY_IMPORT = frozenset(
    {
        "core.portal.access",
        "core.analysis.attribution",
        "core.analysis.diff",
        "core.analysis.engines",
        "core.analysis.history",
        "core.analysis.memory",
        "core.analysis.points",
        "core.analysis.power",
        "core.analysis.roles",
        "core.analysis.runs",
        "core.analysis.sequential",
        "core.analysis.trials",
        "core.views.cells",
        "core.views.landing",
        "core.views.pickers",
        "core.shapes",
        "core.views.history",
        "core.config",
        "core.portal.demo",
        "core.portal.session",
        "core.portal.gate",
        "core.errors",
        "core.executors",
        "core.executors.queue",
        "core.experiments.design",
        "core.launch.adaptive",
        "core.launch.explain",
        "core.interop.export",
        "core.views.figures",
        "core.views.figures_attribution",
        "core.launch.forms",
        "core.launch.grid",
        "core.launch.host",
        "core.launch.queue",
        "core.interop.importers",
        "core.executors.worker",
        "core.metrics",
        "core.metric_info",
        "core.numbers",
        "core.launch.presets",
        "core.views.report",
        "core.run_folder",
        "core.views.runs_table",
        "core.settings",
        "core.analysis.stats",
        "core.store",
        "core.analysis.card",
        "core.interop.transfer",
        "core.analysis.server_view",
        "core.analysis.timelines",
        "core.views.figures_server",
        "core.analysis.ledger",
        "core.views.figures_ledger",
        "core.answers",
        "core.views.progress",
        "core.views.answers",
        "core.engines.registry",
    }
)


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module.split(".")[0])
    return names


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


CORE = {_module_name(p): p for p in (REPO / "core").rglob("*.py")}
PAGES = {_module_name(p): p for p in (REPO / "pages").rglob("*.py")}


def _type_only(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:`` (imports that never run)."""
    out: set[int] = set()
    for node in ast.walk(tree):
        test = node.test if isinstance(node, ast.If) else None
        if isinstance(test, ast.Name) and test.id == "TYPE_CHECKING":
            out |= {id(n) for stmt in node.body for n in ast.walk(stmt)}
    return out


def _from_module(node: ast.ImportFrom, importer: str) -> str | None:
    """The absolute name of the module a ``from ... import`` reads: a relative one
    (``from ..run.pipeline import x`` in core.analysis.card) resolved against the module
    ``importer`` that holds it, as Python resolves it (core.run.pipeline)."""
    if node.level == 0:
        return node.module
    package = importer.split(".")
    if not _is_package(importer):
        package = package[:-1]
    if node.level - 1 >= len(package):
        return None  # beyond the top package: an ImportError when it runs
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _is_package(module: str) -> bool:
    path = CORE.get(module) or PAGES.get(module)
    return path is not None and path.name == "__init__.py"


def _core_targets(path: Path, runtime_only: bool = False, module: str | None = None) -> set[str]:
    """The core modules ``path`` imports, anywhere in it (a function-level import is a
    dependency too): ``from core.a import b`` is ``core.a.b`` when that is a module; a
    relative import counts as the absolute one it is (``module``: the name ``path`` is
    imported as, by default its place in the repository). ``runtime_only`` leaves out
    imports under ``if TYPE_CHECKING:``: they are layer edges (checked against LAYERS) but
    cannot make an import cycle."""

    def owner(name: str) -> str | None:
        while name and name not in CORE:
            name = name.rpartition(".")[0]
        return name or None

    importer = module or _module_name(path)
    tree = ast.parse(path.read_text())
    skip = _type_only(tree) if runtime_only else set()
    out: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            out |= {m for a in node.names if (m := owner(a.name))}
        elif isinstance(node, ast.ImportFrom) and (source := _from_module(node, importer)):
            for a in node.names:
                full = f"{source}.{a.name}"
                if (m := full if full in CORE else owner(source)) is not None:
                    out.add(m)
    return out


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle as ``[a, b, ..., a]``, or [] when there is none."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(m: str) -> list[str]:
        state[m] = 1
        path.append(m)
        for n in sorted(graph[m]):
            if state.get(n) == 1:
                return [*path[path.index(n) :], n]
            if n not in state and (found := visit(n)):
                return found
        path.pop()
        state[m] = 2
        return []

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return []


def test_core_never_imports_streamlit() -> None:
    offenders = [p for p in (REPO / "core").rglob("*.py") if "streamlit" in _imports(p)]
    assert offenders == []


def test_core_has_no_import_cycle() -> None:
    graph = {m: _core_targets(p, runtime_only=True) - {m} for m, p in CORE.items()}
    assert graph["core.executors.worker"] >= {
        "core.executors.registry"
    }  # the graph sees real edges
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_pages_import_only_the_allowed_core_modules() -> None:
    used: dict[str, set[str]] = {}
    for p in [*(REPO / "pages").rglob("*.py"), REPO / "app.py", REPO / "serve.py"]:
        for m in _core_targets(p):
            used.setdefault(m, set()).add(p.name)
    extra = {m: sorted(files) for m, files in used.items() if m not in PAGES_MAY_IMPORT}
    assert extra == {}, "pages import core modules not in PAGES_MAY_IMPORT"
    # Tight: an entry no page uses any more goes.
    assert sorted(PAGES_MAY_IMPORT - set(used)) == []


def test_the_worker_only_schedules_and_dispatches() -> None:
    """core/executors/worker.py and the queue it reads (core/executors/queue.py) start no
    process and know no executor by name: processes are the executors' (core/executors),
    which the worker and the queue reach through the registry."""
    for path in (
        REPO / "core" / "executors" / "worker.py",
        REPO / "core" / "executors" / "queue.py",
    ):
        tree = ast.parse(path.read_text())
        assert not {"subprocess", "psutil", "signal", "ray"} & _imports(path), path.name
        names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        attrs = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
        assert not {"Popen", "kill", "killpg", "send_signal"} & (names | attrs), path.name
        strings = {
            n.value
            for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and isinstance(n.value, str)
        }
        assert not {"ray", "local"} & strings, path.name


def test_no_shell_true_outside_tests() -> None:
    offenders = []
    for p in [
        *(REPO / "core").rglob("*.py"),
        *(REPO / "pages").rglob("*.py"),
        REPO / "app.py",
        REPO / "serve.py",
    ]:
        if not p.exists():
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if (
                isinstance(node, ast.keyword)
                and node.arg == "shell"
                and isinstance(node.value, ast.Constant)
                and node.value.value is True
            ):
                offenders.append(f"{p.name}:{node.value.lineno}")
    assert offenders == []


# --- layers ---------------------------------------------------------------------------------
# Each package of core/ and what it may import (besides itself). "base" is the shared vocabulary
# at the top of core/ (errors, settings, config, records, safety, metrics, run_folder, store).
# The table is a DAG: analysis reads stored runs and never runs anything, views word and draw
# what analysis computed, interop reads and writes other tools' formats, launch is where a
# user's request becomes queued runs; cli is the one entry point that may reach everything.
LAYERS: dict[str, frozenset[str]] = {
    "base": frozenset(),
    "load": frozenset({"base"}),
    "engines": frozenset({"base", "load"}),
    "experiments": frozenset({"base"}),
    "portal": frozenset({"base"}),
    "run": frozenset({"base", "load", "engines"}),
    "executors": frozenset({"base", "run", "engines"}),
    "analysis": frozenset({"base", "experiments"}),
    "views": frozenset({"base", "analysis", "experiments"}),
    "interop": frozenset({"base", "engines", "experiments", "analysis", "views"}),
    "launch": frozenset({"base", "load", "engines", "run", "experiments", "analysis", "executors"}),
    "cli": frozenset(
        {
            "base",
            "load",
            "engines",
            "experiments",
            "portal",
            "run",
            "executors",
            "analysis",
            "views",
            "interop",
            "launch",
        }
    ),
}
# What pages/ and app.py may reach: the portal-facing packages, never the run or load path.
PAGES_LAYERS = frozenset(
    {"base", "portal", "launch", "analysis", "views", "interop", "executors", "experiments"}
)
ENTRY = {"core", "core.__main__", "core.cli"}
# The engine registry and its declarations are part of the shared vocabulary: core.config
# checks an engine name and its knobs against them, the analysis path reads an engine's
# metric names and knob costs from them. They import base only; an engine's module (and its
# adapter's dependencies) is imported by name at run time, never by an import statement.
ENGINE_VOCABULARY = {"core.engines.registry", "core.engines.declare"}


def layer_of(module: str) -> str:
    """``core.analysis.card`` → ``analysis``; a module at the top of core/ is ``base``."""
    if module in ENTRY:
        return "cli"
    if module in ENGINE_VOCABULARY:
        return "base"
    parts = module.split(".")
    if len(parts) >= 2 and (Path(REPO, *parts[:2])).is_dir():
        return parts[1]
    return "base"


def test_every_core_package_has_a_layer() -> None:
    packages = {p.name for p in (REPO / "core").iterdir() if (p / "__init__.py").exists()}
    assert packages == set(LAYERS) - {"base", "cli"}


def test_layers_form_a_dag() -> None:
    graph = {k: set(v) for k, v in LAYERS.items()}
    assert _cycle(graph) == []


def _layer_violations(edges: dict[str, set[str]]) -> list[str]:
    bad = []
    for a, targets in sorted(edges.items()):
        la = layer_of(a)
        for b in sorted(targets):
            lb = layer_of(b)
            if lb != la and lb not in LAYERS[la]:
                bad.append(f"{a} ({la}) -> {b} ({lb})")
    return bad


def test_every_core_import_follows_the_layers() -> None:
    graph = {m: _core_targets(p) - {m} for m, p in CORE.items()}
    assert _layer_violations(graph) == []


def test_the_layer_check_sees_a_wrong_way_edge() -> None:
    assert _layer_violations({"core.analysis.card": {"core.run.pipeline"}}) == [
        "core.analysis.card (analysis) -> core.run.pipeline (run)"
    ]
    assert _layer_violations({"core.run.pipeline": {"core.load.generator"}}) == []


def test_pages_import_only_portal_facing_packages() -> None:
    bad = []
    for p in [*(REPO / "pages").rglob("*.py"), REPO / "app.py", REPO / "serve.py"]:
        for m in _core_targets(p):
            if layer_of(m) not in PAGES_LAYERS:
                bad.append(f"{p.name} -> {m}")
    assert bad == []


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _private_imports(path: Path, module: str | None = None) -> list[str]:
    """``from core.x import _name`` where ``_name`` is private to another module (dunders are
    not private; a package's own ``__init__`` may gather its modules); a relative import
    counts as the absolute one it is."""
    own = module or _module_name(path)
    bad = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (source := _from_module(node, own)):
            if not source.startswith("core") or source == own:
                continue
            for a in node.names:
                if _private(a.name):
                    bad.append(f"{own}: from {source} import {a.name}")
    return bad


def _module_bindings(tree: ast.AST, own: str) -> set[str]:
    """The names a file binds to core modules: ``import core.x`` (``core``), ``import core.x
    as y``, ``from core import x`` / ``from . import x`` where x is a module."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "core":
                    names.add(a.asname or "core")
        elif isinstance(node, ast.ImportFrom) and (source := _from_module(node, own)):
            names |= {a.asname or a.name for a in node.names if f"{source}.{a.name}" in CORE}
    return names


def _own_names(tree: ast.AST) -> set[str]:
    """Every name a file defines itself: functions, classes, assigned names and attributes
    (``self._x = ...``), class fields, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return names


def _private_attributes(path: Path, module: str | None = None) -> list[str]:
    """Private attributes read across modules. ``m._x`` on a name bound to a core module
    (``import core.x as m``, ``from core.run import launcher``) is always another module's
    private; ``obj._x`` on anything but ``self`` / ``cls`` is one unless this file defines
    ``_x`` itself (its own class's attribute, read by its own functions). A name bound to a
    module outside core (``os._exit``) is that library's documented business, not ours."""
    own = module or _module_name(path)
    tree = ast.parse(path.read_text())
    modules, defined = _module_bindings(tree, own), _own_names(tree)
    other_imports = {  # names bound by imports from outside core
        (a.asname or a.name).split(".")[0]
        for node in ast.walk(tree)
        if (isinstance(node, ast.Import) or (isinstance(node, ast.ImportFrom) and not node.level))
        for a in node.names
        if not (getattr(node, "module", None) or a.name).startswith("core")
    }
    bad = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not _private(node.attr):
            continue
        root = node.value
        while isinstance(root, ast.Attribute):
            root = root.value
        name = root.id if isinstance(root, ast.Name) else None
        on_module = name in modules
        if not on_module and (
            name in ("self", "cls") or name in other_imports or node.attr in defined
        ):
            continue
        bad.append(f"{own}:{node.lineno}: {ast.unparse(node)}")
    return bad


def test_no_private_name_is_imported_across_modules() -> None:
    files = [
        *(REPO / "core").rglob("*.py"),
        *(REPO / "pages").rglob("*.py"),
        REPO / "app.py",
        REPO / "serve.py",
    ]
    bad = [line for p in files for line in _private_imports(p)]
    assert bad == []


def test_the_private_import_check_sees_one(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text("from core.run.pipeline import _result\nfrom core.config import RunSpec\n")
    assert len(_private_imports(f, "core.analysis.x")) == 1
    f.write_text("from ..run.pipeline import _result\nfrom .runs import RunView\n")
    assert _private_imports(f, "core.analysis.x") == [
        "core.analysis.x: from core.run.pipeline import _result"
    ]


def test_no_private_attribute_is_read_across_modules() -> None:
    files = [
        *(REPO / "core").rglob("*.py"),
        *(REPO / "pages").rglob("*.py"),
        REPO / "app.py",
        REPO / "serve.py",
    ]
    bad = [line for p in files for line in _private_attributes(p)]
    assert bad == []


def test_the_private_attribute_check_sees_one(tmp_path: Path) -> None:
    f = tmp_path / "x.py"
    f.write_text(
        "import os\n"
        "import core.run.launcher as launcher\n"
        "from core.run import gpu\n"
        "from . import pipeline\n"
        "from core.config import RunSpec\n"
        "class Mine:\n"
        "    def __init__(self):\n"
        "        self._mine = 1\n"
        "def f(run, other):\n"
        "    os._exit(0)\n"  # a library's own (documented) private: not ours
        "    other._mine\n"  # this file's own class's attribute
        "    run.server._pids\n"  # launcher.ManagedServer's, read here
        "    launcher._die_with_parent\n"
        "    gpu._nvml\n"
        "    pipeline._Run\n"
        "    other.__class__\n"  # a dunder is no private
        "    RunSpec._fields\n"  # a class of another core module
    )
    assert _private_attributes(f, "core.run.x") == [
        "core.run.x:12: run.server._pids",
        "core.run.x:13: launcher._die_with_parent",
        "core.run.x:14: gpu._nvml",
        "core.run.x:15: pipeline._Run",
        "core.run.x:17: RunSpec._fields",
    ]


def test_the_layer_check_sees_a_relative_import(tmp_path: Path) -> None:
    """``from ..run.pipeline import x`` in an analysis module is the edge analysis → run."""
    f = tmp_path / "card.py"
    f.write_text("from ..run.pipeline import execute_run\nfrom . import runs\n")
    edges = {"core.analysis.card": _core_targets(f, module="core.analysis.card")}
    assert edges["core.analysis.card"] == {"core.run.pipeline", "core.analysis.runs"}
    assert _layer_violations(edges) == ["core.analysis.card (analysis) -> core.run.pipeline (run)"]
    # from a package's __init__, "." is the package itself
    assert _core_targets(f, module="core.views") == {"core.run.pipeline", "core.views"}


def test_a_run_process_loads_no_statistics_library(
    fake_sglang: Path, settings: Settings, tiny_tokenizer_dir: Path
) -> None:
    """Every run is its own ``python -m core run`` process; scipy and statsmodels take
    seconds to import on a 2-core host and a run needs neither (they serve the pages and
    reports over many runs). A real run on the fake SGLang, its end-of-run report
    included, imports neither (``-X importtime`` lists every module it imported)."""
    out = subprocess.run(
        [
            *(sys.executable, "-X", "importtime", "-m", "core", "run", "--engine", "sglang"),
            *("--model", str(tiny_tokenizer_dir), "--no-probe", "--warmup-requests", "0"),
            *("--concurrency", "1", "--num-prompts", "2", "--input-len", "8"),
            *("--output-len", "4"),
        ],
        cwd=REPO,
        env={
            **os.environ,
            "SERVELAB_DATA_DIR": str(settings.data_dir),
            "SERVELAB_SGLANG_PYTHON": sys.executable,
        },
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0 and ": succeeded" in out.stdout, out.stdout + out.stderr[-3000:]
    imported = {
        line.split("|")[-1].strip()
        for line in out.stderr.splitlines()
        if line.startswith("import time:")
    }
    assert "core.run.pipeline" in imported and "pandas" in imported  # the list is complete
    assert not {m for m in imported if m.split(".")[0] in ("scipy", "statsmodels")}
