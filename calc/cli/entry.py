"""The `roofline` console script: the app's imports run inside ``main``, so an interrupt at any
moment, start-up included, is one line and exit status 130 (143 for SIGTERM; calc.cli.interrupt),
never a traceback."""

from __future__ import annotations

from calc.cli.interrupt import catch_sigterm, handled


def main() -> None:
    catch_sigterm()
    with handled():
        from calc.cli.app import main as app_main

        app_main()
