"""``punctual console``: the web console on loopback, over the running local stack, AWS (``--aws``, the operator's
credentials) or the REST API as one tenant (``--api``). ``punctual up`` serves it too (:func:`start_console`)."""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from punctual.errors import PunctualError
from punctual_tools.cli.common import api_tenant, client_options, home, settings_of

if TYPE_CHECKING:
    from punctual_tools.console.model import ConsoleSource
    from punctual_tools.console.server import ConsoleServer

log = logging.getLogger("punctual")

DEFAULT_PORT = 8768  # the console's port unless --port says otherwise (0: any free one)
TOKEN_FILE = "console-token"  # in the home: the token a browser must show (made once, mode 0600)
TOKEN_BYTES = 24


def console_token(home_dir: Path) -> tuple[str, Path]:
    """The console's token and its file in ``home_dir``: the one written before, or a new one (mode 0600)."""
    from punctual_tools.local.api_server import write_token

    path = home_dir / TOKEN_FILE
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token, path
    token = secrets.token_urlsafe(TOKEN_BYTES)
    write_token(path, token)
    return token, path


@dataclass(frozen=True, slots=True)
class RunningConsole:
    """A console being served: its server and the URL to open (with the token)."""

    server: ConsoleServer
    url: str
    token_file: Path

    def stop(self) -> None:
        self.server.stop()


def start_console(
    source: ConsoleSource,
    home_dir: Path,
    *,
    port: int = DEFAULT_PORT,
    host: str = "127.0.0.1",
    read_only: bool = False,
) -> RunningConsole:
    """Serve the console over ``source`` on ``host:port`` (loopback), with the home's token; started."""
    from punctual_tools.console.app import create_app
    from punctual_tools.console.server import ConsoleServer

    token, token_file = console_token(home_dir)
    app = create_app(source, token=token, read_only=read_only, token_hint=f"the token is in {token_file}")
    server = ConsoleServer(app, host=host, port=port)
    server.start()
    return RunningConsole(server=server, url=f"{server.url}/?token={token}", token_file=token_file)


def source_of(args: argparse.Namespace) -> ConsoleSource:
    """What the console looks at: the REST API as one tenant (``--api``), AWS's table (``--aws``), or the running
    local stack's."""
    from punctual_tools.console import source

    if args.api:
        from punctual.scheduling.api_client import ApiClient
        from punctual_tools.cli.common import client_of

        api = client_of(args)
        assert isinstance(api, ApiClient)  # --api: client_of answers the REST API's client
        tenant = api_tenant(args) if not args.aws else "of your AWS principal"
        return source.TenantSource(label=f"tenant {tenant} through the REST API", api=api, tenant=tenant)
    if args.aws:
        return source.aws_source(settings_of(args))
    return source.local_source(home(args))


def cmd_console(args: argparse.Namespace) -> int:
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        running = start_console(source_of(args), home(args), port=args.port, host=args.host, read_only=args.read_only)
    except OSError as exc:
        raise PunctualError(f"the console cannot listen on {args.host}:{args.port}: {exc.strerror}") from exc
    print(f"Punctual console: {running.url}  (read-only)" if args.read_only else f"Punctual console: {running.url}")
    print(f"(the token is in {running.token_file}; Ctrl-C stops)", flush=True)
    try:
        stop.wait()
    finally:
        running.stop()
    return 0


def add_commands(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``console`` to the subcommands ``sub``."""
    console = sub.add_parser(
        "console", help="serve the web console on loopback (the local stack's, AWS's with --aws, a tenant's with --api)"
    )
    console.add_argument(
        "--port", type=int, default=DEFAULT_PORT, help=f"its port (default {DEFAULT_PORT}; 0: any free one)"
    )
    console.add_argument("--host", default="127.0.0.1", help="its address: loopback only (default 127.0.0.1)")
    console.add_argument("--read-only", action="store_true", help="only look: no change can be made from it")
    console.add_argument("--aws", action="store_true", help="AWS's table (PUNCTUAL_* settings), as the operator")
    client_options(console)
    console.set_defaults(func=cmd_console)
