"""ASGI framing of a generation response: the renderer's Outputs as http.response
messages. The first Output fixes the status and headers; an Output that is the whole
body also gets its Content-Length (HTTP/1.0 clients need it)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from typing import Any

import trio

from atom.projections.wire import Output

ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]


class AsgiResponder:
    """Owns ASGI `send` for one response; `respond` is what the request actor calls."""

    def __init__(self, send: ASGISend) -> None:
        self._send = send
        self._has_headers = False

    async def respond(self, output: Output) -> None:
        if not self._has_headers:
            self._has_headers = True
            await self._send(
                {
                    "type": "http.response.start",
                    "status": output.status,
                    "headers": _headers(output),
                }
            )
        await self._send(
            {"type": "http.response.body", "body": output.body, "more_body": not output.is_final}
        )


class Writer:
    """A response's writes, in a task of their own (`open_writer`): `respond` hands an
    Output over, `written` waits until every Output handed over has been written."""

    def __init__(self, to_writer: trio.MemorySendChannel[Output]) -> None:
        self._to_writer = to_writer
        self._num_handed = 0  # counted before the hand-over: the writer may be done first
        self._num_written = 0
        self._progress = trio.Event()  # set (and replaced) at each write's end

    async def respond(self, output: Output) -> None:
        """Returns once the writer task has taken `output`: at once when it is waiting,
        else when it has written the one before."""
        self._num_handed += 1
        try:
            try:  # the writer waits for it: handed over without a trip through the scheduler
                self._to_writer.send_nowait(output)
            except trio.WouldBlock:  # still writing the last one
                await self._to_writer.send(output)
        except BaseException:  # cancelled, or the writer is gone: not handed over
            self._num_handed -= 1
            raise

    def wrote(self) -> None:
        """The writer task: one more Output written."""
        self._num_written += 1
        self._progress.set()
        self._progress = trio.Event()

    async def written(self) -> None:
        """Returns once every Output handed over has been written: at once, with no trip
        through the scheduler, when they have been."""
        while self._num_written < self._num_handed:
            await self._progress.wait()


@asynccontextmanager
async def open_writer(send: ASGISend) -> AsyncIterator[Writer]:
    """A Writer whose writes run in a task of their own, one at a time. Hypercorn shields
    a socket write from cancellation, so a caller that gives up on a client that stopped
    reading (`--stream-stall-timeout`) must not be the one writing; leaving waits for the
    last write, which ends when the client reads or goes."""
    responder = AsgiResponder(send)
    to_writer, outputs = trio.open_memory_channel[Output](0)
    writer = Writer(to_writer)

    async def write_all() -> None:
        async with outputs:
            async for output in outputs:
                await responder.respond(output)
                writer.wrote()

    async with trio.open_nursery() as nursery, to_writer:
        nursery.start_soon(write_all)
        yield writer


def _headers(output: Output) -> list[tuple[bytes, bytes]]:
    headers = [(b"content-type", output.content_type.encode())]
    if output.content_type == "text/event-stream":
        headers.append((b"cache-control", b"no-cache"))
    if output.is_final:  # the whole body at once: HTTP/1.0 clients need its length
        headers.append((b"content-length", str(len(output.body)).encode()))
    if output.retry_after_s is not None:
        headers.append((b"retry-after", str(output.retry_after_s).encode()))
    return headers
