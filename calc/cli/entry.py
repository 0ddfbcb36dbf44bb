"""The `roofline` console script: the app's imports run inside ``main``, so an interrupt at any
moment, start-up included, is one line and exit status 130 (143 for SIGTERM; calc.cli.interrupt),
never a traceback."""

from __future__ import annotations

from calc.cli.interrupt import catch_sigterm, interrupted, received


def main() -> None:
    catch_sigterm()
    try:
        from calc.cli.app import main as app_main

        app_main()
    except KeyboardInterrupt as exc:
        interrupted(exc)
    except Exception:
        if received() is not None:  # an interrupt that library code wrapped in its own error
            interrupted()
        raise
