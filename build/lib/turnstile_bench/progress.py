"""A dependency-free progress bar on stderr (one line per phase when not a terminal)."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

__all__ = ["Progress"]


class Progress:
    """Shows ``done/total`` of the current phase; thread-safe, redraws at most 10 times/s.

    On a terminal it redraws one line in place; elsewhere (CI logs, ``make bench`` piped)
    it prints one line when a phase starts and one when it ends, so logs stay short.
    """

    WIDTH = 28

    def __init__(self, stream: TextIO | None = None, enabled: bool = True) -> None:
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = bool(getattr(self.stream, "isatty", lambda: False)())
        self._lock = threading.Lock()
        self._label = ""
        self._total = 0
        self._done = 0
        self._started = 0.0
        self._drawn = 0.0

    def phase(self, label: str, total: int) -> None:
        """Start a phase of ``total`` steps (ending the previous one)."""
        self.finish()
        with self._lock:
            self._label, self._total, self._done = label, max(total, 1), 0
            self._started = time.monotonic()
            if self.enabled and not self.tty:
                print(f"bench: {label} ({total}) ...", file=self.stream, flush=True)
        self._draw(force=True)

    def advance(self, steps: int = 1) -> None:
        with self._lock:
            self._done = min(self._total, self._done + steps)
        self._draw()

    def set(self, done: int) -> None:
        with self._lock:
            self._done = min(self._total, done)
        self._draw()

    def finish(self) -> None:
        """End the current phase, leaving its last state on screen."""
        with self._lock:
            if not self._label:
                return
            label, elapsed = self._label, time.monotonic() - self._started
            self._done = self._total
        if self.enabled:
            if self.tty:
                self._draw(force=True)
                print(file=self.stream, flush=True)
            else:
                print(f"bench: {label} done in {elapsed:.1f} s", file=self.stream, flush=True)
        with self._lock:
            self._label = ""

    def _draw(self, force: bool = False) -> None:
        if not (self.enabled and self.tty):
            return
        now = time.monotonic()
        with self._lock:
            if not force and now - self._drawn < 0.1:
                return
            self._drawn = now
            filled = int(self.WIDTH * self._done / self._total)
            bar = "#" * filled + "." * (self.WIDTH - filled)
            elapsed = now - self._started
            line = (
                f"\r{self._label:<28.28} [{bar}] {self._done:>7}/{self._total:<7} {elapsed:6.1f} s"
            )
        self.stream.write(line)
        self.stream.flush()
