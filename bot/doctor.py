"""`python -m bot.doctor`, the contract's name for the preflight check (jobs/doctor.py)."""

from __future__ import annotations

import sys

from core import boot
from jobs.doctor import main

if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    sys.exit(main())
