"""OpenAI's Batch API: `POST /v1/batches`, `GET /v1/batches`, `GET /v1/batches/{id}`,
`POST /v1/batches/{id}/cancel` (atom/http/batch_runner.py runs them).

A batch's record is `<data dir>/batches/{id}.json`, rewritten whole (by a rename) at
each change of status; the lines it has answered are the lines of its output and error
files, so after a restart or a `kill -9` it resumes with the lines those files lack.
It belongs to the key that made it, as its files do."""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from quart import Response, request
from quart_trio import QuartTrio

from atom.http.access import tenant_in
from atom.http.body import request_json
from atom.http.errors import parse
from atom.http.files import FileStore
from atom.http.schemas import _Body
from atom.projections.wire import dumps
from atom.vocabulary.errors import InvalidRequest, NoSuchBatch
from atom.vocabulary.tenant import Tenant

RUNNING = ("validating", "in_progress", "finalizing", "cancelling")
WINDOW_S = 24 * 3600


@dataclass(frozen=True, slots=True, kw_only=True)
class Batch:
    id: str
    endpoint: str
    input_file_id: str
    output_file_id: str
    error_file_id: str
    status: str
    created_at: int
    owner: str | None
    total: int
    completed: int = 0
    failed: int = 0
    metadata: dict[str, str] | None = None
    times: dict[str, int] = dataclasses.field(default_factory=dict)  # status → when

    def as_object(self) -> dict[str, Any]:
        """OpenAI's Batch object; the output files are named once the batch has ended."""
        ended = self.status not in RUNNING
        stamp = {f"{status}_at": self.times.get(status) for status in _STAMPED}
        return {"id": self.id, "object": "batch", "endpoint": self.endpoint, "errors": None,
                "input_file_id": self.input_file_id, "completion_window": "24h",
                "status": self.status,
                "output_file_id": self.output_file_id if ended and self.completed else None,
                "error_file_id": self.error_file_id if ended and self.failed else None,
                "created_at": self.created_at, "expires_at": self.created_at + WINDOW_S,
                **stamp, "expired_at": None,
                "request_counts": {"total": self.total, "completed": self.completed,
                                   "failed": self.failed},
                "metadata": self.metadata}  # fmt: skip

    def moved(self, status: str) -> Batch:
        return dataclasses.replace(self, status=status, times={**self.times, status: _now()})


_STAMPED = ("in_progress", "finalizing", "completed", "failed", "cancelling", "cancelled")


class BatchStore:
    def __init__(self, folder: Path) -> None:
        self._folder = folder / "batches"  # made at the first batch

    def save(self, batch: Batch) -> None:
        self._folder.mkdir(parents=True, exist_ok=True)
        record = self._folder / f"{batch.id}.json"
        partial = record.with_suffix(".partial")
        partial.write_text(json.dumps(dataclasses.asdict(batch)))
        os.replace(partial, record)

    def get(self, batch_id: str, tenant: Tenant) -> Batch:
        if not batch_id.replace("_", "").isalnum():
            raise NoSuchBatch(f"No such batch: {batch_id!r}")
        try:
            batch = Batch(**json.loads((self._folder / f"{batch_id}.json").read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            raise NoSuchBatch(f"No such batch: {batch_id!r}") from None
        if not tenant.may_see(batch.owner):
            raise NoSuchBatch(f"No such batch: {batch_id!r}")
        return batch

    def every(self) -> list[Batch]:
        everyone = Tenant()
        return [self.get(p.stem, everyone) for p in sorted(self._folder.glob("batch_*.json"))]


class BatchCreateRequest(_Body):
    input_file_id: str
    endpoint: Literal["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]
    completion_window: Literal["24h"]
    metadata: dict[str, str] | None = None


def create(
    files: FileStore, batches: BatchStore, body: BatchCreateRequest, tenant: Tenant
) -> Batch:
    """A new batch over an uploaded file, checked before it is accepted: the file (this
    key's) and its custom ids (none twice)."""
    source = files.get(body.input_file_id, tenant)
    lines = files.path(source.id).read_bytes().splitlines()
    _check_custom_ids(lines)
    outputs = [files.add(b"", f"{source.id}_{kind}.jsonl", "batch_output", tenant.owner)
               for kind in ("output", "error")]  # fmt: skip
    batch = Batch(id=f"batch_{uuid.uuid4().hex}", endpoint=body.endpoint, input_file_id=source.id,
                  output_file_id=outputs[0].id, error_file_id=outputs[1].id, status="validating",
                  created_at=_now(), owner=tenant.owner, total=sum(1 for x in lines if x.strip()),
                  metadata=body.metadata)  # fmt: skip
    batches.save(batch)
    return batch


def _check_custom_ids(lines: list[bytes]) -> None:
    seen: set[str] = set()
    for line in lines:
        try:
            custom_id = json.loads(line).get("custom_id")
        except (ValueError, AttributeError):
            continue  # a malformed line fails alone, into the error file
        if isinstance(custom_id, str) and custom_id in seen:
            raise InvalidRequest(f"custom_id {custom_id!r} appears twice in the input file",
                                 param="input_file_id")  # fmt: skip
        seen.add(custom_id)


def register(app: QuartTrio, files: FileStore, batches: BatchStore, runner: Any) -> None:
    @app.post("/v1/batches")
    async def create_batch() -> Response:
        body = parse(BatchCreateRequest, await request_json())
        batch = create(files, batches, body, tenant_in(request.scope))
        runner.start(batch)
        return _json(batch.as_object())

    @app.get("/v1/batches")
    async def list_batches() -> Response:
        tenant = tenant_in(request.scope)
        mine = [b for b in batches.every() if tenant.may_see(b.owner)]
        data = [b.as_object() for b in sorted(mine, key=lambda b: -b.created_at)]
        return _json({"object": "list", "data": data, "has_more": False,
                      "first_id": data[0]["id"] if data else None,
                      "last_id": data[-1]["id"] if data else None})  # fmt: skip

    @app.get("/v1/batches/<batch_id>")
    async def retrieve_batch(batch_id: str) -> Response:
        return _json(batches.get(batch_id, tenant_in(request.scope)).as_object())

    @app.post("/v1/batches/<batch_id>/cancel")
    async def cancel_batch(batch_id: str) -> Response:
        batch = batches.get(batch_id, tenant_in(request.scope))
        if batch.status in RUNNING:
            batch = runner.cancel(batch)
        return _json(batch.as_object())


def _now() -> int:
    return int(time.time())


def _json(obj: object) -> Response:
    return Response(dumps(obj), content_type="application/json")
