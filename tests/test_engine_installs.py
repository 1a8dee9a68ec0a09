"""Engine installations as a knob: named installations (a file in the data folder and
SERVELAB_ENGINE_INSTALLS), each detected once, chosen per run (server.engine_install).

Two fake SGLang installations of different versions are two wrapper scripts, as a user
stages two releases side by side (``#!/bin/sh`` setting PYTHONPATH, then ``exec python``):
tests/fakes/sglang_pkg (0.5.23, per-phase CUDA graph flags) and tests/fakes/sglang_0514_pkg
(0.5.14, the one-phase flags, no --incremental-streaming-output)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.analysis.runs import load_run
from core.config import ServerConfig
from core.engines import get_adapter
from core.errors import ConfigError
from core.executors.base import run_env
from core.experiments.design import list_experiments, parse_experiment
from core.launch.explain import explain_plan
from core.launch.host import host_for
from core.launch.preflight import Refused
from core.launch.queue import queue_experiment
from core.run_folder import RunFolder
from core.settings import INSTALLS_FILE, INSTALLS_VAR, Settings, load_settings

REPO = Path(__file__).resolve().parent.parent
FAKES = REPO / "tests" / "fakes"
NEW, OLD = "sglang-0.5.23", "sglang-0.5.14"


def _wrapper(folder: Path, name: str, pythonpath: Path) -> Path:
    """An installation's python as a wrapper script; each call is logged (the detection
    count), then the real interpreter runs with that installation's packages."""
    path = folder / f"{name}-python"
    log = folder / f"{name}.calls"
    path.write_text(
        f'#!/bin/sh\necho "$*" >> "{log}"\nPYTHONPATH="{pythonpath}" exec "{sys.executable}" "$@"\n'
    )
    path.chmod(0o755)
    return path


@pytest.fixture
def installs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Two SGLang installations by SERVELAB_ENGINE_INSTALLS; no fake on this process's
    PYTHONPATH, so only the wrappers find an `sglang`."""
    folder = tmp_path / "installs"
    folder.mkdir()
    pythons = {
        NEW: _wrapper(folder, NEW, FAKES / "sglang_pkg"),
        OLD: _wrapper(folder, OLD, FAKES / "sglang_0514_pkg"),
    }
    monkeypatch.setenv(INSTALLS_VAR, ";".join(f"{n}={p}" for n, p in pythons.items()))
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(tmp_path / "data"))
    for var in list(os.environ):
        if var.startswith("FAKE_SGLANG_"):
            monkeypatch.delenv(var)
    return pythons


def _calls(python: Path, text: str) -> int:
    log = python.with_name(python.name.removesuffix("-python") + ".calls")
    return sum(text in line for line in log.read_text().splitlines()) if log.exists() else 0


# --- where installations are defined ----------------------------------------------------------


def test_installations_come_from_the_file_and_the_variable(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / INSTALLS_FILE).write_text(
        json.dumps(
            {
                "sglang-0.5.14": {"engine": "sglang", "python": "/opt/a/bin/python"},
                "tf-old": {"engine": "transformers", "python": "/opt/tf/bin/python"},
                "sglang-0.5.17": "/opt/file/bin/python",
            }
        )
    )
    env = {
        "SERVELAB_DATA_DIR": str(data),
        # the variable wins over the file for a shared name; engine:python spelled out
        INSTALLS_VAR: "sglang-0.5.17=/opt/env/bin/python; tf-new=transformers:/opt/tf2/py",
    }
    s = load_settings(env)
    by_name = {i.name: (i.engine, i.python) for i in s.engine_installs}
    assert by_name == {
        "sglang-0.5.14": ("sglang", "/opt/a/bin/python"),
        "tf-old": ("transformers", "/opt/tf/bin/python"),
        "sglang-0.5.17": ("sglang", "/opt/env/bin/python"),
        "tf-new": ("transformers", "/opt/tf2/py"),
    }
    assert s.engine_python("sglang", "sglang-0.5.14") == "/opt/a/bin/python"
    assert s.engine_python("sglang", None) == s.sglang_python  # None: the default install
    with pytest.raises(ConfigError) as info:
        s.engine_python("sglang", "sglang-9")
    assert info.value.field == "server.engine_install"
    assert "sglang-0.5.14" in info.value.message and INSTALLS_VAR in info.value.message
    with pytest.raises(ConfigError) as info:
        s.engine_python("sglang", "tf-old")
    assert "installation of transformers" in info.value.message
    # a run process gets every installation, whatever its own data folder holds
    again = load_settings({INSTALLS_VAR: run_env(s)[INSTALLS_VAR]})
    assert again.engine_installs == tuple(
        i.__class__(i.name, i.engine, i.python, INSTALLS_VAR) for i in s.engine_installs
    )


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{not json", "cannot be read as JSON"),
        ('["a"]', "must be a JSON object"),
        ('{"bad name!": "/p"}', "entry 'bad name!'"),
        ('{"mine": "/opt/x/python"}', "name the engine"),
        ('{"sglang-x": {"engine": "sglang"}}', "python must be the path"),
        ('{"sglang-x": {"python": "/p", "pyhton": "/q"}}', "give the python path"),
    ],
)
def test_a_bad_installs_file_names_the_file_the_entry_and_the_fix(
    tmp_path: Path, text: str, says: str
) -> None:
    (tmp_path / INSTALLS_FILE).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings({"SERVELAB_DATA_DIR": str(tmp_path)})
    assert info.value.field == str(tmp_path / INSTALLS_FILE)
    assert says in info.value.message
    assert "e.g." in info.value.message  # the fix: what an entry looks like


def test_a_bad_variable_entry_is_refused_naming_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        load_settings({"SERVELAB_DATA_DIR": str(tmp_path), INSTALLS_VAR: "sglang-a"})
    assert info.value.field == INSTALLS_VAR and "'sglang-a'" in info.value.message


def test_the_name_is_validated_where_the_run_is_configured() -> None:
    assert ServerConfig(engine="sglang", engine_install=OLD).engine_install == OLD
    with pytest.raises(ValueError, match="installation's name"):
        ServerConfig(engine="sglang", engine_install="../x")
    with pytest.raises(
        ValueError, match="engine_install applies to engines with named installations"
    ):
        ServerConfig(engine="endpoint", endpoint_url="http://127.0.0.1:1", engine_install=OLD)


# --- each installation detected with its own version and option list ----------------------------


def test_each_installation_is_detected_once_and_builds_its_own_argv(
    installs: dict[str, Path],
) -> None:
    settings = load_settings()
    new = get_adapter("sglang", settings, NEW).detect()
    old = get_adapter("sglang", settings, OLD).detect()
    assert (new.version, old.version) == ("0.5.23", "0.5.14")
    assert "--cuda-graph-max-bs-decode" in new.options - old.options
    assert "--cuda-graph-max-bs" in old.options - new.options
    # the option list is kept per installation: a second detection runs no --help
    for name in (NEW, OLD):
        assert get_adapter("sglang", settings, name).detect().options
        assert _calls(installs[name], "--help") == 1
    server = ServerConfig(engine="sglang", model="/m", cuda_graph_max_bs=16)
    argv = {
        name: get_adapter("sglang", settings, name)
        .plan_launch(server.model_copy(update={"engine_install": name}), 30000, info)
        .argv
        for name, info in ((NEW, new), (OLD, old))
    }
    assert argv[NEW] is not None and argv[OLD] is not None
    assert argv[NEW][0] == str(installs[NEW]) and argv[OLD][0] == str(installs[OLD])
    assert argv[NEW][-2:] == ["--cuda-graph-max-bs-decode", "16"]
    assert argv[OLD][-2:] == ["--cuda-graph-max-bs", "16"]
    off = server.model_copy(update={"cuda_graphs": False, "cuda_graph_max_bs": None})
    assert "--disable-cuda-graph" in (
        get_adapter("sglang", settings, OLD).plan_launch(off, 30000, old).argv or []
    )


def test_a_transformers_installation_runs_serve_with_its_own_python(
    tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    """Two transformers venvs are a version A/B too: the installation's python runs
    `serve` (its detection is the default one's code, keyed by that interpreter; its
    option list is given here: reading a real `serve --help` costs minutes on a busy host)."""
    from core.engines import EngineInfo, detect_cache
    from core.engines.transformers_serve import CLI_MODULE, NOTE_MODEL_POSITIONAL

    wrapper = _wrapper(tmp_path, "tf", Path(sys.prefix))
    settings = Settings(
        data_dir=tmp_path / "data",
        sglang_python=sys.executable,
        transformers_python=sys.executable,
        engine_installs=load_settings(
            {INSTALLS_VAR: f"tf-b=transformers:{wrapper}"}
        ).engine_installs,
    )
    adapter = get_adapter("transformers", settings, "tf-b")
    assert detect_cache.interpreter(str(wrapper)) != detect_cache.interpreter(sys.executable)
    info = EngineInfo(
        "transformers",
        True,
        "5.17.0",
        options=frozenset({"--host", "--port", "--continuous-batching", "--device", "--dtype"}),
        notes=(NOTE_MODEL_POSITIONAL,),
    )
    # a model folder of its own: the default one would be converted into this fresh data
    # folder first (a minute)
    server = ServerConfig(engine_install="tf-b", device="cpu", model=str(tiny_tokenizer_dir))
    plan = adapter.plan_launch(server, 30000, info)
    assert plan.argv is not None and plan.argv[:3] == [str(wrapper), "-m", CLI_MODULE]


# --- refused before anything is queued ---------------------------------------------------------


def _install_ab(*, trials: int = 3, **server: object) -> dict[str, object]:
    return {
        "name": "0.5.14 vs 0.5.23",
        "trials": trials,
        "base": {
            "server": {"engine": "sglang", "model": "/m", **server},
            "plan": {"points": [{"concurrency": 1, "num_prompts": 2, "output_len": 4}]},
        },
        "grid": {"knobs": {"server.engine_install": [OLD, NEW]}},
    }


def test_a_flag_one_installation_lacks_is_refused_naming_the_field(
    installs: dict[str, Path],
) -> None:
    settings = load_settings()
    exp = parse_experiment(_install_ab(extra_args=["--incremental-streaming-output"]))
    arms = [a.changes["server.engine_install"] for a in exp.arms]
    host = host_for(settings, "local", ["sglang"], arms)
    with pytest.raises(Refused) as refused:
        queue_experiment(settings, exp, host=host)
    # every problem at once (the gate: core/launch/preflight.py; /m is not here either)
    flag = {p.field: p.message for p in refused.value.problems}["server.extra_args"]
    assert OLD in flag and "0.5.14" in flag
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())
    # an installation not configured here: refused the same way, naming the field
    exp = parse_experiment(
        {**_install_ab(), "grid": {"knobs": {"server.engine_install": [OLD, "sglang-9"]}}}
    )
    host = host_for(settings, "local", ["sglang"], [OLD, "sglang-9"])
    with pytest.raises(Refused) as info:
        queue_experiment(settings, exp, host=host)
    named = {p.field: p.message for p in info.value.problems}
    assert "sglang-9" in named["server.engine_install"]


def test_the_cli_refuses_it_too_and_lists_the_installations(
    installs: dict[str, Path], tmp_path: Path
) -> None:
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_install_ab(extra_args=["--incremental-streaming-output"])))
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(plan)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode != 0
    assert "server.extra_args" in out.stderr + out.stdout
    assert "--incremental-streaming-output is unknown to SGLang 0.5.14" in out.stderr + out.stdout
    listing = subprocess.run(
        [sys.executable, "-m", "core", "installs"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert listing.returncode == 0, listing.stderr
    rows = {
        line.split()[0]: line.split() for line in listing.stdout.splitlines()[1:] if line[:1] != " "
    }
    assert rows[OLD][1:4] == ["sglang", "0.5.14", "yes"] and rows[OLD][4] == str(installs[OLD])
    assert rows[NEW][1:4] == ["sglang", "0.5.23", "yes"]


# --- an A/B of two installations, end to end ----------------------------------------------------


def test_an_ab_of_two_installations_runs_and_explains_the_version(
    installs: dict[str, Path], tiny_tokenizer_dir: Path, tmp_path: Path
) -> None:
    """Arms that differ only by installation run against the two fakes (real processes);
    each run records its installation and the version it detected, its argv comes from its
    installation's own --help, and the verdict and Compare's explanation name the version
    change as the installation's."""
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_install_ab(model=str(tiny_tokenizer_dir), cuda_graph_max_bs=8)))
    out = subprocess.run(
        [sys.executable, "-m", "core", "experiment", str(plan)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "runs: succeeded=6" in out.stdout
    assert (
        f"confounders: none; engine version 0.5.14→0.5.23 (installation {OLD}→{NEW})" in out.stdout
    )
    settings = load_settings()
    (record,) = list_experiments(settings)
    views = {}
    for run in record.runs:
        view = load_run(RunFolder(settings.runs_dir / run.run_id))
        install = view.spec["server"]["engine_install"]
        version = "0.5.14" if install == OLD else "0.5.23"
        assert view.facts["engine_install"] == install
        assert view.facts["engine_version"] == version
        argv = view.launch["argv"]
        assert argv[0] == str(installs[install])
        flag = "--cuda-graph-max-bs" if install == OLD else "--cuda-graph-max-bs-decode"
        assert argv[argv.index(flag) + 1] == "8"
        views.setdefault(install, view)
    # detection once per installation and interpreter: every later run found it cached
    assert _calls(installs[OLD], "--help") == 1 and _calls(installs[NEW], "--help") == 1
    explained = explain_plan(views[OLD], views[NEW])
    assert explained.knobs == {"server.engine_install": (OLD, NEW)}
    assert "facts.engine_version" not in explained.not_explainable
    assert explained.explained == (f"engine version 0.5.14→0.5.23 (installation {OLD}→{NEW})",)


# --- the Launch form ----------------------------------------------------------------------------


def test_the_launch_form_picks_an_installation_and_says_why_one_cannot_run(
    tmp_path: Path,
) -> None:
    from core.engines import EngineInfo
    from core.launch.forms import FORM_DEFAULTS, launch_from_form
    from core.launch.host import HostInfo

    (tmp_path / "m").mkdir()
    settings = Settings(
        data_dir=tmp_path / "data",
        sglang_python=sys.executable,
        transformers_python=sys.executable,
        model_roots=(tmp_path,),
    )
    host = HostInfo(
        gpus=(),
        engines={"sglang": EngineInfo("sglang", False, reason="No module named sglang")},
        installs={
            OLD: EngineInfo("sglang", True, "0.5.14"),
            "tf-b": EngineInfo("transformers", True, "5.17.0"),
            "sglang-broken": EngineInfo("sglang", False, reason="No module named sglang"),
        },
    )
    base = {
        **FORM_DEFAULTS,
        "preset": "Single run",
        "engine": "sglang",
        "model": str(tmp_path / "m"),
        "device": "cpu",
    }
    # the default SGLang is missing here, the named one is not: the run is launchable
    specs, errors = launch_from_form(
        {**base, "engine_install": OLD}, host, settings=settings, local=False
    )
    assert errors == {} and specs[0].server.engine_install == OLD
    _, errors = launch_from_form(base, host, settings=settings, local=False)
    assert "engine" in errors
    for name, says in (
        ("tf-b", "tf-b is an installation of transformers"),
        ("sglang-broken", "No module named sglang"),
        ("sglang-9", "no engine installation named 'sglang-9'"),
    ):
        _, errors = launch_from_form(
            {**base, "engine_install": name}, host, settings=settings, local=False
        )
        assert says in errors["engine_install"], errors
    assert host.install_label(OLD) == f"{OLD} (sglang 0.5.14)"
