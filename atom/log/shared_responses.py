"""The Responses store that every replica shares (`--responses-store-dir DIR`).

Each replica appends the events of its stored responses (a Responses request with
`store`, everything that request's events say until it ends, and every deletion and
cancel request) to a JSONL file of its own in DIR, in the request log's format, as they
are published, so a client that has its answer finds it on any replica. Each folds
every other file there into its `ResponsesStore`: polled a few times a second, and at
once when a lookup misses or finds a response still running. So a
`previous_response_id`, a `GET` or a cancel works whichever replica the router picks,
and the store stays a projection of the event stream. One writer a file: nothing is
locked, and a folder on a shared filesystem serves several hosts. A replica that
restarts reads them all again; the files grow as the request log does (nothing
compacts them yet).

A cancel asked of a replica that does not run the response is published as
`ResponseCancelAsked`; the replica that runs it reads it here and cancels it.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from pathlib import Path

import structlog
import trio

from atom.log.codec import UNREADABLE, decode
from atom.log.writer import encoded_line
from atom.projections.responses_store import ResponsesStore
from atom.vocabulary.events import (
    Envelope,
    RequestAborted,
    RequestCompleted,
    RequestEvent,
    RequestFailed,
    RequestReceived,
    ResponseCancelAsked,
    ResponseDeleted,
)
from atom.vocabulary.plan import Endpoint

log = structlog.get_logger(__name__)
POLL_S = 0.25  # how often the other replicas' files are read
ENDS = (RequestCompleted, RequestFailed, RequestAborted)
ALWAYS = (ResponseDeleted, ResponseCancelAsked)  # shared whichever replica's they are


class SharedResponses:
    def __init__(
        self, folder: str | Path, store: ResponsesStore, cancel: Callable[[str], None]
    ) -> None:
        self._folder = Path(folder)
        # One file a server: its host, its process, and a tag (two apps in one process).
        name = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._own = self._folder / f"{name}.jsonl"
        self._store, self._cancel = store, cancel
        self._fd: int | None = None  # the own file, opened by run()
        self._followed: set[str] = set()  # this replica's stored responses still running
        self._read: dict[Path, int] = {}  # bytes of each other file already folded
        store.refresh = self.catch_up

    def apply(self, envelope: Envelope) -> None:
        """A bus subscriber: this replica's events that the other replicas' stores need."""
        event = envelope.event
        if isinstance(event, RequestReceived) and _is_stored(event):
            self._followed.add(event.request_id)
        elif not isinstance(event, RequestEvent) or not (
            event.request_id in self._followed or isinstance(event, ALWAYS)
        ):
            return
        self._append(envelope)
        if isinstance(event, ENDS):
            self._followed.discard(event.request_id)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Fold what is there, open the own file, then keep folding."""
        self._folder.mkdir(parents=True, exist_ok=True)
        await trio.to_thread.run_sync(self.catch_up)  # every earlier replica's, at start
        self._fd = os.open(self._own, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            task_status.started()
            while True:
                await trio.sleep(POLL_S)
                self.catch_up()
        finally:
            os.close(self._fd)
            self._fd = None

    def _append(self, envelope: Envelope) -> None:
        """Written before the bus goes on: a client that has its answer finds it on any
        replica. One line a write to a file opened for appending; a failed one is logged
        (its torn line is skipped by the readers) and serving goes on."""
        line = encoded_line(envelope)
        if line is None or self._fd is None:
            return
        try:
            os.write(self._fd, line)
        except OSError:
            log.error("shared_store_write_failed", path=str(self._own), exc_info=True)

    def catch_up(self) -> None:
        """Fold what the other replicas appended since the last read (whole lines)."""
        for path in sorted(self._folder.glob("*.jsonl")):
            if path != self._own:
                self._fold(path)

    def _fold(self, path: Path) -> None:
        start = self._read.get(path, 0)
        try:
            with path.open("rb") as f:
                f.seek(start)
                data = f.read()
        except OSError:
            return
        whole = data[: data.rfind(b"\n") + 1]
        self._read[path] = start + len(whole)
        for line in whole.splitlines():
            try:
                envelope = decode(line.decode())
            except UNREADABLE:
                log.warning("shared_store_line_skipped", file=str(path))
                continue
            self._store.apply(envelope)
            if isinstance(envelope.event, ResponseCancelAsked):
                self._cancel(envelope.event.request_id)


def _is_stored(event: RequestReceived) -> bool:
    plan = event.plan
    return plan is not None and plan.shape.endpoint is Endpoint.RESPONSES and plan.shape.store
