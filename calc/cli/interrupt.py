"""What an interrupt prints and exits with, wherever it lands: one line; status 130 for Ctrl-C
(SIGINT), 143 for SIGTERM (128 + the signal, as shells report them).

SIGTERM is raised as ``Terminated``, a KeyboardInterrupt, so whatever cleans up after Ctrl-C
(a writer's temp file, validate-comm's workers) runs for it too; Python's default would end the
process on the spot and leave the temp file for the next run to remove.

Both handlers note the signal before raising: code that wraps whatever it catches (pydantic
building a schema turns the interrupt into a SchemaError) still ends as the interrupt it was
(``received``), not as a traceback."""

from __future__ import annotations

import _thread
import signal
import sys
import time
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


def _deliver_again(info) -> None:
    """sys.unraisablehook: an interrupt raised inside code Python cannot raise from (a weakref
    callback, __del__: the signal landed there) would be printed as "Exception ignored" with a
    traceback and lost; it is delivered to the main thread again instead, to land at its next
    instruction. Anything else goes to Python's own hook."""
    if isinstance(info.exc_value, KeyboardInterrupt) and _received:
        # from another thread, once this hook has returned: raised within it, it is ignored again
        _thread.start_new_thread(_interrupt_main_soon, (_received[-1],))
        return
    sys.__unraisablehook__(info)


def _interrupt_main_soon(signum: int) -> None:
    time.sleep(0.005)
    _thread.interrupt_main(signum)


def catch_sigterm() -> None:
    """Turn SIGTERM into ``Terminated`` and SIGINT into KeyboardInterrupt, each noted (main
    thread only; a no-op elsewhere), never lost in a callback that cannot raise."""
    try:
        signal.signal(signal.SIGTERM, _raise_terminated)
        signal.signal(signal.SIGINT, _raise_interrupt)
    except ValueError:  # not the main thread: leave the defaults
        return
    sys.unraisablehook = _deliver_again


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
