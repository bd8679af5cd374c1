"""The response's writer task (atom/http/asgi.py, `open_writer`): `written` returns once
everything handed over has been written, however quickly the writes end."""

from __future__ import annotations

from typing import Any

import trio

from atom.http.asgi import open_writer
from atom.projections.wire import Output


async def test_written_after_writes_that_end_before_the_hand_over_returns() -> None:
    """A send with no checkpoint: whether the writer task or the caller of `respond`
    runs first after the hand-over is Trio's choice (it shuffles), and the write may be
    done before `respond` returns. Many rounds, so both orders come up."""
    bodies: list[bytes] = []

    async def send(message: Any) -> None:
        bodies.extend([message["body"]] if "body" in message else [])

    for _ in range(20):
        async with open_writer(send) as writer:
            for body in (b"a", b"b"):
                await writer.respond(Output(body=body))
                with trio.fail_after(1):
                    await writer.written()
            await writer.respond(Output(body=b"c", is_final=True))
    assert bodies == [b"a", b"b", b"c"] * 20


async def test_written_waits_for_the_write_in_progress() -> None:
    release = trio.Event()
    written_at: list[str] = []

    async def send(message: Any) -> None:
        if message.get("body") == b"slow":
            await release.wait()

    async with open_writer(send) as writer, trio.open_nursery() as nursery:

        async def wait_written() -> None:
            await writer.written()
            written_at.append("written")

        await writer.respond(Output(body=b"slow"))
        nursery.start_soon(wait_written)
        await trio.testing.wait_all_tasks_blocked()
        assert written_at == []  # the write has not ended
        release.set()
    assert written_at == ["written"]
