"""OutputTap: the `respond` of a request that runs detached from its connection (a
background response). It keeps every server-sent event the writer renders, so
readers can come and go: the connection that started it, and later ones resuming
after an event they already have."""

from __future__ import annotations

from collections.abc import AsyncIterator

import trio

from atom.projections.wire import Output


class OutputTap:
    def __init__(self) -> None:
        self.events: list[bytes] = []  # one SSE event each, in order
        self.first: Output | None = None  # fixes the status and content type
        self.is_final = False
        self._changed = trio.Event()

    async def respond(self, output: Output) -> None:
        if self.first is None:
            self.first = output
        self.events += [event + b"\n\n" for event in output.body.split(b"\n\n") if event]
        self.is_final = output.is_final
        self._changed.set()
        self._changed = trio.Event()

    async def follow(self, start: int) -> AsyncIterator[tuple[bytes, bool]]:
        """(event, whether it is the last) from index `start` on, as they come."""
        index = start
        while True:
            while index < len(self.events):
                index += 1
                yield self.events[index - 1], self.is_final and index == len(self.events)
            if self.is_final:
                return
            changed = self._changed
            await changed.wait()
