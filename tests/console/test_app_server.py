"""ConsoleServer: the app on a loopback port from start to stop; another host only when allowed."""

from __future__ import annotations

import fnmatch
import http.cookiejar
import logging
import tomllib
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from fakes import TOKEN
from flask import Flask

from punctual_tools.console.server import ConsoleServer


def status_of(url: str) -> int:
    """The status of a GET of ``url`` (redirects followed, with the cookies they set)."""
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
    try:
        with opener.open(url, timeout=30) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def test_it_serves_the_app_on_a_free_loopback_port_until_stopped(app: Flask) -> None:
    with ConsoleServer(app) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert not server.url.endswith(":0")
        assert status_of(server.url + "/") == 401
        assert status_of(f"{server.url}/?token={TOKEN}") == 200  # the redirect, followed with its cookie
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(server.url + "/", timeout=5)


@pytest.mark.parametrize("host", ["0.0.0.0", "192.0.2.10", "example.com", "::"])
def test_it_refuses_a_host_other_than_loopback_unless_allowed(app: Flask, host: str) -> None:
    with pytest.raises(ValueError, match="loopback only"):
        ConsoleServer(app, host=host)
    assert ConsoleServer(app, host=host, allow_remote=True).host == host


@pytest.mark.parametrize(("host", "prefix"), [("localhost", "http://localhost:"), ("::1", "http://[::1]:")])
def test_loopback_names_and_ipv6_are_served(app: Flask, host: str, prefix: str) -> None:
    server = ConsoleServer(app, host=host)
    assert server.url.startswith(prefix)


def test_the_pages_templates_and_static_files_are_package_data() -> None:
    # Given the package data pyproject.toml declares for the console
    root = Path(__file__).resolve().parents[2]
    declared = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    patterns = declared["punctual_tools.console"]
    console = root / "src/tools/punctual_tools/console"
    # Then every template and static file is among it (an installed console would miss any other)
    files = [p.relative_to(console).as_posix() for d in ("templates", "static") for p in (console / d).iterdir()]
    assert len(files) > 10
    assert [f for f in files if not any(fnmatch.fnmatch(f, pattern) for pattern in patterns)] == []


def test_it_logs_only_the_requests_that_failed(app: Flask, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="werkzeug"), ConsoleServer(app) as server:
        assert status_of(f"{server.url}/static/console.css?token={TOKEN}") == 200
        assert status_of(f"{server.url}/tasks") == 401
    logged = [r.getMessage() for r in caplog.records if r.name == "werkzeug"]
    assert len(logged) == 1
    assert "GET /tasks HTTP/1.1" in logged[0]
    assert logged[0].endswith('" 401 -')
