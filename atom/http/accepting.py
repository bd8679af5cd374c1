"""A listener that takes every queued connection at once.

Hypercorn's trio worker serves its sockets through `trio.serve_listeners`, which
accepts one connection a pass of Trio's scheduler (trio's `SocketListener.accept`
checkpoints after each). Once streams run, a pass is a step's worth of writes, so a
burst of 256 connections waited seconds at the door while the engine idled
(docs/performance.md, "Where c=256's first tokens wait"). `DrainingListener.accept`
waits for one connection as trio's does, then takes the others already queued without
waiting, and hands them out on the next calls without a checkpoint: `serve_listeners`
starts a handler for each in the same pass.

Hypercorn builds its listeners as `trio.SocketListener(...)` inside the worker, after
the application's lifespan start-up, where `create_app` calls `drain_accepts()` (as it
patches hypercorn's connections: atom/http/connection_guard.py): that name then builds
a DrainingListener, which wraps trio's listener (a final class) for the waiting accept
and the closing.
"""

from __future__ import annotations

import errno
import os
import socket
from collections import deque

import trio

MAX_BURST = 1024  # connections taken in one go at most
_RETRY = {errno.ECONNABORTED, errno.EPROTO, errno.EPERM}  # a peer gone before its accept


_SocketListener = trio.SocketListener  # trio's own (a final class: wrapped, not subclassed)


class DrainingListener(trio.abc.Listener[trio.SocketStream]):
    def __init__(self, sock: trio.socket.SocketType) -> None:
        self._listener = _SocketListener(sock)
        self.socket = sock
        # The same listening socket as a plain one (a duplicate descriptor), for accepts
        # that must not wait: trio's socket has none that returns without a checkpoint.
        self._plain = socket.socket(fileno=os.dup(sock.fileno()))
        self._plain.setblocking(False)
        self._ready: deque[trio.SocketStream] = deque()

    async def accept(self) -> trio.SocketStream:
        if self._ready:
            return self._ready.popleft()  # taken in the last call's burst
        stream = await self._listener.accept()
        self._take_queued()
        return stream

    def _take_queued(self) -> None:
        while len(self._ready) < MAX_BURST:
            try:
                sock, _ = self._plain.accept()
            except BlockingIOError:
                return
            except OSError as error:
                if error.errno in _RETRY:
                    continue
                return  # (EMFILE and the like: the next accept meets it and reports it)
            sock.setblocking(False)
            self._ready.append(trio.SocketStream(trio.socket.from_stdlib_socket(sock)))

    async def aclose(self) -> None:
        self._plain.close()
        while self._ready:
            await self._ready.popleft().aclose()
        await self._listener.aclose()


def drain_accepts() -> None:
    """Make `trio.SocketListener(...)` build a DrainingListener (idempotent)."""
    trio.SocketListener = DrainingListener  # type: ignore[misc, assignment]
