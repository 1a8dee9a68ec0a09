from __future__ import annotations

from pathlib import Path

from core.load.prompts import load_tokenizer, make_prompts, prompts_digest


def test_prompts_have_exact_token_lengths_and_are_seeded(tiny_tokenizer_dir: Path) -> None:
    tok = load_tokenizer(str(tiny_tokenizer_dir))
    prompts = make_prompts(tok, 5, input_len=37, output_len=8, seed=7)
    assert all(len(tok.encode(p.text)) == 37 == p.prompt_tokens for p in prompts)
    assert len({p.text for p in prompts}) == 5
    same = make_prompts(tok, 5, input_len=37, output_len=8, seed=7)
    assert prompts_digest(same) == prompts_digest(prompts)
    other = make_prompts(tok, 5, input_len=37, output_len=8, seed=8)
    assert prompts_digest(other) != prompts_digest(prompts)
