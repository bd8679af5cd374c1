"""The request logger cannot be stopped by what it is given, and keeps its lines whole."""

from __future__ import annotations

from pathlib import Path

import trio
import trio.testing

from atom.actors.logger import RequestLogger
from atom.events import Endpoint, Envelope, RequestReceived
from atom.request_log import read_log


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
