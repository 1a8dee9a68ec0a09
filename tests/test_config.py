"""Bad input is refused at the edge, with the field named and the fix given."""

from __future__ import annotations

import json
import math

import pytest

from core.config import RunSpec, parse_spec
from core.errors import ConfigError


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        (
            {"server": {"engine": "transformers", "mem_fraction_static": 0.9}},
            "server",
            "sglang engine only",
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
