"""`hypercorn -k trio -w 0 tests.http.guard_app:app`, a hello-world app behind ATOM's
connection guard, where hypercorn's HTTP/1.1 protocol code raises for a request whose
bytes hold `BOOM`: a stand-in for a protocol-layer error (the h2 `BusyResourceError`
sglang-router's traffic provokes is a race, too rare to wait for in a test). With
`GUARD=0` the guard is left off, to show what it prevents."""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from typing import Any

from hypercorn.events import Event, RawData
from hypercorn.protocol.h11 import H11Protocol

from atom.http.connection_guard import guard_connections

_handle = H11Protocol.handle


async def _failing_handle(self: H11Protocol, event: Event) -> None:
    if isinstance(event, RawData) and b"BOOM" in event.data:
        raise RuntimeError("an injected protocol-layer error")
    await _handle(self, event)


H11Protocol.handle = _failing_handle  # type: ignore[method-assign]
if os.environ.get("GUARD") != "0":
    guard_connections()


async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while (await receive())["type"] != "lifespan.shutdown":
            await send({"type": "lifespan.startup.complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"hello"})
