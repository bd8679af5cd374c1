"""One connection's failure ends that connection, never the server.

hypercorn 0.18's trio worker serves each connection as a task of the listener's
nursery, so an exception that escapes one connection's protocol code ends the whole
process (pgjones/hypercorn#203 is one report). One such exception is reachable from
outside: over HTTP/2 (sglang-router speaks it to its workers), hypercorn's h2 sender
and its connection close both use the socket, and when they meet, trio raises
`BusyResourceError` in the sender. Seen here: an ATOM replica behind sglang-router
died on its fourth chat request (docs/reliability.md).

`guard_connections()` wraps hypercorn's per-connection `TCPServer.run`: an error that
escapes it is logged and the connection is closed; cancellation still propagates, so
shutdown works as before. It patches hypercorn's class, once per process, from
`create_app`, before the first connection is served.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
import trio

log = structlog.get_logger(__name__)

_GUARDED = "_atom_guarded"


def guard_connections() -> None:
    """Install the guard on hypercorn's trio connection handler (idempotent)."""
    from hypercorn.trio.tcp_server import TCPServer

    if getattr(TCPServer.run, _GUARDED, False):
        return
    TCPServer.run = _guarded(TCPServer.run)  # type: ignore[method-assign, assignment]


def _guarded(run: Callable[[Any], Awaitable[None]]) -> Callable[[Any], Awaitable[None]]:
    @functools.wraps(run)
    async def guarded_run(server: Any) -> None:
        try:
            await run(server)
        except* Exception as group:  # Cancelled is a BaseException: it goes on up
            log.warning(
                "connection_failed",
                error=repr(group.exceptions[0]),
                advice="the connection was closed; the server keeps serving",
            )
            gone = (trio.BrokenResourceError, trio.ClosedResourceError, OSError)
            with trio.CancelScope(shield=True), contextlib.suppress(*gone):
                await server.stream.aclose()

    setattr(guarded_run, _GUARDED, True)
    return guarded_run
