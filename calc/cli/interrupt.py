"""What an interrupt prints and exits with, wherever it lands: one line; status 130 for Ctrl-C
(SIGINT), 143 for SIGTERM (128 + the signal, as shells report them).

SIGTERM is raised as ``Terminated``, a KeyboardInterrupt, so whatever cleans up after Ctrl-C
(a writer's temp file, validate-comm's workers) runs for it too; Python's default would end the
process on the spot and leave the temp file for the next run to remove."""

from __future__ import annotations

import signal
import sys

INTERRUPTED = 130  # 128 + SIGINT
TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, as an exception the clean-up paths of an interrupt already handle."""


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def catch_sigterm() -> None:
    """Turn SIGTERM into ``Terminated`` (main thread only; a no-op elsewhere)."""
    try:
        signal.signal(signal.SIGTERM, _raise_terminated)
    except ValueError:  # not the main thread: leave the default
        pass


def interrupted(exc: BaseException | None = None) -> None:
    """Say so in one line and exit 130 (143 for SIGTERM)."""
    term = isinstance(exc, Terminated)
    try:
        sys.stderr.write("roofline: terminated\n" if term else "roofline: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(TERMINATED if term else INTERRUPTED)
