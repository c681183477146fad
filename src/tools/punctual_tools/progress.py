"""One progress line for long waits (the demo, the load test's check).

On a terminal the line is rewritten in place, and each redraw first clears what was there (a log line that
arrived meanwhile starts on a cleared line too: see ``punctual_tools.cli``). Anywhere else (a log file, CI) a
carriage-return bar would be one unreadable line, so the progress is printed as a plain line every
``every_s`` seconds, and always at the end.
"""

from __future__ import annotations

import shutil
import time
from typing import TextIO

CLEAR_LINE = "\r\033[K"  # back to the start of the line, and erase it


class ProgressLine:
    """``show(text)`` as often as you like; ``end(text)`` once, with the final state."""

    def __init__(self, out: TextIO | None, every_s: float = 5.0) -> None:
        self.out = out
        isatty = getattr(out, "isatty", None)
        self.tty = bool(isatty is not None and isatty())
        self.every_s = every_s
        self._last = float("-inf")
        self._open = False  # a terminal line is drawn and not ended yet

    def show(self, text: str, *, force: bool = False) -> None:
        if self.out is None:
            return
        if self.tty:  # cut to the terminal's width: a wrapped line could not be cleared
            self.out.write(CLEAR_LINE + text[: max(shutil.get_terminal_size().columns - 1, 20)])
            self._open = True
        elif force or time.monotonic() - self._last >= self.every_s:
            self.out.write(text + "\n")
            self._last = time.monotonic()
        self.out.flush()

    def end(self, text: str | None = None) -> None:
        if self.out is None:
            return
        if text is not None:
            self.show(text, force=True)
        if self._open:
            self.out.write("\n")
            self._open = False
        self.out.flush()
