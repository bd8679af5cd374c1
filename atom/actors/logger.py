"""RequestLogger: appends every published envelope to the JSONL request log.

Its inbox is unbounded so publishing never blocks the Batcher; the task writes
whole lines with one write() each and flushes them, so lines are never torn or
interleaved and a crash loses at most the line being written.
"""

from __future__ import annotations

import math
from pathlib import Path

import trio

from atom.events import Envelope
from atom.request_log import encode


class RequestLogger:
    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._to_self, self._inbox = trio.open_memory_channel[Envelope](math.inf)

    def log_nowait(self, envelope: Envelope) -> None:
        """Queue an envelope for writing (a bus subscriber). Never blocks."""
        self._to_self.send_nowait(envelope)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        with open(self._path, "a", encoding="utf-8") as f:
            task_status.started()
            try:
                async for envelope in self._inbox:
                    f.write(encode(envelope) + "\n")
                    if not self._inbox.statistics().current_buffer_used:
                        f.flush()  # flush once the burst is written
            finally:
                self._drain(f)

    def _drain(self, f: object) -> None:
        """On shutdown, write what is still queued."""
        while True:
            try:
                envelope = self._inbox.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            f.write(encode(envelope) + "\n")  # type: ignore[attr-defined]
        f.flush()  # type: ignore[attr-defined]
