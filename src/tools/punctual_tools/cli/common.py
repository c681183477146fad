"""Helpers every group of verbs shares: logging, argument types, the local stack's home, and the client a
command goes through (the table, or the REST API)."""

from __future__ import annotations

import argparse
import logging
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from punctual.config.settings import Settings
from punctual.domain.model import Unreadable
from punctual.errors import PunctualError
from punctual.scheduling.protocol import Scheduler
from punctual_tools.progress import CLEAR_LINE

log = logging.getLogger("punctual")


_NOISY = ("botocore", "boto3", "urllib3", "punctual.fire", "punctual.polling.poller")


def setup_logging(verbose: bool) -> Callable[[], None]:
    """The command's logging; returns what puts the previous set-up back (main() run in-process, by tests)."""
    root = logging.getLogger()
    before = (root.level, list(root.handlers), {name: logging.getLogger(name).level for name in _NOISY})
    # On a terminal each log line first clears the line, so that it never lands on the end of a progress line.
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        stream=sys.stderr,
        format=(CLEAR_LINE if sys.stderr.isatty() else "") + "%(asctime)s %(levelname).1s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    for noisy in _NOISY:
        logging.getLogger(noisy).setLevel(logging.WARNING)

    def restore() -> None:
        root.setLevel(before[0])
        root.handlers[:] = before[1]
        for name, level in before[2].items():
            logging.getLogger(name).setLevel(level)

    return restore


def non_negative_ms(text: str) -> float:
    """An argparse type: a finite number of milliseconds, 0 or more."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of milliseconds: {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number of milliseconds, 0 or more: {text!r}")
    return value


MOST_THREADS = 256  # a thread count from the command line is 1 to this
KEYS_SHOWN = 10  # the unreadable items' keys a listing names


def threads(text: str) -> int:
    """A thread count from the command line: a whole number from 1 to 256 (argparse reports the error)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if not 1 <= value <= MOST_THREADS:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MOST_THREADS}, not {value}")
    return value


def count(text: str) -> int:
    """A count from the command line: a whole number, 0 or more (argparse reports the error)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from exc
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def tenant_name(text: str) -> str:
    """A tenant's name from the command line (argparse reports a bad one)."""
    from punctual.domain.tenancy import is_tenant

    if not is_tenant(text):
        raise argparse.ArgumentTypeError(f"not a tenant name: {text!r} (lower-case letters, digits and '-')")
    return text


def number(low: float, high: float, kind: type[float] | type[int] = float, above: bool = False) -> Any:
    """An argparse type: a finite number of ``kind`` in [low, high] (above ``low`` when ``above``)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
        if not math.isfinite(value) or value < low or value > high or (above and value <= low):
            bound = f"above {low:g}" if above else f"at least {low:g}"
            raise argparse.ArgumentTypeError(f"{text} is out of range: {bound} and at most {high:g}")
        return value

    return parse


def home(args: argparse.Namespace) -> Path:
    from punctual_tools.local.dynamodb_local import find_project_root

    return Path(args.home) if args.home else find_project_root() / ".punctual"


def settings_of(args: argparse.Namespace) -> Settings:
    """AWS (``PUNCTUAL_*``) with ``--aws``, else the running local stack's settings when there is one: its table,
    and how it polls (a task is flagged for the fast path by the stack's poll interval, not this process's)."""
    from punctual.stores.dlq import file_queue_url
    from punctual_tools.local.stack import client_settings, read_state

    state = read_state(home(args))
    overrides: dict[str, Any] = {}
    if state and not args.aws:
        overrides = {
            **client_settings(state),
            "dead_letter_queue_url": state.get("dead_letter_queue_url") or file_queue_url(home(args) / "dlq.jsonl"),
        }
    return Settings.from_env(**overrides)


def api_tenant(args: argparse.Namespace) -> str:
    """The local stack's tenant a command acts as through the REST API (``--tenant``, default ``local``)."""
    from punctual_tools.local.api_server import LOCAL_TENANT

    tenant = getattr(args, "tenant", None)
    if tenant is not None and not getattr(args, "api", False):
        raise PunctualError(f"--tenant {tenant} acts through the local stack's REST API: add --api")
    return tenant or LOCAL_TENANT


def api_token(state: dict[str, Any], tenant: str) -> str:
    """The bearer token of ``tenant`` the running stack (its state file, ``state``) wrote."""
    from punctual_tools.local.api_server import LOCAL_TENANT

    files = state.get("api_token_files") or {}
    if tenant == LOCAL_TENANT and not files and state.get("api_token_file"):
        files = {LOCAL_TENANT: state["api_token_file"]}  # a stack that serves the tenant local only
    if tenant not in files:
        raise PunctualError(
            f"the running stack's REST API does not serve the tenant {tenant!r} (it serves "
            f"{', '.join(sorted(files)) or 'none'}): start it with punctual up --tenant {tenant}"
        )
    try:
        return Path(files[tenant]).read_text().strip()
    except OSError as exc:
        raise PunctualError(f"cannot read the tenant {tenant!r}'s API token at {files[tenant]}: {exc}") from exc


def client_of(args: argparse.Namespace) -> Scheduler:
    """The client a command uses: the table directly, or the REST API with ``--api`` (or ``PUNCTUAL_API_URL``):
    with ``--aws`` (or a URL set) AWS's, SigV4-signed; else the running local stack's, with its token."""
    from punctual.runtime.client import Client

    settings = settings_of(args)
    tenant = api_tenant(args)
    if not getattr(args, "api", False) and not settings.api_url:
        return Client(settings)
    from punctual.scheduling.api_client import ApiClient
    from punctual_tools.local.stack import read_state

    if getattr(args, "tenant", None) is not None and (args.aws or settings.api_url):
        raise PunctualError(
            "--tenant picks a token of the local stack's; through PUNCTUAL_API_URL or --aws the "
            "tenant is the caller's (its IAM principal, or PUNCTUAL_API_TOKEN)"
        )
    if settings.api_url:
        return ApiClient.from_settings(settings)
    if args.aws:
        raise PunctualError("--api --aws needs the API's URL in PUNCTUAL_API_URL (the stack's ApiUrl output)")
    state = read_state(home(args)) or {}
    if not state.get("api_url"):
        raise PunctualError("--api: no local stack serving the API is running (start one with punctual up)")
    return ApiClient(state["api_url"], token=api_token(state, tenant))


def report_unreadable(unreadable: Unreadable, what: str) -> None:
    """Say on stderr how many stored items a listing of ``what`` left out because they cannot be read (the log
    names each one's key); nothing when none was."""
    if not unreadable.count:
        return
    shown = unreadable.keys[:KEYS_SHOWN] + (["..."] if len(unreadable.keys) > KEYS_SHOWN else [])
    keys = f" ({', '.join(shown)})" if shown else ""
    print(
        f"punctual: {unreadable.count} stored item(s) left out of the {what} listed: they cannot be read{keys}",
        file=sys.stderr,
    )


def client_options(p: argparse.ArgumentParser) -> None:
    """``--api`` and ``--tenant``: a command of ``p`` that goes through the client (:func:`client_of`)."""
    p.add_argument(
        "--api",
        action="store_true",
        help="go through the REST API (the local stack's, with its "
        "token; with --aws the one at PUNCTUAL_API_URL, SigV4-signed), not straight to the table",
    )
    p.add_argument(
        "--tenant",
        type=tenant_name,
        default=None,
        metavar="NAME",
        help="with --api: as this tenant of the local stack, with its token (default local; "
        "punctual up --tenant NAME serves it)",
    )
