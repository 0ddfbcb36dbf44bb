"""Progress: the bar is drawn only on a terminal and not with --quiet; the callback reaches the bar."""

import io

from calc.core.progress import Reporter, bar, shown, silent


class _Tty(io.StringIO):
    def isatty(self):
        return True


def test_no_bar_when_piped_or_quiet():
    assert not shown(False, io.StringIO())
    assert not shown(True, _Tty())
    assert shown(False, _Tty())


def test_piped_bar_prints_only_logged_lines():
    stream = io.StringIO()
    with bar("work", stream=stream) as progress:
        progress(1, 2, "half")
        progress.log("a line")
    assert stream.getvalue() == "a line\n"


def test_terminal_bar_shows_description_and_count():
    stream = _Tty()
    with bar("planning", stream=stream) as progress:
        progress(3, 4, "h100-sxm TP1")
        progress.log("logged")
    text = stream.getvalue()
    assert "logged" in text and "planning" in text


def test_library_default_is_silent():
    assert silent(1, 2, "x") is None
    seen = []
    Reporter(lambda d, t, label: seen.append((d, t, label)))(1, 2, "x")
    assert seen == [(1, 2, "x")]
