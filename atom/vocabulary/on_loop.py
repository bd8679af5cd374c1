"""Planning on the event loop, and what sends it to a worker thread.

A request whose body is small plans on the event loop (atom/http/fetch.py): so little
text renders and tokenizes in well under a millisecond, less than a worker thread's
round trip costs. Work that can take longer whatever the body's size (reading and
decoding media, checking a grammar) calls `off_loop()` first: planning on the loop stops
there and starts again in a worker thread."""

from __future__ import annotations

from contextvars import ContextVar


class OffLoop(Exception):
    """Planning on the event loop met work for a worker thread: plan there instead."""


# True while a request plans on the event loop
ON_LOOP: ContextVar[bool] = ContextVar("atom_planning_on_loop", default=False)


def off_loop() -> None:
    """Raise OffLoop while planning on the event loop: what follows runs in a thread."""
    if ON_LOOP.get():
        raise OffLoop
