"""Entry point of the FAKE SGLang: ``python -m sglang.launch_server --model-path M ...``.

Everything is documented in ``sglang._fake_server``.
"""

from __future__ import annotations

import sys
import warnings

if __name__ == "__main__":
    # Same text as the real sglang/launch_server.py:70-76 (printed by ``warnings`` to stderr).
    warnings.warn(
        "'python -m sglang.launch_server' is still supported, but 'sglang serve' is the "
        "recommended entrypoint.",
        UserWarning,
        stacklevel=1,
    )
    from sglang._fake_server import main

    sys.exit(main(sys.argv[1:]))
