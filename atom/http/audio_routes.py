"""POST /v1/audio/transcriptions and /v1/audio/translations, as OpenAI's client sends
them: a multipart form, validated and planned off the event loop (atom/http/audio.py),
then run by atom/actors/transcription_request.py.

The first output decides the answer's status: an error before any window was decoded
is a plain error response; otherwise a stream goes out as server-sent events, a whole
answer as one body.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from quart import Response, request
from quart_trio import QuartTrio

from atom.actors.engine import Engine
from atom.actors.transcription_request import transcription_outputs
from atom.http.access import tenant_in
from atom.http.audio import TranscriptionForm, Upload, form_fields, plan_transcription
from atom.http.errors import parse
from atom.http.fetch import plan_off_loop
from atom.http.request_id import admitted_request_id
from atom.projections.wire import Output
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.plan import Endpoint

PATHS = {
    "/v1/audio/transcriptions": Endpoint.TRANSCRIPTIONS,
    "/v1/audio/translations": Endpoint.TRANSLATIONS,
}
STREAM_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def register(app: QuartTrio, engine: Engine) -> None:
    for path, endpoint in PATHS.items():
        app.add_url_rule(path, f"audio:{path}", _handler(engine, endpoint), methods=["POST"])


def _handler(engine: Engine, endpoint: Endpoint) -> Callable[[], Any]:
    async def handle() -> Response:
        form, upload = await _read_form()
        core = engine.transcription(form.model, request.path)
        caller = (admitted_request_id(request.scope), tenant_in(request.scope).owner)
        planned = await plan_off_loop(
            engine.settings, plan_transcription, core, endpoint, form, upload, caller
        )
        received = planned.received
        engine.admit(received.request_id, core.name)  # no checkpoint until it is published
        outputs = transcription_outputs(core, received, planned.audio)
        first = await anext(outputs)
        if first.is_final:
            await outputs.aclose()
            return _whole(first)
        response = Response(_stream(first, outputs), content_type=first.content_type)
        response.headers.update(STREAM_HEADERS)
        return response

    return handle


async def _read_form() -> tuple[TranscriptionForm, Upload]:
    """The form's fields, validated, and its file; InvalidRequest naming what is missing."""
    files = await request.files
    form = parse(TranscriptionForm, form_fields(await request.form))
    upload = files.get("file")
    if upload is None:
        raise InvalidRequest("file is required: a multipart/form-data field", param="file")
    return form, Upload(filename=upload.filename or "", data=upload.read())


def _whole(output: Output) -> Response:
    headers = {} if output.retry_after_s is None else {"retry-after": str(output.retry_after_s)}
    return Response(
        output.body, status=output.status, content_type=output.content_type, headers=headers
    )


async def _stream(first: Output, rest: AsyncGenerator[Output]) -> AsyncIterator[bytes]:
    yield first.body
    async with contextlib.aclosing(rest):
        async for output in rest:
            yield output.body
