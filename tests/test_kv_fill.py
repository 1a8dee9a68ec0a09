"""kv_fill: a point whose in-flight tokens are F x the server's KV pool. The field's checks,
the sizing arithmetic over a given pool, the smallest-pool rule, and the refusal of an engine
that reports no pool, before anything is queued."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from core.config import KvPool, Point, RunSpec, Workload, parse_spec
from core.errors import ConfigError
from core.launch.forms import check_spec_data
from core.launch.queue import queue_launch
from core.load.kv_fill import PoolSource, size_kv_fill, smallest_pool, template_tokens
from core.records import RequestRecord
from core.settings import Settings


def _spec(engine: str = "sglang", **point: object) -> dict[str, object]:
    return {
        "server": {"engine": engine, "model": "/models/tiny"},
        "plan": {"points": [{"concurrency": 4, "input_len": 100, "output_len": 28, **point}]},
    }


@pytest.mark.parametrize(
    ("value", "says"), [(0, "above 0"), (-1, "above 0"), (10.5, "at most 10"), ("x", "a number")]
)
def test_kv_fill_out_of_range_names_the_field(value: object, says: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_spec(_spec(kv_fill=value))
    assert exc.value.field == "plan.points.0.kv_fill" and says in exc.value.message


def test_kv_fill_by_lengths_needs_a_cap_and_a_trace_keeps_its_own_lengths() -> None:
    with pytest.raises(ConfigError, match="give a concurrency"):
        parse_spec(_spec(kv_fill=1.0, kv_fill_by="lengths", concurrency=None))
    with pytest.raises(ConfigError, match="lengths are its own"):
        parse_spec(_spec(kv_fill=1.0, workload={"kind": "trace", "trace": "t.jsonl"}))
    with pytest.raises(ConfigError) as exc:
        parse_spec(_spec(kv_fill=1.0, kv_fill_by="tokens"))
    assert exc.value.field == "plan.points.0.kv_fill_by"
    point = parse_spec(_spec(kv_fill=1.2)).plan.points[0]
    assert point.kv_fill == 1.2 and "kv_fill=1.2x(concurrency)" in point.label


def test_kv_pool_is_tokens_or_runs() -> None:
    assert KvPool(tokens=1000).tokens == 1000
    with pytest.raises(ValueError, match="give tokens"):
        KvPool()
    with pytest.raises(ValueError, match="one arm per run"):
        KvPool(runs=("a", "b"), arms=("x",))


def test_concurrency_is_the_ceiling_of_fill_times_pool_over_the_tokens_of_a_request() -> None:
    point = Point(concurrency=1, num_prompts=8, input_len=100, output_len=28, kv_fill=1.2)
    pool = PoolSource(10_000, "run-a", "mfs=0.85")
    sized = size_kv_fill(point, pool, template=12)
    per_request = 100 + 28 + 12  # as the server counts a request: prompt, answer, template
    assert sized.tokens_per_request == per_request
    assert sized.sized.concurrency == math.ceil(1.2 * 10_000 / per_request) == 86
    assert sized.sized.num_prompts == 86  # every slot fills at least once
    assert sized.sized.input_len == 100 and sized.sized.output_len == 28
    record = sized.as_dict()
    assert record["asked"]["concurrency"] == 1 and record["computed"]["concurrency"] == 86
    assert record["pool_tokens"] == 10_000 and record["pool_run_id"] == "run-a"
    assert record["pool_whose"] == "run run-a (arm mfs=0.85)"
    assert record["template"].startswith("included") and record["fill_computed"] >= 1.2


def test_an_unknown_template_is_said_to_be_excluded() -> None:
    point = Point(concurrency=1, input_len=100, output_len=28, kv_fill=1.0)
    sized = size_kv_fill(point, PoolSource(1280), template=None)
    assert sized.sized.concurrency == 10
    assert sized.as_dict()["template"].startswith("excluded")
    assert sized.as_dict()["pool_whose"] == "this run's server"


def test_lengths_keep_the_cap_and_the_input_output_ratio() -> None:
    point = Point(concurrency=8, input_len=300, output_len=100, kv_fill=2.0, kv_fill_by="lengths")
    sized = size_kv_fill(point, PoolSource(16_000), template=0)
    # 2 x 16,000 tokens over 8 requests = 4,000 each, split 3:1
    assert sized.sized.concurrency == 8
    assert (sized.sized.input_len, sized.sized.output_len) == (3000, 1000)
    assert sized.in_flight_tokens == 32_000


def test_uniform_lengths_count_their_mean() -> None:
    point = Point(
        concurrency=1,
        input_len=100,
        output_len=100,
        kv_fill=1.0,
        workload=Workload(kind="uniform", range_ratio=0.5),
    )
    sized = size_kv_fill(point, PoolSource(1500), template=0)
    assert sized.tokens_per_request == 150  # each length in [50, 100]: a mean of 75
    assert sized.sized.concurrency == 10


def test_a_fill_beyond_the_concurrency_bound_says_what_to_change() -> None:
    point = Point(concurrency=1, input_len=1, output_len=1, kv_fill=10.0)
    with pytest.raises(ConfigError, match="kv_fill_by lengths") as exc:
        size_kv_fill(point, PoolSource(1_000_000), template=0)
    assert exc.value.field == "plan.points.kv_fill"


def test_every_arm_is_sized_from_the_smallest_pool() -> None:
    pools = [PoolSource(400_000, "r1", "0.92"), PoolSource(340_000, "r2", "0.85")]
    smallest = smallest_pool(pools)
    assert smallest.tokens == 340_000 and smallest.arm == "0.85"
    point = Point(concurrency=1, input_len=1000, output_len=1000, kv_fill=1.0)
    a, b = (size_kv_fill(point, smallest, 0, own_pool=p.tokens) for p in pools)
    assert a.sized == b.sized  # the same load in both arms
    assert a.warnings() == [] and b.warnings() == []  # neither was given more than its pool
    over = size_kv_fill(point, smallest, 0, own_pool=300_000)
    assert "below the pool the load was sized from" in over.warnings()[0]


def test_the_template_is_the_servers_count_minus_the_prompt() -> None:
    recs = [
        RequestRecord(
            index=i, send_s=0, prompt_tokens=10, output_tokens_requested=4, prompt_tokens_server=s
        )
        for i, s in enumerate((22, 23, 22))
    ]
    for r in recs:
        r.ok = True
    assert template_tokens(recs) == 12
    assert template_tokens([]) is None


@pytest.mark.parametrize("engine", ["transformers", "endpoint"])
def test_kv_fill_on_an_engine_without_a_pool_is_refused_when_queued(
    engine: str, settings: Settings
) -> None:
    data = _spec(engine, kv_fill=1.0)
    if engine == "endpoint":
        data["server"] = {"engine": "endpoint", "endpoint_url": "http://127.0.0.1:1"}
    roots = [Path("/models")]
    spec, problems = check_spec_data(data, roots, must_exist=False, settings=settings)
    assert spec is None
    assert "reports none" in problems["plan.points.0.kv_fill"]
    assert "give plan.kv_pool.tokens" in problems["plan.points.0.kv_fill"]
    with pytest.raises(ConfigError) as exc:
        queue_launch(settings, [RunSpec.model_validate(data)])
    assert exc.value.field == "plan.points.0.kv_fill"
    assert not settings.runs_dir.exists() or not any(settings.runs_dir.iterdir())
    # a pool given in the plan is enough: the run is sized from it
    given = {**data, "plan": {**data["plan"], "kv_pool": {"tokens": 50_000}}}  # type: ignore[dict-item]
    assert check_spec_data(given, roots, must_exist=False, settings=settings)[1] == {}
