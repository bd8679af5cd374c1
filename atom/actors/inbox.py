"""An actor's inbox: a bounded Trio channel of requests, read by its one owner."""

from __future__ import annotations

from typing import TypeVar

import trio

from atom.vocabulary.errors import EngineFailed, Overloaded

T = TypeVar("T")


async def take(inbox: trio.MemoryReceiveChannel[T], *, wait: bool) -> list[T]:
    """Everything queued in `inbox` now; with `wait`, first waits for one when none is."""
    taken = [await inbox.receive()] if wait else []
    return taken + queued(inbox)


def queued(inbox: trio.MemoryReceiveChannel[T]) -> list[T]:
    """What is queued in `inbox` now, without waiting (nothing once it is closed)."""
    out: list[T] = []
    while True:
        try:
            out.append(inbox.receive_nowait())
        except (trio.WouldBlock, trio.EndOfChannel):
            return out


def submit(send: trio.MemorySendChannel[T], request: T, *, what: str) -> None:
    """Queue a request: Overloaded (429) when the inbox is full, EngineFailed once the
    actor has stopped (`what` names the requests in the message)."""
    try:
        send.send_nowait(request)
    except trio.WouldBlock:
        raise Overloaded(f"too many {what} are waiting; retry shortly") from None
    except trio.ClosedResourceError:
        raise EngineFailed("the engine has stopped; the server is shutting down") from None
