"""The request logger cannot be stopped by what it is given, and keeps its lines whole."""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest
import trio
import trio.testing

from atom.log.codec import decode, read_log
from atom.log.writer import RequestLogger
from atom.vocabulary.events import Endpoint, Envelope, RequestReceived


def _received(seq: int, body: dict[str, object]) -> Envelope:
    event = RequestReceived(
        request_id=f"r{seq}", endpoint=Endpoint.CHAT, model="m", created=0, body=body
    )
    return Envelope(seq=seq, at=float(seq), event=event)


async def _log_all(path: Path, envelopes: list[Envelope]) -> RequestLogger:
    logger = RequestLogger(path)
    async with trio.open_nursery() as nursery:
        await nursery.start(logger.run)
        for envelope in envelopes:
            logger.log_nowait(envelope)
            await trio.sleep(0)  # one burst an envelope
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return logger


async def test_a_record_it_cannot_write_is_counted_and_the_next_ones_are_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.jsonl"
    envelopes = [
        _received(0, {"user": "plain"}),
        _received(1, {"user": "\ud800 lone surrogate"}),  # kept, escaped
        _received(2, {"user": {1, 2}}),  # no JSON form: counted, dropped
        _received(3, {"user": "after"}),
    ]
    logger = await _log_all(path, envelopes)
    logged = list(read_log(path))
    assert logger.num_failed == 1
    assert [e.seq for e in logged] == [0, 1, 3]
    assert logged[1].event.body == {"user": "\ud800 lone surrogate"}  # type: ignore[attr-defined]
    assert path.read_bytes().decode("utf-8")  # every line is UTF-8


async def test_a_restarted_logger_ends_the_line_a_crash_left_torn(tmp_path: Path) -> None:
    path = tmp_path / "log.jsonl"
    await _log_all(path, [_received(0, {})])
    with open(path, "ab") as f:
        f.write(b'{"v":1,"seq":1,"at":1.0,"type":"request_rec')  # the crash
    await _log_all(path, [_received(0, {"user": "restarted"})])
    torn: list[int] = []
    logged = list(read_log(path, on_torn=lambda number, reason: torn.append(number)))
    assert torn == [2]
    assert [e.event.body for e in logged] == [{}, {"user": "restarted"}]  # type: ignore[attr-defined]


async def test_a_full_disk_is_counted_and_the_logger_keeps_running() -> None:
    """/dev/full fails every write with ENOSPC, as a full disk does."""
    logger = await _log_all(Path("/dev/full"), [_received(i, {}) for i in range(3)])
    assert logger.num_failed == 3


async def test_after_a_write_cut_half_way_the_next_records_start_a_line_of_their_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "log.jsonl"
    real_write = os.write
    lost: list[int] = []  # the records a full disk cut: the one torn, and those after it
    is_full = threading.Event()

    def disk_full_once(fd: int, data: bytes) -> int:
        """As the kernel does: the write that fills the disk returns how much it wrote,
        and the next one fails."""
        if is_full.is_set():
            is_full.clear()
            raise OSError(errno.ENOSPC, "No space left on device")
        cut = data.find(b'"seq":1,')
        if lost or cut < 0:
            return real_write(fd, data)
        torn_from = data.rfind(b"\n", 0, cut) + 1
        lost.extend(e.seq for e in map(decode, data[torn_from:].decode().splitlines()))
        is_full.set()
        return real_write(fd, data[:cut])  # up to the middle of record 1

    monkeypatch.setattr(os, "write", disk_full_once)
    logger = await _log_all(path, [_received(i, {}) for i in range(6)])
    torn: list[int] = []
    logged = list(read_log(path, on_torn=lambda number, reason: torn.append(number)))
    assert lost[0] == 1 and 5 not in lost
    assert logger.num_failed == len(lost)
    assert [e.seq for e in logged] == [seq for seq in range(6) if seq not in lost]
    assert len(torn) == 1  # the half line stays alone (replay reports it); the rest is whole
