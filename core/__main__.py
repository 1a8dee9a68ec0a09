"""``python -m core ...``: the ServeLab command line."""

import sys

from core.cli import main

sys.exit(main())
