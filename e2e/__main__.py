"""`make e2e`: the e2e tier (tests/e2e: the control plane comes up, is checked, goes down) and
out/e2e/report.json. Exits with pytest's status."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from e2e import report

PROJECT_DIR = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e", description=__doc__)
    parser.add_argument("--out", type=Path, default=PROJECT_DIR / "out" / "e2e" / "report.json")
    args, pytest_args = parser.parse_known_args()  # the rest goes to pytest (-x, -k name)
    return report.run(str(PROJECT_DIR / "tests" / "e2e"), args.out, pytest_args)


if __name__ == "__main__":
    sys.exit(main())
