"""What an interrupt prints and exits with, wherever it lands: one line; status 130 for Ctrl-C
(SIGINT), 143 for SIGTERM (128 + the signal, as shells report them).

SIGTERM is raised as ``Terminated``, a KeyboardInterrupt, so whatever cleans up after Ctrl-C
(a writer's temp file, validate-comm's workers) runs for it too; Python's default would end the
process on the spot and leave the temp file for the next run to remove.

Both handlers note the signal before raising: code that wraps whatever it catches (pydantic
building a schema turns the interrupt into a SchemaError) still ends as the interrupt it was
(``received``), not as a traceback."""

from __future__ import annotations

import signal
import sys
from contextlib import contextmanager

INTERRUPTED = 130  # 128 + SIGINT
TERMINATED = 128 + signal.SIGTERM  # 143


class Terminated(KeyboardInterrupt):
    """SIGTERM, as an exception the clean-up paths of an interrupt already handle."""


_received: list[int] = []  # the signals this process was sent (SIGINT, SIGTERM)


def _raise_terminated(signum, frame) -> None:
    _received.append(signum)
    raise Terminated()


def _raise_interrupt(signum, frame) -> None:
    _received.append(signum)
    raise KeyboardInterrupt()


def catch_sigterm() -> None:
    """Turn SIGTERM into ``Terminated`` and SIGINT into KeyboardInterrupt, each noted (main
    thread only; a no-op elsewhere)."""
    try:
        signal.signal(signal.SIGTERM, _raise_terminated)
        signal.signal(signal.SIGINT, _raise_interrupt)
    except ValueError:  # not the main thread: leave the defaults
        pass


def received() -> int | None:
    """The first signal this process was sent, or None."""
    return _received[0] if _received else None


def interrupted(exc: BaseException | None = None) -> None:
    """Say so in one line and exit 130 (143 for SIGTERM)."""
    term = isinstance(exc, Terminated) or received() == signal.SIGTERM
    try:
        sys.stderr.write("roofline: terminated\n" if term else "roofline: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    sys.exit(TERMINATED if term else INTERRUPTED)


@contextmanager
def handled():
    """Run the block; an interrupt ends it as ``interrupted`` says, and so does any error raised
    once a signal was noted (library code that wrapped the interrupt in its own error)."""
    try:
        yield
    except KeyboardInterrupt as exc:
        interrupted(exc)
    except Exception:
        if received() is not None:
            interrupted()
        raise
