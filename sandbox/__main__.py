"""Entry point for `python -m sandbox serve|say`."""

from __future__ import annotations

import sys

from sandbox.cli.commands import main

if __name__ == "__main__":
    sys.exit(main())
