"""``python -m tools.wiring FILES_OR_DIRS...``: the wiring check's command line (cli.py)."""

import sys

from tools.wiring.cli import main

sys.exit(main())
