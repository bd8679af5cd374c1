"""Runs a batch's lines through the server's own routes (atom/http/batches.py).

Each line is one request to the batch's endpoint, made as the batch's key, in-process
(the routes' own checks, plans and renderers: a line's answer is what a client would
have got). A few at a time (`CONCURRENCY`), and under `--scheduling-policy priority`
at a priority below the default one (`BATCH_PRIORITY`), so interactive requests go
first. Each answer is one line appended to the output file (a 200) or the error file
(anything else, and a line that is no request), in one write. After a restart the
batch resumes with the lines neither file holds: none is answered twice, none lost. A
draining server stops taking lines and leaves those it was refused for the next start.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import structlog
import trio

from atom.actors.engine import Engine
from atom.http.batches import RUNNING, Batch, BatchStore
from atom.http.files import FileStore
from atom.vocabulary.tenant import Tenant

log = structlog.get_logger(__name__)
CONCURRENCY = 4  # lines of one batch in flight at once
BATCH_PRIORITY = 1  # after interactive requests' default 0 (lower first)
PRIORITIZED = ("/v1/chat/completions", "/v1/completions", "/v1/responses")
Dispatch = Callable[[Tenant], Any]  # the server's ASGI app acting as a tenant


class BatchRunner:
    def __init__(
        self, files: FileStore, batches: BatchStore, engine: Engine, dispatch: Dispatch
    ) -> None:
        self._files, self._batches, self._engine = files, batches, engine
        self._dispatch = dispatch
        self._live: dict[str, Batch] = {}  # this runner's batches; it alone saves them

    def start(self, batch: Batch) -> None:
        self._live[batch.id] = batch
        self._engine.start_detached(f"batch:{batch.id}", lambda: self._guarded(batch.id),
                                    cancel=lambda reason: None)  # fmt: skip

    def resume(self) -> None:
        """Every batch a stop left running."""
        for batch in self._batches.every():
            if batch.status in RUNNING:
                log.info("batch_resumed", batch=batch.id, status=batch.status)
                self.start(batch)

    def cancel(self, batch: Batch) -> Batch:
        """Stop taking its lines; those in flight finish. Its record as it stands now."""
        live = self._live.get(batch.id)
        if live is None or live.status == "cancelling":
            return live or batch
        return self._set(live.moved("cancelling"))

    def _set(self, batch: Batch) -> Batch:
        self._live[batch.id] = batch
        self._batches.save(batch)
        return batch

    async def _guarded(self, batch_id: str) -> None:
        """A batch that cannot run (its input file deleted, say) fails alone."""
        try:
            await self._run(batch_id)
        except Exception:
            log.error("batch_failed", batch=batch_id, exc_info=True)
            self._batches.save(self._live.pop(batch_id).moved("failed"))

    async def _run(self, batch_id: str) -> None:
        while not self._engine.is_ready:
            await trio.sleep(0.1)
        batch = self._live[batch_id]
        out, err = self._files.path(batch.output_file_id), self._files.path(batch.error_file_id)
        done = _answered(out) | _answered(err)
        lines = [line for line in self._files.path(batch.input_file_id).read_bytes().splitlines()
                 if line.strip()]  # fmt: skip
        if batch.status == "validating":
            batch = self._set(batch.moved("in_progress"))
        self._set(_counted(batch, out, err))
        owner = Tenant(owner=batch.owner, sees_all=batch.owner is None)
        transport = httpx.ASGITransport(app=self._dispatch(owner))
        async with httpx.AsyncClient(
            transport=transport, base_url="http://atom", timeout=None
        ) as client:
            limiter = trio.CapacityLimiter(CONCURRENCY)
            async with trio.open_nursery() as nursery:
                for index, line in enumerate(lines):
                    if f"{batch_id}_{index}" in done:
                        continue
                    await limiter.acquire_on_behalf_of(index)
                    if self._stopping(batch_id):
                        limiter.release_on_behalf_of(index)
                        break
                    nursery.start_soon(self._line, client, batch_id, index, line, limiter)
        if self._engine.is_draining or self._engine.has_stopped:
            return  # the next start resumes it
        self._finish(batch_id)

    def _stopping(self, batch_id: str) -> bool:
        draining = self._engine.is_draining or self._engine.has_stopped
        return draining or self._live[batch_id].status == "cancelling"

    def _finish(self, batch_id: str) -> None:
        batch = self._live.pop(batch_id)
        ended = "cancelled" if batch.status == "cancelling" else "completed"
        self._batches.save(batch.moved("finalizing").moved(ended))
        log.info("batch_ended", batch=batch_id, status=ended, completed=batch.completed,
                 failed=batch.failed)  # fmt: skip

    async def _line(
        self, client: httpx.AsyncClient, batch_id: str, index: int, line: bytes,
        limiter: trio.CapacityLimiter,
    ) -> None:  # fmt: skip
        try:
            try:
                record, ok = await self._answer(client, self._live[batch_id], index, line)
            except (httpx.HTTPError, ValueError) as error:  # an answer that is no JSON
                log.error("batch_line_failed", batch=batch_id, line=index, exc_info=True)
                line_id = f"batch_req_{batch_id}_{index}"
                record, ok = _failed(line_id, None, str(error), "internal_error"), False
            if record is None:
                return  # refused by a draining server: left for the next start
            batch = self._live[batch_id]
            _append(self._files.path(batch.output_file_id if ok else batch.error_file_id), record)
            counts = (batch.completed + ok, batch.failed + (not ok))
            self._set(_replaced(batch, completed=counts[0], failed=counts[1]))
        finally:
            limiter.release_on_behalf_of(index)

    async def _answer(
        self, client: httpx.AsyncClient, batch: Batch, index: int, line: bytes
    ) -> tuple[dict[str, Any] | None, bool]:
        """The output or error record of one line, and whether it succeeded."""
        line_id = f"batch_req_{batch.id}_{index}"
        request: Any = None
        try:
            request = json.loads(line)
            custom_id, body = _request_of(request, batch.endpoint)
        except (ValueError, TypeError) as error:
            named = request.get("custom_id") if isinstance(request, dict) else None
            return _failed(line_id, named, str(error)), False
        if batch.endpoint in PRIORITIZED and self._engine.settings.scheduling_policy == "priority":
            body.setdefault("priority", BATCH_PRIORITY)
        answer = await client.post(batch.endpoint, json=body)
        if answer.status_code == 503 and self._stopping(batch.id):
            return None, False
        response = {"status_code": answer.status_code,
                    "request_id": answer.headers.get("x-request-id", line_id),
                    "body": answer.json()}  # fmt: skip
        record = {"id": line_id, "custom_id": custom_id, "response": response, "error": None}
        return record, answer.status_code == 200


def _request_of(request: Any, endpoint: str) -> tuple[str, dict[str, Any]]:
    """A line's custom_id and body; ValueError naming what is wrong with it."""
    if not isinstance(request, dict):
        raise ValueError("a line must be a JSON object")
    custom_id, body = request.get("custom_id"), request.get("body")
    if not isinstance(custom_id, str):
        raise ValueError("custom_id must be a string")
    if request.get("method", "POST") != "POST" or request.get("url") != endpoint:
        raise ValueError(f"each line must be a POST to the batch's endpoint {endpoint}")
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    if body.get("stream"):
        raise ValueError("a batch line cannot stream")
    return custom_id, dict(body)


def _failed(
    line_id: str, custom_id: Any, message: str, code: str = "invalid_request"
) -> dict[str, Any]:
    error = {"code": code, "message": message}
    return {"id": line_id, "custom_id": custom_id, "response": None, "error": error}


def _append(path: Path, record: dict[str, Any]) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, json.dumps(record, ensure_ascii=False).encode() + b"\n")
    finally:
        os.close(fd)


def _answered(path: Path) -> set[str]:
    """The `{batch}_{index}` of every whole line a file holds; a torn last line (a
    `kill -9` mid-write) is cut off first, and its line runs again."""
    data = path.read_bytes()
    whole = data[: data.rfind(b"\n") + 1]
    if len(whole) != len(data):
        os.truncate(path, len(whole))
    return {json.loads(line)["id"].removeprefix("batch_req_") for line in whole.splitlines()}


def _counted(batch: Batch, out: Path, err: Path) -> Batch:
    """Its counts as its files hold them (they outlive a crash; the record may not)."""
    return _replaced(batch, completed=len(_answered(out)), failed=len(_answered(err)))


def _replaced(batch: Batch, *, completed: int, failed: int) -> Batch:
    return dataclasses.replace(batch, completed=completed, failed=failed)
