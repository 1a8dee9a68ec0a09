"""Build a random-weight model with SmolLM2-135M's shape and tokenizer (bf16), for GPU
hosts that cannot receive the real weights. Timing is real, text is not: use a probe that
only checks for non-empty output.

    python3 bench/gpu_make_model.py SRC_DIR(config+tokenizer) OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM


def main(src: Path, out: Path) -> None:
    config = AutoConfig.from_pretrained(src)
    torch.manual_seed(0)
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
    print(f"random-weight model in {out}: {sum(p.numel() for p in model.parameters()):,} params")


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
