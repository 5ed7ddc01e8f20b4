"""A long-running entry point's start: Python's cyclic garbage collector waits while the process imports, then the
imported objects are frozen out of every later collection and the collector runs as usual.

`python -m jobs.worker | jobs.sweeper | bot.longconn` imports ~11,000 modules (10,600 of them lark-oapi's generated
API) before its first line of work. Everything those imports create lives as long as the process, so the
collections Python starts meanwhile (one per 700 new container objects) free next to nothing (~1,600 objects) and
cost ~30 % of the start's CPU (4.4 → 3.1 CPU-s: README, "Tests"). The package of the entry point pauses
the collector while `python -m` is still locating the module (`sys.argv[0] == "-m"` then, and only then: see
`importing`); the entry point's `__main__` block calls `started()` before its work."""

from __future__ import annotations

import gc
import sys


def importing() -> None:
    """Called by `jobs/__init__.py` and `bot/__init__.py`: pauses the collector only when the package is being
    imported to locate a `python -m` module (an importer such as pytest, gunicorn or a CLI leaves it alone)."""
    if sys.argv[:1] == ["-m"]:
        gc.disable()


def started() -> None:
    """The imports are done: freeze what they made (no later collection walks it again) and collect as usual."""
    gc.freeze()
    gc.enable()
