"""Progress on long work: the library reports through a callback, the CLI shows a rich bar.

Library code (calc.cost, calc.serving, calc.accuracy, validate) takes ``progress: Progress``
and calls ``progress(done, total, label)``; it never imports rich. A command opens
``bar(description, quiet)`` and passes what it yields. The bar is drawn on stderr only when
stderr is a terminal and ``--quiet`` is off; otherwise the callback does nothing, so piped
output carries nothing extra.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Progress = Callable[[int, int, str], None]  # (done, total, label)


def silent(done: int, total: int, label: str = "") -> None:
    """The callback when nobody watches."""


class Reporter:
    """The callback a command passes down, plus ``log`` for a line printed above the bar."""

    def __init__(self, update: Progress = silent, log=None):
        self._update = update
        self._log = log

    def __call__(self, done: int, total: int, label: str = "") -> None:
        self._update(done, total, label)

    def log(self, line: str) -> None:
        """A line of its own on stderr (above the bar while one is drawn)."""
        if self._log is not None:
            self._log(line)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()


def shown(quiet: bool = False, stream=None) -> bool:
    """Whether a bar would be drawn: not quiet, and the stream (stderr) is a terminal."""
    stream = stream if stream is not None else sys.stderr
    return not quiet and bool(getattr(stream, "isatty", lambda: False)())


@contextmanager
def bar(description: str, quiet: bool = False, stream=None) -> Iterator[Reporter]:
    """A transient rich progress bar on stderr (done/total, elapsed, remaining, the current
    label); a silent Reporter when ``quiet`` or stderr is not a terminal."""
    stream = stream if stream is not None else sys.stderr
    if not shown(quiet, stream):
        yield Reporter(log=lambda line: (stream.write(line + "\n"), stream.flush()))
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.progress import Progress as RichProgress

    console = Console(file=stream)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("eta"), TimeRemainingColumn(), TextColumn("{task.fields[label]}"))
    # Lines printed to stdout go above the bar when stdout is the same terminal; piped, they stay put.
    to_terminal = bool(getattr(sys.stdout, "isatty", lambda: False)())
    with RichProgress(*columns, console=console, transient=True, redirect_stdout=to_terminal,
                      redirect_stderr=False) as live:
        task = live.add_task(description, total=None, label="")

        def update(done: int, total: int, label: str = "") -> None:
            live.update(task, completed=done, total=total, label=label)

        yield Reporter(update, log=lambda line: live.console.print(line, markup=False, highlight=False))
