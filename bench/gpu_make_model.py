"""Build a random-weight model (bf16) from SRC_DIR's config.json and tokenizer, for GPU
hosts that cannot receive the real weights: SmolLM2-135M's shape by default, another shape
where bench/gpu/prepare.sh's MODEL_OVERRIDES changed the config (bench/gpu/model_kv_mem.json:
docs/BENCHMARKS.md 5.3). Timing is real, text is not: use a probe that only checks for
non-empty output, or none (a deep random model can answer punctuation only, which the
probe's garbage rule rejects).

    python3 bench/gpu_make_model.py SRC_DIR(config+tokenizer) OUT_DIR
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main(src: Path, out: Path) -> None:
    config = AutoConfig.from_pretrained(src)
    torch.manual_seed(0)
    # Built on the GPU where there is one: an 8B shape's normal init takes minutes on the CPU
    # and seconds on an H200 (device minutes are the scarce resource there).
    device = "cuda" if torch.cuda.is_available() else "cpu"
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    for name in (
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    ):
        if (src / name).exists():
            shutil.copy(src / name, out / name)
    # the answers check (core/run/answers_step.py) reads this: token-id prompts, not questions
    marker = {"init": "normal (transformers from_config)", "seed": 0, "dtype": "bfloat16"}
    (out / "servelab_random_weights.json").write_text(json.dumps(marker) + "\n")
    print(f"random-weight model in {out}: {sum(p.numel() for p in model.parameters()):,} params")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
