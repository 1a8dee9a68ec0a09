"""core/shapes.py and the shape option: shipped shapes parse and materialise into a model
folder without weights; ``server.shape`` reaches SGLang's argv (``--load-format dummy``) and
an MoE shape's environment (uniform routing) through a real run against the fake SGLang
server; preflight refuses a shape where the engine cannot load dummy weights."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import streamlit as st
from pydantic import ValidationError
from streamlit.testing.v1 import AppTest

from core.config import RunSpec, ServerConfig
from core.engines.sglang import build_sglang_argv, uniform_experts_env
from core.errors import ConfigError
from core.launch.host import HostInfo
from core.launch.preflight import preflight
from core.load.prompts import load_tokenizer, make_prompts
from core.run_folder import RunFolder
from core.settings import Settings
from core.shapes import (
    DUMMY_WEIGHTS,
    SHAPES_DIR,
    fill_vocabulary,
    load_shape,
    materialise,
    runs_routing,
    shape_names,
    shape_note,
    shapes_line,
)
from core.store import Catalog
from tests.conftest import WORDS
from tests.helpers import open_page
from tests.test_pipeline import only_run, run_cli

REPO = Path(__file__).resolve().parent.parent
MOE, DENSE = "qwen3-30b-a3b", "llama-3.1-8b"


def test_the_shipped_shapes_parse_with_their_facts() -> None:
    assert {MOE, DENSE, "glm-5-fp8-8l"} <= set(shape_names())
    llama, qwen = load_shape(DENSE), load_shape(MOE)
    assert (llama.architecture, llama.layers, llama.is_moe) == ("LlamaForCausalLM", 32, False)
    assert (llama.vocab_size, llama.context_tokens) == (128256, 131072)
    assert (qwen.architecture, qwen.layers, qwen.experts) == ("Qwen3MoeForCausalLM", 48, 128)
    glm = load_shape("glm-5-fp8-8l")
    assert glm.is_moe and glm.layers == 8  # truncated from 78 to fit one H200
    assert (SHAPES_DIR / "README.md").is_file()  # where they come from, and the licence


def test_an_unknown_shape_names_the_known_ones() -> None:
    with pytest.raises(ConfigError) as exc:
        load_shape("no-such-shape")
    assert exc.value.field == "server.shape" and MOE in exc.value.message


def test_materialise_writes_config_and_tokenizer_and_no_weights(
    tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    folder = materialise(load_shape(MOE), tmp_path / "m", tiny_tokenizer_dir)
    assert json.loads((folder / "config.json").read_text()) == load_shape(MOE).config
    assert (folder / "tokenizer.json").is_file()
    assert not [p for p in folder.iterdir() if p.suffix in (".safetensors", ".bin", ".pt")]
    with pytest.raises(ConfigError, match="no tokenizer files"):
        materialise(load_shape(MOE), tmp_path / "n", tmp_path / "m" / "nothing")


def test_the_materialised_tokenizer_spells_every_id_the_shape_can_generate(
    tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    """A dummy model draws ids from the shape's whole vocabulary: each must stream as text
    (else TTFT/ITL time only the rare visible ones), and the prompts must not change."""
    from tokenizers import Tokenizer

    shape = load_shape(MOE)
    folder = materialise(shape, tmp_path / "m", tiny_tokenizer_dir)
    small = Tokenizer.from_file(str(tiny_tokenizer_dir / "tokenizer.json"))
    filled = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert small.get_vocab_size() < 1000 and filled.get_vocab_size() == shape.vocab_size
    last = shape.vocab_size - 1
    assert filled.decode([small.get_vocab_size(), last]) == (
        f" id{small.get_vocab_size()} id{last}"
    )
    text = " ".join(WORDS) + " id700 x"
    assert filled.encode(text).ids == small.encode(text).ids
    tok_small = load_tokenizer(str(tiny_tokenizer_dir))
    tok_filled = load_tokenizer(str(folder))
    assert make_prompts(tok_filled, 4, 32, 8, seed=3) == make_prompts(tok_small, 4, 32, 8, seed=3)


def test_a_tokenizer_it_cannot_fill_travels_unchanged(tmp_path: Path) -> None:
    source = tmp_path / "tok"
    source.mkdir()
    unigram = {"model": {"type": "Unigram", "vocab": [["a", 0.0]]}, "decoder": None}
    (source / "tokenizer.json").write_text(json.dumps(unigram))
    assert fill_vocabulary(unigram, 10) is None
    folder = materialise(load_shape(MOE), tmp_path / "m", source)
    assert json.loads((folder / "tokenizer.json").read_text()) == unigram
    full = {"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}, "decoder": {"type": "ByteLevel"}}
    assert fill_vocabulary(full, 2) is None
    assert fill_vocabulary(full, 4)["model"]["vocab"] == {
        "a": 0,
        "b": 1,
        "\u0120id2": 2,
        "\u0120id3": 3,
    }


def test_a_set_of_runs_says_how_its_moe_routing_ran_only_when_they_agree() -> None:
    assert runs_routing([{"uniform_experts": True}, {"uniform_experts": True}, {}]) is True
    assert runs_routing([{"uniform_experts": False}]) is False
    assert runs_routing([{"uniform_experts": True}, {"uniform_experts": False}]) is None
    assert runs_routing([{}, {"uniform_experts": "yes"}]) is None
    line = shapes_line([{"server": {"shape": MOE}}], runs_routing([{"uniform_experts": True}]))
    assert line.endswith("; MoE routing simulated uniformly.")


def test_the_shape_field_is_checked_at_the_edge() -> None:
    with pytest.raises(ValidationError, match="leave model unset"):
        ServerConfig(engine="sglang", shape=MOE, model="/models/x")
    with pytest.raises(ValidationError, match="shape's name"):
        ServerConfig(engine="sglang", shape="../etc")
    # dummy weights answer nothing a pattern can match: the default probe expects none
    spec = RunSpec.model_validate({"server": {"engine": "sglang", "shape": MOE}})
    assert spec.plan.probe is not None and spec.plan.probe.expect is None
    assert RunSpec().plan.probe is not None and RunSpec().plan.probe.expect is not None
    assert shape_note(MOE) == f"{MOE} shape, {DUMMY_WEIGHTS}" and shape_note(None) == ""


def test_argv_loads_dummy_weights_and_env_makes_moe_routing_uniform() -> None:
    moe = ServerConfig(engine="sglang", shape=MOE)
    argv = build_sglang_argv(moe, 30000, "python", "0.5.17", frozenset())
    assert argv[argv.index("--load-format") + 1] == "dummy"
    assert uniform_experts_env(moe) == {"SGLANG_SIMULATE_UNIFORM_EXPERTS": "1"}
    assert uniform_experts_env(moe.model_copy(update={"uniform_experts": False})) == {}
    assert uniform_experts_env(ServerConfig(engine="sglang", shape=DENSE)) == {}
    plain = build_sglang_argv(ServerConfig(engine="sglang"), 30000, "python", "0.5.17", frozenset())
    assert "--load-format" not in plain


@pytest.mark.parametrize(
    ("server", "field", "needle"),
    [
        ({"engine": "transformers", "shape": MOE}, "server.shape", "cannot load dummy weights"),
        (
            {"engine": "endpoint", "endpoint_url": "http://127.0.0.1:9", "shape": MOE},
            "server.shape",
            "cannot load dummy weights",
        ),
        ({"engine": "sglang", "shape": "no-such-shape"}, "server.shape", "no shape"),
    ],
)
def test_preflight_refuses_a_shape_the_engine_cannot_run(
    settings: Settings, server: dict[str, object], field: str, needle: str
) -> None:
    spec = RunSpec.model_validate({"server": server})
    problems = {p.field: p for p in preflight(spec, None, settings)}
    assert field in problems and needle in problems[field].message, problems
    assert problems[field].fix


def test_preflight_refuses_a_probe_pattern_on_dummy_weights(settings: Settings) -> None:
    spec = RunSpec.model_validate(
        {"server": {"engine": "sglang", "shape": MOE}, "plan": {"probe": {"expect": "paris"}}}
    )
    problems = {p.field: p for p in preflight(spec, None, settings)}
    assert "meaningless" in problems["plan.probe.expect"].message


def test_preflight_refuses_a_tokenizer_larger_than_the_shape(
    settings: Settings, tmp_path: Path
) -> None:
    big = tmp_path / "big-tok"
    big.mkdir()
    vocab = {f"t{i}": i for i in range(200_000)}
    (big / "tokenizer.json").write_text(json.dumps({"model": {"vocab": vocab}}))
    spec = RunSpec.model_validate(
        {"server": {"engine": "sglang", "shape": DENSE, "tokenizer": str(big)}}
    )
    host = HostInfo(gpus=(), engines={})
    problems = {p.field: p for p in preflight(spec, host, settings, local=True)}
    assert "exceed the shape's vocabulary" in problems["server.tokenizer"].message


def test_a_shape_run_against_the_fake_sglang_carries_dummy_and_uniform_routing(
    fake_sglang: Path,
    settings: Settings,
    tiny_tokenizer_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = run_cli(
        settings,
        "run",
        "--engine",
        "sglang",
        "--shape",
        MOE,
        "--tokenizer",
        str(tiny_tokenizer_dir),
        "--concurrency",
        "2",
        "--num-prompts",
        "4",
        "--input-len",
        "16",
        "--output-len",
        "8",
    )
    assert out.returncode == 0, out.stdout + out.stderr
    folder: RunFolder = only_run(settings)
    assert folder.status()["state"] == "succeeded"
    launch = folder.read("launch.json")
    argv = launch["argv"]
    assert argv[argv.index("--load-format") + 1] == "dummy"
    model = Path(argv[argv.index("--model-path") + 1])
    assert model == settings.models_dir / "shapes" / MOE
    assert json.loads((model / "config.json").read_text())["num_experts"] == 128
    assert launch["env"] == {"SGLANG_SIMULATE_UNIFORM_EXPERTS": "1"}
    assert launch["shape"] == MOE and launch["uniform_experts"] is True
    # the variable reached the server process: the fake echoes its environment
    raw = folder.read("facts.json")["server_info_raw"]
    assert raw["fake_simulate_env"] == {"SGLANG_SIMULATE_UNIFORM_EXPERTS": "1"}
    assert raw["load_format"] == "dummy"
    spec = folder.read("spec.json")
    assert spec["server"]["shape"] == MOE and spec["plan"]["probe"]["expect"] is None
    # the catalog (the Runs page, `python -m core runs`) names the shape and its weights
    row = Catalog(settings.catalog_path, settings.runs_dir).get_run(folder.run_id)
    assert row is not None and row["model"] == f"{MOE} (dummy weights)"
    # labelled where a reader meets it: the CLI's report and the Run page
    line = f"Model shape {MOE}: {DUMMY_WEIGHTS}; MoE routing simulated uniformly."
    assert line in run_cli(settings, "show", folder.run_id).stdout
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("SERVELAB_WORKER", "off")
    st.cache_resource.clear()
    app = open_page(
        AppTest.from_file(str(REPO / "app.py"), default_timeout=120),
        "pages/run.py",
        run=folder.run_id,
    )
    assert any(w.value == line for w in app.warning), [w.value for w in app.warning]


@pytest.mark.parametrize(
    "name",
    ["shape_team_change", "shape_2x2", "shape_versions", "vllm_graphs", "vllm_smoke", "engines"],
)
def test_the_gpu_plans_parse_and_pass_the_gate_without_a_host(
    settings: Settings, tiny_tokenizer_dir: Path, name: str
) -> None:
    """bench/gpu/plan_*.json on a shape as device.sh start hands them to the CLI: the
    tokenizer placeholder filled, the shape kept (no model path), no refusal from the gate
    for any arm (the engines plan's SGLang arm once passed --load-format itself, which
    SGLang's argv refuses: found here, not on the device)."""
    from core.experiments.design import parse_experiment

    data = json.loads((REPO / "bench" / "gpu" / f"plan_{name}.json").read_text())
    assert data["base"]["server"]["tokenizer"] == "TOKENIZER_DIR"
    data["base"]["server"]["tokenizer"] = str(tiny_tokenizer_dir)
    exp = parse_experiment(data)
    assert exp.base.server.shape in shape_names() and exp.base.plan.probe is not None
    assert exp.base.plan.probe.expect is None
    assert preflight(exp, None, settings) == []
    # every arm's argv as its engine builds it at launch (the shape's folder as the model):
    # no flag in extra_args that the engine sets itself (--load-format is the shape's)
    from core.engines.vllm import build_vllm_argv
    from core.experiments.design import expand

    for _, _, spec in expand(exp, "x"):
        server = spec.server.model_copy(update={"model": "/data/models/shapes/x"})
        build = build_vllm_argv if server.engine == "vllm" else build_sglang_argv
        argv = build(server, 1, "py", None, frozenset())
        assert argv.count("--load-format") == 1, argv


def test_an_experiment_on_a_shape_says_dummy_weights_in_its_report(settings: Settings) -> None:
    from core.experiments.records import ExperimentRecord
    from core.views.report import format_experiment

    spec = {"name": "x", "trials": 2, "base": {"server": {"engine": "sglang", "shape": MOE}}}
    record = ExperimentRecord(experiment_id="exp-20261205-000000-abcd", spec=spec, runs=[])
    assert f"Model shape {MOE}: {DUMMY_WEIGHTS}." in format_experiment(settings, record)
    plain = ExperimentRecord(experiment_id="exp-20261205-000000-abce", spec={"name": "y"})
    assert DUMMY_WEIGHTS not in format_experiment(settings, plain)


def test_the_launch_form_takes_a_shape_and_drops_the_default_probe_pattern(
    tmp_path: Path, tiny_tokenizer_dir: Path
) -> None:
    """The Launch form's "Model shape": the spec names the shape (model left unset), the
    default probe pattern is dropped (dummy weights), and on transformers the gate refuses it
    beside the field."""
    from core.engines.base import EngineInfo
    from core.launch.forms import FORM_DEFAULTS, SHAPE_FIELD_LABEL, launch_from_form, shape_choices

    assert DUMMY_WEIGHTS in SHAPE_FIELD_LABEL and set(shape_choices()) == {"", *shape_names()}
    host = HostInfo(
        gpus=("0: NVIDIA H200",),
        engines={
            "sglang": EngineInfo("sglang", True, "0.5.17"),
            "transformers": EngineInfo("transformers", True, "5.24.0"),
        },
    )
    exe = sys.executable
    settings = Settings(
        data_dir=tmp_path / "data",
        sglang_python=exe,
        transformers_python=exe,
        model_roots=(tiny_tokenizer_dir.parent,),
    )
    form = {
        **FORM_DEFAULTS,
        "engine": "sglang",
        "shape": MOE,
        "concurrency": "1",
        "tokenizer": str(tiny_tokenizer_dir),
        "device": "cuda",
    }
    specs, errors = launch_from_form(form, host, settings=settings)
    assert errors == {} and specs
    assert specs[0].server.shape == MOE and specs[0].server.model == FORM_DEFAULTS["model"]
    assert specs[0].plan.probe is not None and specs[0].plan.probe.expect is None
    _, errors = launch_from_form({**form, "engine": "transformers"}, host, settings=settings)
    assert "cannot load dummy weights" in errors.get("shape", "")


def test_a_release_that_does_not_read_the_routing_variable_gets_no_false_record(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Detection reads which releases declare SGLANG_SIMULATE_UNIFORM_EXPERTS (the fake
    0.5.23 does, the fake 0.5.14 does not); where it is missing the launch sets nothing and
    says the routing is the dummy gate's, and an explicit uniform_experts is refused."""
    from core.engines.base import EngineInfo
    from core.engines.sglang import SGLangAdapter

    fakes = REPO / "tests" / "fakes"
    found = {}
    for pkg in ("sglang_pkg", "sglang_0514_pkg"):
        monkeypatch.setenv("PYTHONPATH", str(fakes / pkg))
        info = SGLangAdapter(sys.executable).detect()
        found[info.version] = info.env_vars
    assert found == {"0.5.23": {"SGLANG_SIMULATE_UNIFORM_EXPERTS"}, "0.5.14": set()}
    old = EngineInfo("sglang", True, "0.5.14")
    adapter = SGLangAdapter(sys.executable)
    plan = adapter.plan_launch(ServerConfig(engine="sglang", shape=MOE), 30000, old)
    assert plan.env == {} and any("dummy gate's own" in n for n in plan.notes)
    with pytest.raises(ConfigError) as exc:
        adapter.plan_launch(ServerConfig(engine="sglang", shape=MOE, uniform_experts=True), 1, old)
    assert exc.value.field == "server.uniform_experts"
    new = EngineInfo("sglang", True, "0.5.23", env_vars=frozenset(found["0.5.23"]))
    plan = adapter.plan_launch(ServerConfig(engine="sglang", shape=MOE), 30000, new)
    assert plan.env == {"SGLANG_SIMULATE_UNIFORM_EXPERTS": "1"}


def test_routing_words_only_for_an_moe_shape_and_false_is_said() -> None:
    """launch.json records False for a dense shape (nothing to simulate) and for an MoE shape
    whose engine cannot simulate (vLLM): only the second is told, as uneven routing."""
    moe, dense = {"server": {"shape": MOE}}, {"server": {"shape": DENSE}}
    assert shapes_line([moe], False).endswith("MoE routing: the dummy gate's own (uneven).")
    assert shapes_line([moe], True).endswith("MoE routing simulated uniformly.")
    assert shapes_line([dense], False) == f"Model shape {DENSE}: {DUMMY_WEIGHTS}."
