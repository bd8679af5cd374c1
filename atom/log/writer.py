"""RequestLogger: appends every published envelope to the JSONL request log.

Its inbox is unbounded so publishing never blocks the Batcher. The task takes
whatever has queued up (a burst), encodes it and hands it to the kernel with one
unbuffered write: lines are never interleaved, and what a crash of the process
can lose is the burst not yet written. Nothing it is given can stop it: a record
that cannot be encoded, or a write that fails, is counted (`num_failed`, shown in
/metrics) and logged, and the next records are written as usual, on a line of their
own (a full disk may have taken half a line). The server keeps serving without its log
rather than refusing requests (docs/reliability.md).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import structlog
import trio

from atom.log.codec import encode
from atom.vocabulary.events import Envelope

log = structlog.get_logger(__name__)


class RequestLogger:
    def __init__(self, path: str | Path) -> None:
        self._path = Path(path)
        self._to_self, self._inbox = trio.open_memory_channel[Envelope](math.inf)
        self.num_failed = 0  # records lost to an encoding or write error
        self._may_be_torn = False  # the last write failed, perhaps half-way through a line

    def log_nowait(self, envelope: Envelope) -> None:
        """Queue an envelope for writing (a bus subscriber). Never blocks."""
        self._to_self.send_nowait(envelope)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self._path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            _end_torn_line(fd)
            task_status.started()
            async for envelope in self._inbox:
                self._write(fd, [envelope, *self._queued()])
        finally:
            self._write(fd, self._queued())  # on shutdown, what is still queued
            os.close(fd)

    def _queued(self) -> list[Envelope]:
        burst = []
        while True:
            try:
                burst.append(self._inbox.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return burst

    def _write(self, fd: int, burst: list[Envelope]) -> None:
        encoded = [encoded_line(envelope) for envelope in burst]
        lines = [line for line in encoded if line is not None]
        self.num_failed += len(encoded) - len(lines)
        data = b"".join(lines)
        written = 0
        try:
            if self._may_be_torn:  # a failed write may have left half a line
                _end_torn_line(fd)
                self._may_be_torn = False
            while written < len(data):
                written += os.write(fd, data[written:])
        except OSError:
            self._may_be_torn = True
            self.num_failed += len(lines) - _num_whole(lines, written)
            log.error("request_log_write_failed", path=str(self._path), exc_info=True)


def encoded_line(envelope: Envelope) -> bytes | None:
    """The envelope's JSONL line, or None (logged) for a record with no JSON form."""
    try:
        try:
            return encode(envelope).encode() + b"\n"
        except UnicodeEncodeError:  # a lone surrogate: kept, escaped; the line stays UTF-8
            return encode(envelope, ensure_ascii=True).encode() + b"\n"
    except Exception:
        log.error("request_log_record_failed", seq=envelope.seq, exc_info=True)
        return None


def _num_whole(lines: list[bytes], num_bytes: int) -> int:
    """How many of `lines` the first `num_bytes` written hold whole."""
    end = 0
    for count, line in enumerate(lines):
        end += len(line)
        if end > num_bytes:
            return count
    return len(lines)


def _end_torn_line(fd: int) -> None:
    """End a line a crashed server left unfinished, so it stays apart from ours."""
    size = os.lseek(fd, 0, os.SEEK_END)
    if size and os.pread(fd, 1, size - 1) != b"\n":
        os.write(fd, b"\n")
