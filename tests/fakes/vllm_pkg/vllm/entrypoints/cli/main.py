"""What the ``vllm`` console script runs (``python -m vllm.entrypoints.cli.main serve …``),
here the fake server of tests/fakes/fake_vllm_server.py."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[4]))  # tests/fakes

from fake_vllm_server import main

if __name__ == "__main__":
    main()
