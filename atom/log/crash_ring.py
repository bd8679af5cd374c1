"""CrashRing: the last minutes of events in memory (`--crash-dump-dir`), written out as a
request log when the server fails, so `atom replay` can rebuild what clients got.

A bus subscriber: it keeps envelopes newer than `window_s` (and at most `max_events`),
with or without `--request-log`. On a fatal error `dump` writes them to a new file in
the crash-dump folder, in the request log's format, and every envelope published after
that (the failed requests' ends) is appended at once, up to the process's exit.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable
from pathlib import Path

import structlog

from atom.log.writer import encoded_line
from atom.vocabulary.events import Envelope

log = structlog.get_logger(__name__)

Subscribe = Callable[[Callable[[Envelope], None]], None]  # EventBus.subscribe

WINDOW_S = 300.0  # "the last minutes"
MAX_EVENTS = 100_000  # a busy server's five minutes can be more: memory stays bounded


class CrashRing:
    def __init__(
        self, folder: str | Path, *, window_s: float = WINDOW_S, max_events: int = MAX_EVENTS
    ) -> None:
        self._folder = Path(folder)
        self._window_s = window_s
        self._ring: deque[Envelope] = deque(maxlen=max_events)
        self._fd: int | None = None  # the dump, once written
        self.path: Path | None = None

    @classmethod
    def on(cls, subscribe: Subscribe, folder: str | None) -> CrashRing | None:
        """A ring subscribed (by the bus's `subscribe`), dumping into `folder` (None: none)."""
        if folder is None:
            return None
        ring = cls(folder)
        subscribe(ring.keep)
        return ring

    def keep(self, envelope: Envelope) -> None:
        """Bus subscriber: remember the envelope (after a dump, append it to the dump)."""
        if self._fd is not None:
            self._write([envelope])
            return
        self._ring.append(envelope)
        while self._ring and self._ring[0].at < envelope.at - self._window_s:
            self._ring.popleft()

    def dump(self) -> Path | None:
        """Write the ring to `<folder>/crash-<time>-<pid>.jsonl` (once); later envelopes
        follow it there. Never raises: a dump that cannot be written is logged."""
        if self._fd is not None:
            return self.path
        at = self._ring[-1].at if self._ring else 0.0
        path = self._folder / f"crash-{int(at)}-{os.getpid()}.jsonl"
        try:
            self._folder.mkdir(parents=True, exist_ok=True)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError:
            log.error("crash_dump_failed", path=str(path), exc_info=True)
            return None
        self.path = path
        log.critical("crash_dump_written", path=str(path), num_events=len(self._ring))
        self._write(list(self._ring))
        self._ring.clear()
        return path

    def _write(self, envelopes: list[Envelope]) -> None:
        assert self._fd is not None
        data = b"".join(line for e in envelopes if (line := encoded_line(e)) is not None)
        try:
            while data:
                data = data[os.write(self._fd, data) :]
        except OSError:
            log.error("crash_dump_failed", path=str(self.path), exc_info=True)
