"""OpenAI's Files API, as the Batch API needs it: `POST /v1/files` (multipart, `purpose`
`batch`), `GET /v1/files`, `GET`/`DELETE /v1/files/{id}`, `GET /v1/files/{id}/content`.

A file is two entries under `<data dir>/files/`: its bytes (`{id}`) and its record
(`{id}.json`, written whole by a rename). It belongs to the key that made it (its
Tenant's owner): another key finds nothing (a 404), as with stored responses."""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.http.access import tenant_in
from atom.projections.wire import dumps
from atom.vocabulary.errors import InvalidRequest, NoSuchFile
from atom.vocabulary.tenant import Tenant

PURPOSES = ("batch", "batch_output")


@dataclass(frozen=True, slots=True, kw_only=True)
class StoredFile:
    id: str
    filename: str
    purpose: str
    created_at: int
    owner: str | None

    def as_object(self, size: int) -> dict[str, Any]:
        return {"id": self.id, "object": "file", "bytes": size, "created_at": self.created_at,
                "filename": self.filename, "purpose": self.purpose, "status": "processed",
                "expires_at": None, "status_details": None}  # fmt: skip


class FileStore:
    def __init__(self, folder: Path) -> None:
        self._folder = folder / "files"  # made at the first upload

    def add(self, content: bytes, filename: str, purpose: str, owner: str | None) -> StoredFile:
        """A new file holding `content` (an empty one for a batch's output)."""
        stored = StoredFile(id=f"file-{uuid.uuid4().hex}", filename=filename, purpose=purpose,
                            created_at=int(time.time()), owner=owner)  # fmt: skip
        self._folder.mkdir(parents=True, exist_ok=True)
        self.path(stored.id).write_bytes(content)
        record = self._folder / f"{stored.id}.json"
        partial = record.with_suffix(".partial")
        partial.write_text(json.dumps(asdict(stored)))
        os.replace(partial, record)
        return stored

    def path(self, file_id: str) -> Path:
        if not file_id.replace("-", "").isalnum():
            raise NoSuchFile(f"No such file: {file_id!r}")
        return self._folder / file_id

    def get(self, file_id: str, tenant: Tenant) -> StoredFile:
        """The file as `tenant` may see it; NoSuchFile (a 404) for an unknown id or
        another key's."""
        try:
            stored = StoredFile(**json.loads((self.path(file_id).with_suffix(".json")).read_text()))
        except (FileNotFoundError, ValueError, TypeError):
            raise NoSuchFile(f"No such file: {file_id!r}") from None
        if not tenant.may_see(stored.owner):
            raise NoSuchFile(f"No such file: {file_id!r}")
        return stored

    def listed(self, tenant: Tenant) -> list[StoredFile]:
        names = sorted(self._folder.glob("file-*.json"))
        found = [self.get(p.stem, tenant) for p in names if self._visible(p.stem, tenant)]
        return sorted(found, key=lambda f: f.created_at, reverse=True)

    def _visible(self, file_id: str, tenant: Tenant) -> bool:
        try:
            self.get(file_id, tenant)
        except NoSuchFile:
            return False
        return True

    def delete(self, file_id: str, tenant: Tenant) -> None:
        self.get(file_id, tenant)
        self.path(file_id).with_suffix(".json").unlink(missing_ok=True)
        self.path(file_id).unlink(missing_ok=True)

    def as_object(self, stored: StoredFile) -> dict[str, Any]:
        return stored.as_object(self.path(stored.id).stat().st_size)


def register(app: QuartTrio, files: FileStore) -> None:
    @app.post("/v1/files")
    async def upload_file() -> Response:
        form, uploaded = await request.form, await request.files
        purpose = form.get("purpose")
        if purpose != "batch":
            raise InvalidRequest("purpose must be 'batch' (the Batch API's input)", param="purpose")
        if "file" not in uploaded:
            raise InvalidRequest("a multipart field 'file' is required", param="file")
        part = uploaded["file"]
        owner = tenant_in(request.scope).owner
        stored = files.add(part.read(), part.filename or "upload.jsonl", purpose, owner)
        return _json(files.as_object(stored))

    @app.get("/v1/files")
    async def list_files() -> Response:
        data = [files.as_object(f) for f in files.listed(tenant_in(request.scope))]
        return _json({"object": "list", "data": data, "has_more": False})

    @app.get("/v1/files/<file_id>")
    async def retrieve_file(file_id: str) -> Response:
        return _json(files.as_object(files.get(file_id, tenant_in(request.scope))))

    @app.get("/v1/files/<file_id>/content")
    async def file_content(file_id: str) -> Response:
        stored = files.get(file_id, tenant_in(request.scope))
        return Response(files.path(stored.id).read_bytes(), content_type="application/jsonl")

    @app.delete("/v1/files/<file_id>")
    async def delete_file(file_id: str) -> Response:
        files.delete(file_id, tenant_in(request.scope))
        return _json({"id": file_id, "object": "file", "deleted": True})


def _json(obj: object) -> Response:
    return Response(dumps(obj), content_type="application/json")
