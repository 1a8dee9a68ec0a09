"""The launch form's rules: every bad field named at once, presets that differ in one knob."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from core.config import parse_request_rate
from core.engines import EngineInfo
from core.engines.transformers_serve import NOTE_CUDA_ABSENT, NOTE_MODEL_POSITIONAL
from core.launch.forms import (
    FORM_DEFAULTS,
    experiment_from_form,
    launch_from_form,
    launch_warnings,
)
from core.launch.host import HostInfo
from core.launch.presets import PRESETS, estimate_text, plan_estimate_s, run_estimate
from core.metrics import point_caveats
from core.settings import Settings

# What `transformers serve --help` of an installed 5.24 lists (core.engines.transformers_serve
# reads it at detection): the form checks extra flags against this list.
SERVE_OPTIONS = frozenset(
    {
        "--host",
        "--port",
        "--continuous-batching",
        "--no-continuous-batching",
        "--device",
        "--dtype",
        "--compile",
        "--no-compile",
        "--log-level",
        "--cb-max-memory-percent",
        "--default-seed",
        "-h",
        "--help",
    }
)
CPU_HOST = HostInfo(
    gpus=(),
    engines={
        "transformers": EngineInfo(
            "transformers",
            True,
            "5.24.0",
            options=SERVE_OPTIONS,
            notes=(NOTE_MODEL_POSITIONAL, NOTE_CUDA_ABSENT),
        ),
        "sglang": EngineInfo("sglang", False, reason="No module named sglang"),
        "endpoint": EngineInfo("endpoint", True),
    },
)
GPU_HOST = HostInfo(
    gpus=("0: NVIDIA H200",),
    engines={**CPU_HOST.engines, "sglang": EngineInfo("sglang", True, "0.5.23")},
)


def form(**changes: object) -> dict[str, object]:
    return {**FORM_DEFAULTS, **changes}


@pytest.fixture(autouse=True)
def settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """Model folders may be under tmp_path/models (and data/models) only."""
    (tmp_path / "models" / "tiny").mkdir(parents=True)
    monkeypatch.setenv("SERVELAB_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("SERVELAB_MODEL_ROOTS", str(tmp_path / "models"))
    return Settings(
        data_dir=tmp_path / "data",
        sglang_python=sys.executable,
        transformers_python=sys.executable,
        model_roots=(tmp_path / "models",),
    )


def test_unknown_flag_negative_number_and_bad_model_path_are_reported_together(
    tmp_path: Path,
) -> None:
    """Issue 12: one pass, each message beside its own field, nothing built."""
    specs, errors = launch_from_form(
        form(extra_args="--foo", num_prompts=-3, model=str(tmp_path / "elsewhere" / "m")), CPU_HOST
    )
    assert specs == []
    assert set(errors) == {"extra_args", "num_prompts", "model"}
    assert "--foo is not an option of transformers 5.24.0" in errors["extra_args"]
    assert "at least 1" in errors["num_prompts"] and "-3" in errors["num_prompts"]
    assert "outside the allowed model folders" in errors["model"]


def test_a_local_model_folder_must_exist_before_queuing(tmp_path: Path) -> None:
    _, errors = launch_from_form(form(model=str(tmp_path / "models" / "missing")), CPU_HOST)
    assert "does not exist" in errors["model"]
    specs, errors = launch_from_form(form(model=str(tmp_path / "models" / "tiny")), CPU_HOST)
    assert errors == {} and len(specs) == 1
    # a Ray run's model lives on its node: not checked here
    _, errors = launch_from_form(
        form(model=str(tmp_path / "models" / "missing")), CPU_HOST, local=False
    )
    assert errors == {}


def test_a_misspelt_flag_gets_the_near_option_and_a_known_flag_passes() -> None:
    _, errors = launch_from_form(form(extra_args="--log-levl info"), CPU_HOST)
    assert "did you mean --log-level?" in errors["extra_args"]
    specs, errors = launch_from_form(form(extra_args="--log-level info"), CPU_HOST)
    assert errors == {} and specs[0].server.extra_args == ("--log-level", "info")


def test_an_engine_knob_and_a_bad_flag_come_together() -> None:
    """preflight's own check (plan_launch) runs before queuing, knobs and flags apart."""
    _, errors = launch_from_form(form(cb_max_memory_percent="0.5", extra_args="--port 1"), CPU_HOST)
    assert "set by ServeLab" in errors["extra_args"]
    _, errors = launch_from_form(
        form(preset="Continuous batching A/B", cb_max_memory_percent="0.5"), CPU_HOST
    )
    assert "batching off" in errors["preset"] and "cb_max_memory_percent" in errors["preset"]


@pytest.mark.parametrize(
    "field",
    [
        "num_prompts",
        "input_len",
        "output_len",
        "tp_size",
        "seed",
        "cuda_graph_max_bs",
        "warmup_requests",
    ],
)
def test_negative_numbers_get_plain_words_beside_their_field(field: str) -> None:
    _, errors = launch_from_form(form(**{field: -2}), CPU_HOST)
    assert field in errors, errors
    assert "Input should" not in errors[field] and "-2" in errors[field]


def test_request_rate_message_says_what_to_type() -> None:
    for bad in ("fast", "-1", "0", "nan"):
        _, errors = launch_from_form(form(request_rate=bad), CPU_HOST)
        assert "requests per second above 0" in errors["request_rate"]
        assert "default" not in errors["request_rate"]
    specs, errors = launch_from_form(form(request_rate="2.5 req/s"), CPU_HOST)
    assert errors == {} and specs[0].plan.points[0].request_rate == 2.5


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("inf", float("inf")),
        ("Infinity", float("inf")),
        ("unbounded", float("inf")),
        ("4", 4.0),
        (" 0.5 /s", 0.5),
    ],
)
def test_one_request_rate_parser_for_every_entry_point(text: str, rate: float) -> None:
    from core import cli
    from core.interop import transfer

    assert parse_request_rate(text) == rate
    assert cli._rate(text) == rate
    assert transfer.import_rate(text) == ("inf" if rate == float("inf") else rate)


def test_trials_are_checked_with_the_other_fields_and_default_to_three() -> None:
    exp, errors = experiment_from_form(
        form(preset="A/A noise check", trials=0, num_prompts=-1), CPU_HOST
    )
    assert exp is None and {"trials", "num_prompts"} <= set(errors)
    exp, errors = experiment_from_form(form(preset="A/A noise check"), CPU_HOST)
    assert errors == {} and exp is not None and exp.trials == 3


def test_estimate_counts_runs_and_uses_earlier_durations() -> None:
    ab = next(p for p in PRESETS if p.name == "Continuous batching A/B")
    assert estimate_text(ab, 3, [120.0, 60.0, 90.0]).startswith(
        "6 runs (2 arms × 3 trials), one after another: about 9 min (median 90 s per run"
    )
    assert "No finished run" in estimate_text(ab, 3, [])


def test_a_first_launch_gets_a_rough_estimate_from_its_plan_labelled_assumed() -> None:
    specs, _ = launch_from_form(form(concurrency="1,4", num_prompts=8, output_len=32), CPU_HOST)
    # 30 s start-up; warm-up 4 requests / 4 slots × 32 tokens; c=1: 8 waves, c=4: 2 waves;
    # at 20 tokens/s per request
    per_run = 30 + (1 + 8 + 2) * 32 / 20
    assert plan_estimate_s(specs[0]) == pytest.approx(per_run)
    ab = next(p for p in PRESETS if p.name == "Continuous batching A/B")
    text = estimate_text(ab, 3, [], spec=specs[0])
    assert "No finished run" in text and "Rough estimate from the plan: about" in text
    assert "ASSUMING 30 s to start and 20 output tokens/s per request" in text
    assert run_estimate(specs[0], []) == (
        pytest.approx(per_run),
        "rough: from the plan at assumed rates",
    )
    assert run_estimate(specs[0], [50.0, 70.0]) == (60.0, "median of 2 earlier run(s)")


def test_the_check_warns_before_queueing_with_the_runs_own_waves_rule() -> None:
    """1 prompt at concurrency 4 never reaches 4; 4 at 4 is one wave: both are warned about
    beside the prompts field, and the specs are still built (a warning never blocks)."""
    specs, errors = launch_from_form(form(concurrency="1,4", num_prompts=1), CPU_HOST)
    assert errors == {} and specs
    warned = launch_warnings(specs)["num_prompts"]
    assert "c=1: one wave only, 1 request at concurrency 1" in warned
    assert "c=4: concurrency 4 never reached, only 1 request;" not in warned  # the last one
    assert "c=4: concurrency 4 never reached, only 1 request." in warned
    specs, _ = launch_from_form(form(concurrency="4", num_prompts=4), CPU_HOST)
    (warned,) = launch_warnings(specs).values()
    # the same finding the stored point's caveat names afterwards
    (after,) = point_caveats({"metrics": {"num_requests": 4}, "point": {"concurrency": 4}})
    assert f"c=4: {after.detail}." in warned and after.detail.startswith("one wave only")
    specs, _ = launch_from_form(form(concurrency="1,4", num_prompts=8), CPU_HOST)
    assert launch_warnings(specs) == {}  # the default plan: 8 and 2 waves


def test_every_bad_field_is_reported_at_once_and_nothing_is_built() -> None:
    specs, errors = launch_from_form(
        form(concurrency="1,x", mem_fraction_static="lots", extra_args="'unclosed", output_len=0),
        CPU_HOST,
    )
    assert specs == []
    assert {"concurrency", "mem_fraction_static", "extra_args"} <= set(errors)
    assert "comma" in errors["concurrency"]
    assert "not a number" in errors["mem_fraction_static"]


def test_range_errors_map_back_to_their_form_field() -> None:
    _, errors = launch_from_form(form(output_len=0), CPU_HOST)
    assert errors["output_len"] == "give a number of at least 1 (you gave 0)"


def test_hostile_text_never_reaches_an_argv_unchecked() -> None:
    _, errors = launch_from_form(form(extra_args="--x ; rm -rf ~"), CPU_HOST)
    assert "extra_args" in errors


def test_unavailable_engine_and_preset_say_why() -> None:
    _, errors = launch_from_form(form(engine="sglang"), CPU_HOST)
    assert "not installed" in errors["engine"]
    _, errors = launch_from_form(form(preset="CUDA graphs A/B"), CPU_HOST)
    assert "no NVIDIA GPU" in errors["preset"] or "has none" in errors["preset"]


def test_cuda_graph_ab_on_a_gpu_host_differs_only_in_the_switch(tmp_path: Path) -> None:
    specs, errors = launch_from_form(
        form(
            preset="CUDA graphs A/B",
            engine="sglang",
            model=str(tmp_path / "models" / "glm"),
            mem_fraction_static="0.85",
        ),
        GPU_HOST,
        local=False,
    )
    assert errors == {}
    a, b = (s.model_dump() for s in specs)
    assert a["server"]["cuda_graphs"] is True and b["server"]["cuda_graphs"] is False
    a["server"].pop("cuda_graphs"), b["server"].pop("cuda_graphs")
    assert a["server"] == b["server"] and a["plan"] == b["plan"]
    assert specs[0].intended_diff == ("server.cuda_graphs",)
    group = {t for t in specs[0].tags if t.startswith("ab-")}
    assert group and group <= set(specs[1].tags)


def test_default_cpu_preset_builds_two_comparable_runs() -> None:
    specs, errors = launch_from_form(form(preset="Continuous batching A/B"), CPU_HOST)
    assert errors == {} and len(specs) == 2
    assert [s.server.continuous_batching for s in specs] == [True, False]
    assert specs[0].plan == specs[1].plan  # same seeded prompts for both arms


def test_exact_output_lengths_are_on_unless_switched_off() -> None:
    specs, _ = launch_from_form(form(), CPU_HOST)
    assert specs[0].plan.ignore_eos is True
    specs, _ = launch_from_form(form(exact_length=False), CPU_HOST)
    assert specs[0].plan.ignore_eos is False


def test_lengths_over_the_models_context_are_refused_beside_the_length(tmp_path: Path) -> None:
    """The form's points are fixed lengths: over the model's context (its config.json), the
    run would refuse them, so the form does, beside input_len, naming the field and the fix."""
    (tmp_path / "models" / "tiny" / "config.json").write_text('{"max_position_embeddings": 64}')
    model = str(tmp_path / "models" / "tiny")
    specs, errors = launch_from_form(form(model=model, input_len=60, output_len=8), CPU_HOST)
    assert specs == [] and set(errors) == {"input_len"}
    assert "plan.points[0].workload.over_context is 'error'" in errors["input_len"]
    assert "60 + 8 tokens exceed the model's context of 64" in errors["input_len"]
    specs, errors = launch_from_form(form(model=model, input_len=56, output_len=8), CPU_HOST)
    assert errors == {} and len(specs) == 1
