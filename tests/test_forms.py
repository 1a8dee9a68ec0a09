"""The launch form's rules: every bad field named at once, presets that differ in one knob."""

from __future__ import annotations

from core.engines import EngineInfo
from core.forms import FORM_DEFAULTS, launch_from_form
from core.host import HostInfo

CPU_HOST = HostInfo(gpus=(), engines={
    "transformers": EngineInfo("transformers", True, "5.24.0"),
    "sglang": EngineInfo("sglang", False, reason="No module named sglang"),
    "endpoint": EngineInfo("endpoint", True)})
GPU_HOST = HostInfo(gpus=("0: NVIDIA H200",), engines={
    **CPU_HOST.engines, "sglang": EngineInfo("sglang", True, "0.5.23")})


def form(**changes: object) -> dict[str, object]:
    return {**FORM_DEFAULTS, **changes}


def test_every_bad_field_is_reported_at_once_and_nothing_is_built() -> None:
    specs, errors = launch_from_form(form(concurrency="1,x", mem_fraction_static="lots",
                                          extra_args="'unclosed", output_len=0), CPU_HOST)
    assert specs == []
    assert {"concurrency", "mem_fraction_static", "extra_args"} <= set(errors)
    assert "comma" in errors["concurrency"]
    assert "not a number" in errors["mem_fraction_static"]


def test_range_errors_map_back_to_their_form_field() -> None:
    _, errors = launch_from_form(form(output_len=0), CPU_HOST)
    assert "output_len" in errors and "greater than or equal to 1" in errors["output_len"]


def test_hostile_text_never_reaches_an_argv_unchecked() -> None:
    _, errors = launch_from_form(form(extra_args="--x ; rm -rf ~"), CPU_HOST)
    assert "extra_args" in errors


def test_unavailable_engine_and_preset_say_why() -> None:
    _, errors = launch_from_form(form(engine="sglang", model="/m"), CPU_HOST)
    assert "not installed" in errors["engine"]
    _, errors = launch_from_form(form(preset="CUDA graphs A/B"), CPU_HOST)
    assert "no NVIDIA GPU" in errors["preset"] or "has none" in errors["preset"]


def test_cuda_graph_ab_on_a_gpu_host_differs_only_in_the_switch() -> None:
    specs, errors = launch_from_form(form(preset="CUDA graphs A/B", engine="sglang",
                                          model="/models/glm", mem_fraction_static="0.85"),
                                     GPU_HOST)
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
