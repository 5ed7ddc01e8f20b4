"""Entry point for `python -m sandbox serve|say`."""

from __future__ import annotations

import sys

from core import boot
from sandbox.cli.commands import main

if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    sys.exit(main())
