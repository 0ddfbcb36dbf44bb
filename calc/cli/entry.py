"""The `roofline` console script: the app's imports run inside ``main``, so an interrupt at any
moment, start-up included, is one line and exit status 130 (128 + SIGINT), never a traceback."""

from __future__ import annotations

import sys

INTERRUPTED = 130


def main() -> None:
    try:
        from calc.cli.app import main as app_main

        app_main()
    except KeyboardInterrupt:
        interrupted()


def interrupted() -> None:
    """Say so in one line and exit 130."""
    try:
        sys.stderr.write("roofline: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(INTERRUPTED)
