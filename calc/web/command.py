"""serve: the local web page (calc.web.app on uvicorn), registered on the roofline app.

Imports only typer and the CLI's base at module level: the web stack (fastapi, starlette,
uvicorn, plotly) is imported inside the command, so the CLI starts as fast without it.
"""

from __future__ import annotations

from typing import Annotated

import typer

from calc.cli.base import command
from calc.core.errors import SpecError

LOOPBACK = "127.0.0.1"


def is_loopback(host: str) -> bool:
    import ipaddress

    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@command("serve")
def serve_cmd(
    port: Annotated[int, typer.Option("--port", "-p", min=0, max=65535, help="TCP port (0: a free one, printed).")] = 8000,
    host: Annotated[str, typer.Option("--host", help="Address to bind: loopback by default; another one serves every machine that can reach it, with a warning.")] = LOOPBACK,
) -> None:
    """A local web page: Estimate, Explore, Plan, Compare and Catalog, over the CLI's JSON API.

    Prints the address to open and serves until Ctrl-C. The API answers as the commands'
    --format json (GET /api/estimate?model=llama-3.1-8b&hardware=h100-sxm&batch=8, ...).
    """
    import socket
    import sys

    try:
        import uvicorn

        from calc.web.app import create_app
    except ImportError as exc:
        raise SpecError("serve", None, f"the web page needs {exc.name} (pip install fastapi uvicorn plotly)") from None
    except RuntimeError as exc:
        raise SpecError("serve", None, str(exc)) from None
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise SpecError("--host", None, f"{host!r}: cannot resolve ({exc})") from None
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(infos[0][4])
        sock.listen(2048)  # listening before the address is printed: a client may connect at once
    except OSError as exc:
        sock.close()
        raise SpecError("--port" if exc.errno == 98 else "--host", None,
                        f"cannot listen on {host}:{port} ({exc.strerror or exc})") from None
    if not is_loopback(host):
        typer.echo(f"roofline: warning: --host {host} is not a loopback address: every machine that can reach it "
                   "can use the page (it has no log-in); stop it with Ctrl-C", err=True)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    typer.echo(f"roofline: serving on http://{shown}:{bound}/ (open it in a browser; Ctrl-C stops)")
    sys.stdout.flush()
    config = uvicorn.Config(create_app(), log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=2)
    uvicorn.Server(config).run(sockets=[sock])
