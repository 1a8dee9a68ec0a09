"""Bad input is refused at the edge, with the field named and the fix given."""

from __future__ import annotations

import json
import math

import pytest
from pydantic import ValidationError

from core.config import (
    RunSpec,
    ServerConfig,
    config_error,
    parse_spec,
    same_value,
    validation_errors,
)
from core.errors import ConfigError


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        (
            {"server": {"engine": "transformers", "mem_fraction_static": 0.9}},
            "server",
            "sglang, vllm engines only",
        ),
        ({"server": {"engine": "endpoint"}}, "server", "endpoint_url is required"),
        ({"server": {"port": 80}}, "server.port", "at least 1024 (you gave 80)"),
        ({"server": {"device": "gpu0"}}, "server.device", "cuda:N"),
        ({"server": {"extra_args": ["--x", "; rm -rf ~"]}}, "server.extra_args", "not allowed"),
        ({"plan": {"points": [{"concurrency": 0}]}}, "plan.points.0.concurrency", "at least 1"),
        ({"plan": {"points": []}}, "plan.points", "at least 1"),
        ({"plan": {"probe": {"expect": "(unclosed"}}}, "plan.probe.expect", "regular expression"),
        ({"tags": ["ok", "bad tag!"]}, "tags", "bad tag"),
        ({"server": {"nonsense": 1}}, "server.nonsense", "not a field"),
    ],
)
def test_bad_input_names_the_field(data: dict, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_spec(data)
    assert info.value.field == field
    assert words in info.value.message
    assert "Input should" not in info.value.message  # plain words, not pydantic's


def _problem(data: dict) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        RunSpec.model_validate(data)
    return info.value


def test_a_validation_error_becomes_one_config_error_naming_the_field_and_the_fix() -> None:
    """The one conversion (parse_spec, experiments, explain, the grid form use it)."""
    exc = _problem({"server": {"port": 80}})
    err = config_error(exc)
    assert (err.field, err.message) == (
        "server.port",
        "give a number of at least 1024 (you gave 80)",
    )
    assert str(err) == "server.port: give a number of at least 1024 (you gave 80)"
    # under another object's name: the prefix goes first
    assert config_error(exc, prefix="base").field == "base.server.port"
    # named after what the user gave: the message says where in the object, and what was wrong
    err = config_error(exc, field="arms[fast]", subject="80")
    assert (err.field, err.message) == (
        "arms[fast]",
        "80: server.port: give a number of at least 1024 (you gave 80)",
    )
    # ...unless the name says it already
    err = config_error(exc, field="grid.knobs.server.port[0]", subject="80")
    assert err.message == "80: give a number of at least 1024 (you gave 80)"


def test_a_problem_of_the_whole_object_is_named_by_the_default() -> None:
    with pytest.raises(ValidationError) as info:
        RunSpec.model_validate([])
    assert config_error(info.value).field == "spec"
    assert config_error(info.value, default="experiment").field == "experiment"
    assert "Input should" not in config_error(info.value).message


def test_every_problem_beside_its_field_for_a_form() -> None:
    exc = _problem({"server": {"port": 80, "tp_size": 0}, "plan": {"points": []}})
    errors = validation_errors(exc)
    assert set(errors) == {"server.port", "server.tp_size", "plan.points"}
    assert errors["server.port"] == "give a number of at least 1024 (you gave 80)"
    assert all("Input should" not in m for m in errors.values())
    # a rule about several knobs of one object names the knob first: it goes beside that knob
    with pytest.raises(ValidationError) as info:
        ServerConfig.model_validate({"engine": "transformers", "mem_fraction_static": 0.9})
    by_knob = validation_errors(info.value, "server", "engine", ServerConfig.model_fields)
    assert list(by_knob) == ["server.mem_fraction_static"]
    assert "sglang, vllm engines only" in by_knob["server.mem_fraction_static"]


def test_spec_round_trips_through_json_with_infinite_rate() -> None:
    spec = parse_spec(
        {
            "server": {"engine": "sglang", "mem_fraction_static": 0.85},
            "plan": {
                "points": [
                    {"concurrency": 64, "num_prompts": 64, "input_len": 256, "output_len": 256}
                ]
            },
        }
    )
    assert math.isinf(spec.plan.points[0].request_rate)
    again = RunSpec.model_validate(json.loads(spec.model_dump_json()))
    assert again == spec


def test_default_warmup_is_at_least_the_concurrency() -> None:
    spec = parse_spec({"plan": {"points": [{"concurrency": 2}, {"concurrency": 16}]}})
    assert spec.plan.effective_warmup == 16
    # an open-loop trace window of 5,000 requests is not a warm-up of 5,000 at once
    trace = {"num_prompts": 5000, "workload": {"kind": "trace", "trace": "t.jsonl"}}
    spec = parse_spec({"plan": {"points": [{"concurrency": 2}, trace]}})
    assert spec.plan.points[1].concurrency is None and spec.plan.effective_warmup == 2


@pytest.mark.parametrize(
    ("a", "b", "same"),
    [
        (True, True, True),
        (0.85, 0.85, True),
        (1, 1.0, True),
        ("fa3", "fa3", True),
        (None, None, True),
        (True, 1, False),  # True == 1 in Python: still two different settings
        (False, 0, False),
        (1, True, False),
        ("fa3", "triton", False),
        (None, False, False),
    ],
)
def test_same_value_tells_a_bool_from_a_number(a: object, b: object, same: bool) -> None:
    assert same_value(a, b) is same
