"""The progress line: in place on a terminal, plain lines at a bounded rate anywhere else."""

from __future__ import annotations

import io
import os
import shutil

import pytest

from punctual_tools.progress import CLEAR_LINE, ProgressLine


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_terminal_each_redraw_clears_the_line_and_the_end_closes_it() -> None:
    out = Terminal()
    progress = ProgressLine(out)
    progress.show("1/3")
    progress.show("2/3")
    progress.end("3/3 done")
    assert out.getvalue() == f"{CLEAR_LINE}1/3{CLEAR_LINE}2/3{CLEAR_LINE}3/3 done\n"


def test_elsewhere_it_prints_plain_lines_at_most_every_few_seconds_and_always_the_end() -> None:
    out = io.StringIO()
    progress = ProgressLine(out, every_s=3600)
    progress.show("1/3")
    progress.show("2/3")  # within the hour: not printed
    progress.end("3/3 done")
    assert out.getvalue() == "1/3\n3/3 done\n"
    assert "\r" not in out.getvalue()


def test_an_end_without_text_after_nothing_shown_writes_nothing_and_none_is_silent() -> None:
    out = Terminal()
    ProgressLine(out).end()
    assert out.getvalue() == ""
    silent = ProgressLine(None)
    silent.show("x")
    silent.end("y")


def test_on_a_terminal_a_line_wider_than_the_terminal_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "get_terminal_size", lambda *a, **k: os.terminal_size((40, 24)))
    out = Terminal()
    ProgressLine(out).show("x" * 100)
    assert out.getvalue() == CLEAR_LINE + "x" * 39
