"""One `roofline serve` (127.0.0.1, a free port) and one headless Chromium per test session.

The server is a child process started and stopped by calc.web.local.running (bounded start-up
wait; terminate, then kill). The browser is the system's chromium and chromedriver (Debian's
packages, as .ci/run installs them), never a downloaded build; without them the browser tests
skip with the reason. Screenshots go to a temporary folder, or to the folder named by
ROOFLINE_WEB_SCREENSHOTS (reports/web/ to refresh the README's).
"""

import os
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from calc.web import local  # noqa: E402

SHOTS_ENV = "ROOFLINE_WEB_SCREENSHOTS"


@pytest.fixture(scope="session")
def base():
    with local.running() as url:
        yield url


@pytest.fixture(scope="session")
def chrome():
    why = None
    if not os.path.exists(local.CHROMIUM):
        why = f"no {local.CHROMIUM} (apt-get install chromium chromium-driver)"
    elif not os.path.exists(local.CHROMEDRIVER):
        why = f"no {local.CHROMEDRIVER} (apt-get install chromium-driver)"
    else:
        try:
            import selenium  # noqa: F401
        except ImportError:
            why = "selenium is not installed (pip install selenium)"
    if why:
        pytest.skip(f"browser tests need the system's Chromium: {why}")
    drv = local.browser()
    drv.set_page_load_timeout(60)
    yield drv
    drv.quit()


@pytest.fixture(scope="session")
def shots(tmp_path_factory):
    folder = os.environ.get(SHOTS_ENV)
    path = Path(folder) if folder else tmp_path_factory.mktemp("screenshots")
    path.mkdir(parents=True, exist_ok=True)
    return path
