"""The audio routes' form (OpenAI's multipart body) and its plan: the fields validated
once into a TranscriptionPlan, the file opened and its first window decoded (so a file
that is not audio is a 400 before anything starts), its hash and size for the log.

Planned in a worker thread: decoding and hashing take a while for a long file. The
rest of the file is decoded window by window as the Transcriber reaches it.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from atom.actors.cores import TranscriptionCore
from atom.audio.decode import AudioError, audio_windows
from atom.vocabulary.audio_events import (
    AudioRef,
    TranscriptFormat,
    TranscriptionPlan,
    TranscriptionRequested,
)
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.plan import Endpoint

SEGMENTED = frozenset({TranscriptFormat.SRT, TranscriptFormat.VTT, TranscriptFormat.VERBOSE_JSON})


class TranscriptionForm(BaseModel):
    """The form's fields but the file: strings on the wire, read as their types."""

    model_config = ConfigDict(extra="allow", strict=False, allow_inf_nan=False)

    model: str | None = None
    language: str | None = None
    prompt: str | None = None
    response_format: TranscriptFormat = TranscriptFormat.JSON
    temperature: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0
    stream: bool = False
    timestamp_granularities: list[Literal["segment", "word"]] = Field(default_factory=list)
    seed: int | None = None  # vLLM's: a temperature above 0 samples the same again


@dataclass(frozen=True, slots=True)
class Upload:
    """The form's file: its name and bytes."""

    filename: str
    data: bytes


@dataclass(frozen=True, slots=True)
class Planned:
    received: TranscriptionRequested
    audio: Iterable[np.ndarray]  # the windows, the first one decoded already


def form_fields(fields: Any) -> dict[str, Any]:
    """A multipart form's fields (werkzeug's MultiDict) as one dict: OpenAI's client sends
    `timestamp_granularities[]` once per value. InvalidRequest for a part with no name."""
    out: dict[str, Any] = {}
    for key in fields:
        if not isinstance(key, str):
            raise InvalidRequest(
                "a form part has no name (Content-Disposition: form-data; name=...)"
            )
        values = fields.getlist(key)
        if key.endswith("[]"):
            out[key.removesuffix("[]")] = values
        else:
            out[key] = values[-1]
    return out


def plan_transcription(
    core: TranscriptionCore,
    endpoint: Endpoint,
    form: TranscriptionForm,
    upload: Upload,
    caller: tuple[str | None, str | None],
) -> Planned:
    """`caller`: the client's `x-request-id` (if sent) and the key's fingerprint.
    InvalidRequest naming the field at fault."""
    plan = _plan(core, endpoint, form)
    windows = audio_windows(upload.data, max_seconds=core.max_audio_seconds)
    try:
        first = next(windows)
    except AudioError as error:
        raise InvalidRequest(f"file: {error}", param="file") from None
    audio = AudioRef(
        sha256=hashlib.sha256(upload.data).hexdigest(),
        num_bytes=len(upload.data),
        filename=upload.filename,
        data=base64.b64encode(upload.data).decode() if core.log_audio else None,
    )
    client_id, owner = caller
    received = TranscriptionRequested(
        request_id="transcription-" + (client_id or uuid.uuid4().hex),
        endpoint=endpoint,
        model=core.name,
        created=int(core.clock()),
        audio=audio,
        plan=plan,
        body=form.model_dump(exclude_defaults=True),
        owner=owner,
    )
    return Planned(received=received, audio=itertools.chain([first], windows))


def _plan(
    core: TranscriptionCore, endpoint: Endpoint, form: TranscriptionForm
) -> TranscriptionPlan:
    tokens = core.runtime.tokens
    if form.language is not None and form.language not in tokens.languages:
        raise InvalidRequest(
            f"language {form.language!r} is not one the model knows (ISO-639-1, such as 'en')",
            param="language",
        )
    words = "word" in form.timestamp_granularities
    if words and not core.runtime.times_words:
        raise InvalidRequest(
            "this model names no alignment heads: it cannot time words",
            param="timestamp_granularities",
        )
    if form.timestamp_granularities and form.response_format is not TranscriptFormat.VERBOSE_JSON:
        raise InvalidRequest(
            "timestamp_granularities needs response_format verbose_json",
            param="timestamp_granularities",
        )
    if form.stream and form.response_format not in {TranscriptFormat.JSON, TranscriptFormat.TEXT}:
        raise InvalidRequest(
            "a stream sends text deltas: response_format must be json or text", param="stream"
        )
    prompt = form.prompt.strip() if form.prompt else ""
    prompt_ids = (
        core.runtime.tokenizer.encode(" " + prompt, add_special_tokens=False) if prompt else []
    )
    return TranscriptionPlan(
        endpoint=endpoint,
        response_format=form.response_format,
        stream=form.stream,
        language=form.language,
        temperature=form.temperature,
        seed=form.seed,
        segments=form.response_format in SEGMENTED,
        words=words,
        prompt_ids=tuple(prompt_ids),
    )
