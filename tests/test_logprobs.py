"""core/engines/logprobs.py: token logprobs read from the two shapes servers return, as
recorded from SGLang's /generate and an OpenAI-compatible /v1/completions."""

from __future__ import annotations

from typing import Any

import pytest

from core.engines.endpoint import EndpointAdapter
from core.engines.logprobs import parse_completions_logprobs, parse_generate_logprobs

# SGLang /generate with return_logprob, top_logprobs_num=2, return_text_in_logprobs
GENERATE = {
    "text": " Paris.",
    "output_ids": [12095, 13],
    "meta_info": {
        "id": "a1",
        "finish_reason": {"type": "length", "length": 2},
        "prompt_tokens": 6,
        "completion_tokens": 2,
        "output_token_logprobs": [[-0.012, 12095, " Paris"], [-0.4, 13, "."]],
        "output_top_logprobs": [
            [[-0.012, 12095, " Paris"], [-4.7, 264, " a"]],
            [[-0.4, 13, "."], [-1.2, 11, ","]],
        ],
    },
}
# OpenAI /v1/completions with logprobs=2 (vLLM and SGLang answer this shape)
COMPLETIONS = {
    "id": "cmpl-1",
    "object": "text_completion",
    "choices": [
        {
            "index": 0,
            "text": " Paris.",
            "finish_reason": "length",
            "logprobs": {
                "tokens": [" Paris", "."],
                "token_logprobs": [-0.012, -0.4],
                "top_logprobs": [{" Paris": -0.012, " a": -4.7}, {".": -0.4, ",": -1.2}],
                "text_offset": [0, 6],
            },
        }
    ],
}


def test_sglang_generate_shape() -> None:
    tokens = parse_generate_logprobs(GENERATE)
    assert [(t.token, t.logprob) for t in tokens] == [(" Paris", -0.012), (".", -0.4)]
    assert tokens[0].top == {" Paris": -0.012, " a": -4.7}


def test_sglang_without_text_names_the_token_id() -> None:
    body: dict[str, Any] = {"meta_info": {"output_token_logprobs": [[-0.5, 42, None]]}}
    assert parse_generate_logprobs(body)[0].token == "<id 42>"


def test_openai_completions_shape() -> None:
    tokens = EndpointAdapter().parse_logprobs(COMPLETIONS)
    assert [(t.token, t.logprob) for t in tokens] == [(" Paris", -0.012), (".", -0.4)]
    assert tokens[1].top == {".": -0.4, ",": -1.2}
    path, body = EndpointAdapter().logprobs_request("m", "The capital", 2, 2)
    assert path == "/v1/completions" and body["logprobs"] == 2


@pytest.mark.parametrize(
    "body",
    [
        {"text": "x", "meta_info": {}},  # return_logprob not sent
        {"meta_info": {"output_token_logprobs": [["high", 1, "a"]]}},
    ],
)
def test_a_generate_answer_without_logprobs_is_refused(body: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        parse_generate_logprobs(body)


def test_a_completion_with_logprobs_null_is_refused() -> None:
    """What transformers serve answers: logprobs null, whatever was asked."""
    body = {"choices": [{"index": 0, "text": "x", "logprobs": None}]}
    with pytest.raises(ValueError, match="no logprobs"):
        parse_completions_logprobs(body)


def test_teacher_forcing_asks_from_the_prompt_s_end_and_keeps_the_continuation() -> None:
    """SGLang's input logprobs start at logprob_start_len (its very first input token has a
    null logprob): asked one token early, the last ``count`` are the continuation's."""
    from core.engines.logprobs import generate_score_body, parse_generate_score

    body = generate_score_body([5, 6, 7], [8, 9], 2)
    assert body["input_ids"] == [5, 6, 7, 8, 9] and body["logprob_start_len"] == 2
    answer = {
        "meta_info": {
            "input_token_logprobs": [[-1.0, 7, "c"], [-0.5, 8, "d"], [-0.25, 9, "e"]],
            "input_top_logprobs": [None, [[-0.5, 8, "d"], [-2.0, 3, "x"]], [[-0.25, 9, "e"]]],
        }
    }
    tokens = parse_generate_score(answer, 2)
    assert [(t.token_id, t.logprob) for t in tokens] == [(8, -0.5), (9, -0.25)]
    assert tokens[0].top_ids == {8: -0.5, 3: -2.0}
    whole = {"meta_info": {"input_token_logprobs": [[None, 5, "a"], [-0.5, 8, "d"]]}}
    assert [t.logprob for t in parse_generate_score(whole, 1)] == [-0.5]
    with pytest.raises(ValueError, match="2 asked for"):
        parse_generate_score(whole, 2)
