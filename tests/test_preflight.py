"""core/launch/preflight.py, THE gate: bad plans × every door → the same problems, and nothing
queued (no run folder, no experiment, an empty catalog).

The doors are the real ones: the Launch form's core (``launch_from_form`` then
``queue_launch``, as pages/launch.py calls them), its grid (``grid_from_form`` then
``queue_launch``, as pages/_grid.py), ``python -m core run`` and ``python -m core experiment``
as subprocesses, ``queue_experiment`` and Explain (``check_explanation`` and
``submit_explanation``, as the Compare page and ``python -m core explain``). The host is this
one, detected as the CLI detects it, with the fake SGLang package (tests/fakes) installed so
that SGLang's knobs and KV pool are real to every door. A plan a door cannot express (a
recorded run cannot hold ``1e9``; a single run cannot vary its model) is not asked of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import streamlit as st
import yaml
from streamlit.testing.v1 import AppTest

from core.analysis.runs import load_run
from core.config import RunSpec, parse_whole_number
from core.engines import engine_names
from core.errors import ConfigError
from core.experiments.design import list_experiments, parse_experiment
from core.launch.explain import check_explanation, submit_explanation
from core.launch.forms import FORM_DEFAULTS, launch_from_form, refusal_errors
from core.launch.grid import grid_from_form
from core.launch.host import HostInfo, host_for
from core.launch.kv_pool import plan_pools
from core.launch.preflight import Problem, Refused, preflight
from core.launch.queue import queue_experiment, queue_launch
from core.settings import Settings, load_settings
from core.store import Catalog
from tests.conftest import FAKE_SGLANG_PATH
from tests.runs_by_hand import make_run

REPO = Path(__file__).resolve().parent.parent
BIG_CONTEXT, SMALL_CONTEXT = 4096, 64


@dataclass(frozen=True)
class Env:
    settings: Settings
    host: HostInfo
    big: str  # a model folder whose context holds the plans' requests
    small: str  # one whose context (64 tokens) does not
    tmp: Path


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Env]:
    """One data folder, model roots and host for every door (the CLI's subprocesses get the
    same environment), with the fake SGLang on PYTHONPATH."""
    tmp = tmp_path_factory.mktemp("preflight")
    models = tmp / "models"
    for name, context in (("big", BIG_CONTEXT), ("small", SMALL_CONTEXT)):
        (models / name).mkdir(parents=True)
        (models / name / "config.json").write_text(
            json.dumps({"model_type": "llama", "max_position_embeddings": context})
        )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SERVELAB_DATA_DIR", str(tmp / "data"))
        mp.setenv("SERVELAB_MODEL_ROOTS", str(models))
        mp.setenv("SERVELAB_WORKER", "off")
        mp.setenv("SERVELAB_EXECUTOR", "local")
        old = os.environ.get("PYTHONPATH")
        mp.setenv(
            "PYTHONPATH",
            os.pathsep.join([str(FAKE_SGLANG_PATH), str(REPO), *([old] if old else [])]),
        )
        settings = load_settings()
        host = host_for(settings, "local", engine_names())
        assert host.engines["sglang"].installed, host.engines["sglang"].reason
        yield Env(settings, host, str(models / "big"), str(models / "small"), tmp)


# --- the bad plans --------------------------------------------------------------------------


@dataclass(frozen=True)
class Bad:
    """A bad plan: its run spec as a plan file holds it, the same plan as the Launch form's
    fields, the problems every door must name (spec fields; form keys on the form), and the
    doors that can express it."""

    name: str
    spec: Callable[[Env], dict[str, Any]]
    form: Callable[[Env], dict[str, Any]]
    fields: frozenset[str]
    form_keys: frozenset[str]
    doors: tuple[str, ...]
    grid: Callable[[Env], tuple[str, str]] | None = None  # the varied knob, its values


ALL_DOORS = ("form", "grid", "cli_run", "cli_experiment", "queue_experiment", "explain")
POINT = {"concurrency": 1, "num_prompts": 2, "input_len": 60, "output_len": 8}


def _spec(engine: str, model: str, **server: Any) -> Callable[..., dict[str, Any]]:
    def make(e: Env, **point: Any) -> dict[str, Any]:
        where = {"big": e.big, "small": e.small}.get(model, str(e.tmp / "models" / model))
        return {
            "server": {"engine": engine, "model": where, **server},
            "plan": {"points": [{**POINT, **point}], "probe": None},
        }

    return make


def _form(engine: str, model: str, **fields: Any) -> Callable[[Env], dict[str, Any]]:
    def make(e: Env) -> dict[str, Any]:
        where = {"big": e.big, "small": e.small}.get(model, str(e.tmp / "models" / model))
        return {
            **FORM_DEFAULTS,
            "preset": "Single run",
            "engine": engine,
            "model": where,
            "concurrency": "1",
            "num_prompts": "2",
            "input_len": "60",
            "output_len": "8",
            "probe": False,
            **fields,
        }

    return make


BAD = [
    Bad(
        "1e9 output tokens",
        lambda e: _spec("transformers", "big")(e, output_len="1e9"),
        _form("transformers", "big", output_len="1e9"),
        frozenset({"plan.points.0.output_len"}),
        frozenset({"output_len"}),
        ("form", "grid", "cli_run", "cli_experiment", "queue_experiment"),
    ),
    Bad(
        "over the context, with kv_fill pool runs",
        lambda e: _spec("sglang", "small")(e, kv_fill=0.5),
        _form("sglang", "small", kv_fill="0.5"),
        frozenset({"plan.points.0.workload.over_context"}),
        frozenset({"input_len"}),  # fixed lengths: the lengths are what to shorten
        ALL_DOORS,
    ),
    Bad(
        "a grid over a model with a smaller context",
        lambda e: _spec("transformers", "big")(e),
        _form("transformers", "big"),
        frozenset({"plan.points.0.workload.over_context"}),
        frozenset({"grid_values_0"}),
        ("grid", "cli_experiment", "queue_experiment", "explain"),
        grid=lambda e: ("server.model", f"{e.big}, {e.small}"),
    ),
    Bad(
        "a flag the installed engine does not have",
        lambda e: _spec("transformers", "big", extra_args=["--no-such-flag"])(e),
        _form("transformers", "big", extra_args="--no-such-flag"),
        frozenset({"server.extra_args"}),
        frozenset({"extra_args"}),
        ALL_DOORS,
    ),
    Bad(
        "tp_size beyond this host's GPUs",
        lambda e: _spec("sglang", "big", tp_size=2)(e),
        _form("sglang", "big", tp_size="2"),
        frozenset({"server.tp_size"}),
        frozenset({"tp_size"}),
        ALL_DOORS,
    ),
    Bad(
        "kv_fill on an engine without a KV pool",
        lambda e: _spec("transformers", "big")(e, kv_fill=0.5),
        _form("transformers", "big", kv_fill="0.5"),
        frozenset({"plan.points.0.kv_fill"}),
        frozenset({"kv_fill"}),
        ALL_DOORS,
    ),
    Bad(
        "a model folder that does not exist",
        lambda e: _spec("transformers", "missing")(e),
        _form("transformers", "missing"),
        frozenset({"server.model"}),
        frozenset({"model"}),
        ALL_DOORS,
    ),
]


# --- the doors: each returns the fields it refused with ------------------------------------


def _experiment_data(bad: Bad, e: Env) -> dict[str, Any]:
    """The plan as an experiment plan file: its grid, else two arms that differ in dtype."""
    data: dict[str, Any] = {"name": bad.name, "base": bad.spec(e), "trials": 2}
    if bad.grid is not None:
        knob, values = bad.grid(e)
        data["grid"] = {"knobs": {knob: [v.strip() for v in values.split(",")]}}
    else:
        data["arms"] = [
            {"label": "f32", "changes": {"server.dtype": "float32"}},
            {"label": "bf16", "changes": {"server.dtype": "bfloat16"}},
        ]
    return data


def _fields(exc: ConfigError) -> set[str]:
    found = exc.problems if isinstance(exc, Refused) else (Problem(exc.field, exc.message),)
    return {p.field.removeprefix("base.") for p in found}  # a plan file nests the run in base


def _cli(e: Env, *argv: str) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "core", *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 2, done.stdout + done.stderr  # refused, as a bad input
    lines = [ln.removeprefix("error: ") for ln in done.stderr.splitlines()]
    return {ln.split(": ", 1)[0].split(" (")[0].removeprefix("base.") for ln in lines if ln}


def door_form(bad: Bad, e: Env) -> set[str]:
    specs, errors = launch_from_form(bad.form(e), e.host, settings=e.settings)
    if not errors:  # what pages/launch.py does next
        try:
            queue_launch(e.settings, specs, host=e.host)
        except ConfigError as exc:
            errors = refusal_errors(exc, specs[0])
    return set(errors)


def door_grid(bad: Bad, e: Env) -> set[str]:
    rows = [bad.grid(e) if bad.grid else ("server.dtype", "float32, bfloat16")]
    exp, errors = grid_from_form(
        {**bad.form(e), "trials": "2"}, rows, "auto", e.host, settings=e.settings
    )
    if exp is not None:  # what pages/_grid.py does next
        try:
            queue_launch(e.settings, exp, host=e.host)
        except ConfigError as exc:
            errors = refusal_errors(exc, exp.base)
    return set(errors)


def door_cli_run(bad: Bad, e: Env) -> set[str]:
    plan = e.tmp / "run.yaml"
    plan.write_text(yaml.safe_dump(bad.spec(e)).replace("'1e9'", "1e9"))  # as a person types
    return _cli(e, "run", "--plan", str(plan))


def door_cli_experiment(bad: Bad, e: Env) -> set[str]:
    plan = e.tmp / "experiment.yaml"
    plan.write_text(yaml.safe_dump(_experiment_data(bad, e)).replace("'1e9'", "1e9"))
    return _cli(e, "experiment", str(plan), "--no-wait")


def door_queue_experiment(bad: Bad, e: Env) -> set[str]:
    try:
        exp = parse_experiment(_experiment_data(bad, e))
        if bad.name.startswith("over the context"):  # the defect's path: pool runs planned
            pools = plan_pools(e.settings, exp, "check")
            assert pools is not None and len(pools.to_run) == 2
        queue_experiment(e.settings, exp, host=e.host)
    except ConfigError as exc:
        return _fields(exc)
    return set()


def door_explain(bad: Bad, e: Env) -> set[str]:
    """Run A holds the bad configuration and B differs from it (B's model, for the grid
    row; else its dtype): explaining B queues the grid over that knob."""
    spec = RunSpec.model_validate(bad.spec(e))
    server = spec.server.model_dump(mode="json")
    point = spec.plan.points[0].model_dump(mode="json")
    knob, values = bad.grid(e) if bad.grid else ("server.dtype", "float32, bfloat16")
    value_a, value_b = (v.strip() for v in values.split(","))
    name = knob.removeprefix("server.")
    runs = e.settings.runs_dir
    pair = [
        make_run(
            runs,
            f"20990101-00000{i}-{tag}",
            server={**server, name: value},
            points=[(point, {"output_throughput": 1.0}, "d")],
        )
        for i, (tag, value) in enumerate((("aaaa", value_a), ("bbbb", value_b)))
    ]
    try:
        a, b = (load_run(f) for f in pair)
        check = check_explanation(e.settings, a, b, trials=2, host=e.host)
        with pytest.raises(Refused) as refused:
            submit_explanation(e.settings, pair[0].run_id, pair[1].run_id, 2, host=e.host)
        assert set(check.problems) == _fields(refused.value)
        return set(check.problems)
    finally:
        for f in pair:
            shutil.rmtree(f.path)


DOORS: dict[str, Callable[[Bad, Env], set[str]]] = {
    "form": door_form,
    "grid": door_grid,
    "cli_run": door_cli_run,
    "cli_experiment": door_cli_experiment,
    "queue_experiment": door_queue_experiment,
    "explain": door_explain,
}
CASES = [pytest.param(bad, door, id=f"{bad.name} × {door}") for bad in BAD for door in bad.doors]


def _queued(settings: Settings) -> tuple[list[str], list[str], list[Any]]:
    runs = sorted(p.name for p in settings.runs_dir.iterdir()) if settings.runs_dir.is_dir() else []
    catalog = Catalog(settings.catalog_path, settings.runs_dir).list_runs()
    return runs, [x.experiment_id for x in list_experiments(settings)], catalog


@pytest.mark.parametrize(("bad", "door"), CASES)
def test_every_door_refuses_a_bad_plan_with_the_same_problems_and_queues_nothing(
    env: Env, bad: Bad, door: str
) -> None:
    found = DOORS[door](bad, env)
    form_door = door in ("form", "grid")
    assert found == (bad.form_keys if form_door else bad.fields)
    assert _queued(env.settings) == ([], [], [])


def test_the_gate_itself_names_the_same_fields(env: Env) -> None:
    """``preflight`` on the plans a RunSpec can hold, as the doors above ask it."""
    for bad in BAD:
        if bad.grid is not None or "1e9" in bad.name:
            continue
        found = preflight(RunSpec.model_validate(bad.spec(env)), env.host, env.settings)
        assert {p.field for p in found} == bad.fields, bad.name
        assert all(p.message for p in found)


def test_every_problem_says_what_is_wrong_and_separately_what_to_do(env: Env) -> None:
    """Each bad plan the gate can be asked (a grid's as its experiment): every problem names
    its field, what is wrong and a fix of its own, and every door shows both."""
    seen = 0
    for bad in BAD:
        if "1e9" in bad.name:  # refused by parsing, before the gate
            continue
        target = (
            parse_experiment(_experiment_data(bad, env))
            if bad.grid is not None
            else RunSpec.model_validate(bad.spec(env))
        )
        for p in preflight(target, env.host, env.settings):
            seen += 1
            assert p.field and p.message and p.fix, (bad.name, p)
            assert p.fix.strip() != p.message.strip(), (bad.name, p)
            assert p.fix not in p.message and p.message not in p.fix, (bad.name, p)
            assert p.text == f"{p.message} — {p.fix}"
    assert seen >= len(BAD) - 1


def test_typed_whole_numbers_are_read_strictly_never_as_another_value() -> None:
    for typed in ("1e9", "1.5", "abc", "", " ", "1_000", "0x10", "١٢"):
        with pytest.raises(ValueError, match="is not a whole number: type digits only"):
            parse_whole_number(typed)
    assert [parse_whole_number(t) for t in ("256", " 16 ", "+3", "-3", 8.0)] == [256, 16, 3, -3, 8]
    with pytest.raises(ValueError):
        parse_whole_number(1.5)
    _, errors = launch_from_form(
        {**FORM_DEFAULTS, "output_len": "1e9", "num_prompts": "", "tp_size": "1.5"},
        HostInfo(gpus=(), engines={}),
    )
    assert errors["output_len"] == "'1e9' is not a whole number: type digits only, e.g. 256"
    assert errors["num_prompts"].startswith("empty is not a whole number")
    assert errors["tp_size"].startswith("'1.5' is not a whole number")


def test_a_write_failing_midway_withdraws_what_it_queued(env: Env) -> None:
    """All or nothing past the gate too: the experiments folder cannot be made (a file
    stands there), so experiment.json fails after the runs are written; they are removed."""
    exp = parse_experiment(
        {
            "name": "ok",
            "base": _spec("transformers", "big")(env),
            "arms": [
                {"label": "f32", "changes": {"server.dtype": "float32"}},
                {"label": "bf16", "changes": {"server.dtype": "bfloat16"}},
            ],
            "trials": 2,
        }
    )
    assert preflight(exp, env.host, env.settings) == []
    blocker = env.settings.data_dir / "experiments"
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("not a folder")
    try:
        with pytest.raises(Exception, match="experiment"):
            queue_experiment(env.settings, exp, host=env.host)
        assert sorted(p.name for p in env.settings.runs_dir.iterdir()) == []
    finally:
        blocker.unlink()


# --- the Launch page itself -----------------------------------------------------------------


def _launch_page(e: Env) -> AppTest:
    e.settings.data_dir.mkdir(parents=True, exist_ok=True)
    (e.settings.data_dir / ".demo-installed").write_text("")  # no demo runs copied in
    st.cache_resource.clear()  # the portal's settings and worker: this data folder's
    app = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    app.run()
    app.switch_page("pages/launch.py").run()
    assert not app.exception, app.exception
    return app


def test_the_launch_page_says_1e9_output_tokens_is_not_a_number(env: Env) -> None:
    app = _launch_page(env)
    app.text_input(key="model").set_value(env.big)
    app.text_input(key="output_len").set_value("1e9")
    app.button(key="submit_launch").click().run()
    assert not app.exception, app.exception
    shown = [e.value for e in app.error]
    assert "'1e9' is not a whole number: type digits only, e.g. 256" in shown
    assert _queued(env.settings) == ([], [], [])


def test_the_grid_over_a_smaller_context_model_is_shown_beside_its_row(env: Env) -> None:
    """pages/_grid.py raised an uncaught ConfigError here; now the row says why."""
    app = _launch_page(env)
    app.selectbox(key="preset").set_value("Single run")
    app.text_input(key="model").set_value(env.big)
    app.text_input(key="concurrency").set_value("1")
    app.text_input(key="input_len").set_value("60")
    app.text_input(key="output_len").set_value("8")
    app.selectbox(key="grid_knob_0").set_value("server.model")
    app.text_input(key="grid_values_0").set_value(f"{env.big}, {env.small}")
    app.button(key="submit_grid").click().run()
    assert not app.exception, app.exception
    assert any("exceed the model's context of 64" in e.value for e in app.error)
    assert _queued(env.settings) == ([], [], [])


def test_a_dry_run_says_what_the_gate_would_refuse(env: Env) -> None:
    """``experiment --dry-run`` queues nothing and names every field queueing would refuse."""
    bad = next(b for b in BAD if b.name.startswith("tp_size"))
    plan = env.tmp / "dry.yaml"
    plan.write_text(yaml.safe_dump(_experiment_data(bad, env)))
    done = subprocess.run(
        [sys.executable, "-m", "core", "experiment", "--dry-run", str(plan)],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "Queueing it would be refused, every field at once:" in done.stdout
    assert "  server.tp_size: server.tp_size 2 needs a GPU" in done.stdout
    assert _queued(env.settings) == ([], [], [])
