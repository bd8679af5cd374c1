"""A transcription's life: its events around the Transcriber's windows, and the answer's
bytes as they come (atom/projections/wire_audio.py renders them from the events).

As a pooling request's, the route's own task runs it: no parser, no tool calls. The
outputs are an async iterator, one per event that sends something: a stream's delta
for each window and its done event, or a whole answer once at the end. A client that
leaves closes the iterator (or cancels its task): the request's windows stop, and the
log says it was aborted.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Iterable

import numpy as np
import trio
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from atom.actors.cores import TranscriptionCore
from atom.actors.request import failed_event
from atom.actors.transcriber import AudioEnded, WindowDone
from atom.model.whisper.decoding import WindowTask, segments_of
from atom.model.whisper.runtime import WhisperRuntime
from atom.projections.wire import Output
from atom.projections.wire_audio import TranscriptionRenderer
from atom.vocabulary.audio_events import (
    TimedText,
    TimedWord,
    TranscriptionFinished,
    TranscriptionPlan,
    TranscriptionRequested,
    WindowTranscribed,
)
from atom.vocabulary.errors import AtomError
from atom.vocabulary.events import Event, RequestAborted
from atom.vocabulary.plan import Endpoint


async def transcription_outputs(
    core: TranscriptionCore, received: TranscriptionRequested, audio: Iterable[np.ndarray]
) -> AsyncGenerator[Output]:
    """Publish `received`, decode its windows, publish each one and the end (or the
    failure); yield what each event sends."""
    renderer = TranscriptionRenderer(received)
    core.bus.publish(received)
    began = core.clock()
    language = ""
    try:
        windows = core.transcriber.windows(audio, window_task(received.plan))
        async with contextlib.aclosing(windows) as items:
            async for item in items:
                event: Event
                if isinstance(item, AudioEnded):
                    event = TranscriptionFinished(
                        request_id=received.request_id,
                        seconds=item.seconds,
                        language=LANGUAGES.get(language, language),
                        latency_s=core.clock() - began,
                    )
                else:
                    language = language or item.language
                    event = window_event(core.runtime, received, item)
                core.bus.publish(event)
                if (output := renderer.feed(event)) is not None:
                    yield output
    except AtomError as error:
        failed = failed_event(received.request_id, error)
        core.bus.publish(failed)
        if (output := renderer.feed(failed)) is not None:
            yield output
    except (trio.Cancelled, GeneratorExit):
        aborted = RequestAborted(request_id=received.request_id, reason="client_disconnected")
        core.bus.publish(aborted)
        raise


def window_task(plan: TranscriptionPlan) -> WindowTask:
    """What each window of a request is asked: the plan's task, language, timestamps
    (decoded for the answers that show segments), temperature, seed and prompt."""
    return WindowTask(
        task="translate" if plan.endpoint is Endpoint.TRANSLATIONS else "transcribe",
        language=plan.language,
        timestamps=plan.segments,
        temperature=plan.temperature,
        seed=plan.seed,
        previous=plan.prompt_ids,
        words=plan.words,
    )


def window_event(
    runtime: WhisperRuntime, received: TranscriptionRequested, done: WindowDone
) -> WindowTranscribed:
    """A decoded window as the log keeps it: its text, and its segments timed from the
    start of the audio (the whole window as one segment when no timestamps were asked)."""
    text, segments = _timed_text(runtime, received.plan.segments, done)
    return WindowTranscribed(
        request_id=received.request_id,
        index=done.index,
        start=done.start,
        seconds=done.seconds,
        language=done.language,
        text=text,
        segments=segments,
        num_tokens=len(done.tokens),
        avg_logprob=done.avg_logprob,
        temperature=done.temperature,
        compression_ratio=done.compression_ratio,
        no_speech_prob=done.no_speech_prob,
        words=tuple(
            TimedWord(word=w.word.strip(), start=done.start + w.start, end=done.start + w.end)
            for w in done.words
        ),
    )


def _timed_text(
    runtime: WhisperRuntime, timed: bool, done: WindowDone
) -> tuple[str, tuple[TimedText, ...]]:
    """A window's text and its segments from the start of the audio: cut at its
    timestamps when `timed`, else the whole window as one (none when it said nothing)."""
    tokens, decode = runtime.tokens, runtime.tokenizer.decode
    if timed:
        found = segments_of(list(done.tokens), tokens, done.seconds)
        segments = tuple(
            TimedText(
                start=done.start + s.start, end=done.start + s.end, text=decode(s.tokens),
                tokens=s.tokens,
            )
            for s in found
        )  # fmt: skip
        return "".join(s.text for s in segments), segments
    text_ids = tuple(t for t in done.tokens if t < tokens.end_of_text)
    text = decode(text_ids)
    whole = TimedText(start=done.start, end=done.start + done.seconds, text=text, tokens=text_ids)
    return text, (whole,) if text_ids else ()
