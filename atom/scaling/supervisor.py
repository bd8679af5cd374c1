"""`atom serve --data-parallel-size N`: N replicas, then sglang-router in front.

One Trio task reads one channel of happenings (a child exited, a signal came) and
decides; every child has a watcher that reports its exit there.
- Start: the replicas load; once every `/health` answers 200 the router starts on the
  public port. A replica that exits before that ends the start (status 1).
- Serving: a replica that exits is logged and left out by the router's health check
  (about three seconds); the last one gone ends the server (status 1), and so does
  the router's exit.
- SIGTERM or SIGINT drains: every replica gets SIGTERM and finishes what it runs
  (--shutdown-timeout) while the router still carries their streams; then the router
  stops. A second signal is passed on (a replica then ends at once). Status 0.
"""

from __future__ import annotations

import dataclasses
import math
import os
import signal
import socket
import tempfile
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

import httpx
import structlog
import trio

from atom.logs import configure_logging
from atom.scaling.commands import (
    APP,
    replica_env,
    replica_settings,
    require_router,
    router_command,
    serve_command,
)
from atom.scaling.placement import Replica, place
from atom.scaling.processes import Child, spawn
from atom.vocabulary.config import Settings

log = structlog.get_logger("atom.scaling")
POLL_S = 0.5  # how often a starting replica's /health and the router's are asked
ROUTER_STOP_S = 10.0  # the router's own grace after the replicas drained
DRAIN_MARGIN_S = 15.0  # past --shutdown-timeout before a replica is killed


@dataclass(frozen=True, slots=True)
class Exited:
    child: Child
    status: int


@dataclass(frozen=True, slots=True)
class Signalled:
    signum: int


Happening = Exited | Signalled


def serve(host: str, port: int, settings: Settings, app: str = APP) -> int:
    """The exit status: 0 after a drain, 1 when replicas or the router failed."""
    configure_logging(settings.log_level, settings.log_format)
    require_router()
    replicas = place(settings.data_parallel_size, settings.device)
    if settings.responses_store_dir is not None:
        return trio.run(Supervisor(host, port, settings, app, replicas).run)
    with tempfile.TemporaryDirectory(prefix="atom-responses-") as folder:  # the replicas share it
        shared = dataclasses.replace(settings, responses_store_dir=folder)
        return trio.run(Supervisor(host, port, shared, app, replicas).run)


class Supervisor:
    def __init__(
        self, host: str, port: int, settings: Settings, app: str, placed: Sequence[Replica]
    ) -> None:
        self._host, self._port, self._settings, self._app = host, port, settings, app
        self._placed = tuple(placed)
        self._replicas: list[Child] = []
        self._urls: list[str] = []
        self._router: Child | None = None
        self._send, self._happenings = trio.open_memory_channel[Happening](math.inf)

    async def run(self) -> int:
        try:
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._forward_signals, signals)
                    self._start_replicas(nursery)
                    nursery.start_soon(self._start_router, nursery)
                    status = await self._until_stopped()
                    await self._drain()
                    nursery.cancel_scope.cancel()
            return status
        finally:
            for child in self._children():
                child.signal(signal.SIGKILL)

    def _children(self) -> list[Child]:
        return [*self._replicas, *([self._router] if self._router else [])]

    def _start_replicas(self, nursery: trio.Nursery) -> None:
        for replica in self._placed:
            with socket.socket() as listener:  # bound here: the port is known, never raced
                listener.bind(("127.0.0.1", 0))
                fd = listener.fileno()
                settings = replica_settings(self._settings, replica)
                command = serve_command(f"fd://{fd}", settings, self._app)
                env = replica_env(self._settings, replica)
                child = spawn(f"replica {replica.rank}", command, env, cpus=replica.cpus,
                              pass_fds=(fd,))  # fmt: skip
                url = f"http://127.0.0.1:{listener.getsockname()[1]}"
            log.info("replica_started", replica=replica.rank, url=url, cpus=replica.cpus,
                     gpu=replica.gpu, pid=child.process.pid)  # fmt: skip
            self._replicas.append(child)
            self._urls.append(url)
            nursery.start_soon(self._watch, child)

    async def _start_router(self, nursery: trio.Nursery) -> None:
        async with httpx.AsyncClient(timeout=POLL_S * 4) as client:
            for url in self._urls:
                await _until_healthy(client, url)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                metrics_port = probe.getsockname()[1]
            command = router_command(self._host, self._port, self._urls, self._settings,
                                     metrics_port)  # fmt: skip
            self._router = spawn("router", command, os.environ)
            nursery.start_soon(self._watch, self._router)
            await _until_healthy(client, f"http://{_loopback(self._host)}:{self._port}")
        log.info("serving", url=f"http://{self._host}:{self._port}", replicas=self._urls,
                 policy=str(self._settings.router_policy),
                 router_metrics=f"http://127.0.0.1:{metrics_port}/metrics")  # fmt: skip

    async def _watch(self, child: Child) -> None:
        await self._send.send(Exited(child, await child.exited()))

    async def _forward_signals(self, signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            await self._send.send(Signalled(signum))

    async def _until_stopped(self) -> int:
        async for happening in self._happenings:
            if isinstance(happening, Signalled):
                log.info("draining", signal=signal.Signals(happening.signum).name)
                return 0
            child = happening.child
            log.error("child_exited", child=child.name, status=happening.status)
            if child is self._router or self._router is None:
                return 1  # the router is gone, or a replica failed to start
            if not any(replica.running for replica in self._replicas):
                return 1
        return 1

    async def _drain(self) -> None:
        """Replicas first, while the router still carries their streams; then it."""
        for replica in self._replicas:
            replica.signal(signal.SIGTERM)
        grace = self._settings.shutdown_timeout + DRAIN_MARGIN_S
        with trio.move_on_after(grace):
            while any(replica.running for replica in self._replicas):
                happening = await self._happenings.receive()
                if isinstance(happening, Signalled):  # a second signal: pass it on
                    for replica in self._replicas:
                        replica.signal(happening.signum)
        if self._router is not None:
            self._router.signal(signal.SIGTERM)
            with trio.move_on_after(ROUTER_STOP_S):
                await self._router.exited()
        log.info("stopped")


async def _until_healthy(client: httpx.AsyncClient, url: str) -> None:
    while True:
        try:
            if (await client.get(f"{url}/health")).status_code == 200:
                return
        except httpx.TransportError:
            pass
        await trio.sleep(POLL_S)


def _loopback(host: str) -> str:
    """Where the launcher reaches the router: a wildcard bind through loopback."""
    return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
