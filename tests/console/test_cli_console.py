"""``punctual console`` and ``punctual up``'s console: a port of its own beside the stack's, and the token kept in
the home."""

from __future__ import annotations

import stat
from pathlib import Path

from punctual_tools.cli import build_parser
from punctual_tools.cli.console import TOKEN_FILE, console_token
from punctual_tools.settings import LocalSettings


def test_the_consoles_default_port_is_none_of_the_stacks_others() -> None:
    # Given the defaults of punctual up and punctual console, and the demo's webhook receiver's
    up = build_parser().parse_args(["up"])
    console = build_parser().parse_args(["console"])
    receiver = LocalSettings.model_fields["receiver_port"].default
    # Then the console listens where neither DynamoDB Local, the REST API nor the receiver does, the same in both
    assert up.console_port == console.port
    assert len({up.port, up.api_port, receiver, up.console_port}) == 4  # four listeners


def test_the_token_is_made_once_kept_private_and_read_again(tmp_path: Path) -> None:
    token, path = console_token(tmp_path)
    assert path == tmp_path / TOKEN_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert len(token) >= 32  # 24 random bytes, URL-safe
    assert console_token(tmp_path) == (token, path)
