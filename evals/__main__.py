"""`python -m evals` (`make eval`): record the scenarios through a fresh stack, check the requests' structure, judge a
model's answers by each scenario's rubric. Offline (no ANTHROPIC_API_KEY) the stand-in answers and every check must
pass (CI); with the key the configured model answers and the table shows how a real model reads the requests.
Exit 1 when a scenario fails."""

from __future__ import annotations

import sys

from evals.run import run


def main() -> int:
    results, printed = run()
    print(printed)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
