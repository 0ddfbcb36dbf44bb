"""What an interrupt (Ctrl-C) prints and exits with, wherever it lands: one line, status 130."""

from __future__ import annotations

import sys

INTERRUPTED = 130  # 128 + SIGINT, as shells report it


def interrupted() -> None:
    """Say so in one line and exit 130."""
    try:
        sys.stderr.write("roofline: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(INTERRUPTED)
