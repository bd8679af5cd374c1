"""The audio routes' answers (OpenAI's /v1/audio/transcriptions and /translations): json,
text, srt, vtt and verbose_json bodies, or a stream of `transcript.text.delta` events
and one `transcript.text.done`.

A pure projection of a transcription's events (atom/vocabulary/audio_events.py), fed
the same events live and in `atom replay`. A stream sends each window's text as it is
decoded; the deltas joined are the done event's text. A whole answer is the windows'
text stripped, or their segments, timed from the start of the audio.
"""

from __future__ import annotations

import math
from typing import Any

from atom.projections.wire import Output, dumps, error_output
from atom.vocabulary.audio_events import (
    TranscriptFormat,
    TranscriptionFinished,
    TranscriptionRequested,
    WindowTranscribed,
)
from atom.vocabulary.errors import error_body
from atom.vocabulary.events import Event, RequestFailed
from atom.vocabulary.plan import Endpoint

SSE = "text/event-stream"
CONTENT_TYPES = {
    TranscriptFormat.JSON: "application/json",
    TranscriptFormat.VERBOSE_JSON: "application/json",
    TranscriptFormat.TEXT: "text/plain; charset=utf-8",
    TranscriptFormat.SRT: "text/plain; charset=utf-8",
    TranscriptFormat.VTT: "text/vtt; charset=utf-8",
}


class TranscriptionRenderer:
    def __init__(self, received: TranscriptionRequested) -> None:
        self.received = received
        self.windows: list[WindowTranscribed] = []
        self.has_started = False  # a byte went out (a stream's first delta)

    def feed(self, event: Event) -> Output | None:
        plan = self.received.plan
        if isinstance(event, RequestFailed):
            if not self.has_started:
                return error_output(event)
            error = error_body(event.message, event.error_type, param=event.param, code=event.code)
            return Output(body=_sse(error), content_type=SSE, is_final=True)
        if isinstance(event, WindowTranscribed):
            self.windows.append(event)
            if not plan.stream:
                return None
            delta = event.text if self.has_started else event.text.lstrip()
            self.has_started = True
            chunk = {"type": "transcript.text.delta", "delta": delta}
            return Output(body=_sse(chunk), content_type=SSE)
        if isinstance(event, TranscriptionFinished):
            if plan.stream:
                done = {"type": "transcript.text.done", "text": self.text, "usage": _usage(event)}
                return Output(body=_sse(done), content_type=SSE, is_final=True)
            self.has_started = True
            body = self._body(event)
            content_type = CONTENT_TYPES[plan.response_format]
            return Output(body=body, content_type=content_type, is_final=True)
        return None

    @property
    def text(self) -> str:
        """The transcript: every window's text, joined, stripped."""
        return "".join(w.text for w in self.windows).strip()

    def _body(self, finished: TranscriptionFinished) -> bytes:
        kind = self.received.plan.response_format
        if kind is TranscriptFormat.JSON:
            return dumps({"text": self.text, "usage": _usage(finished)})
        if kind is TranscriptFormat.TEXT:
            return (self.text + "\n").encode()
        if kind is TranscriptFormat.SRT:
            return srt(self.windows).encode()
        if kind is TranscriptFormat.VTT:
            return vtt(self.windows).encode()
        return dumps(self._verbose(finished))

    def _verbose(self, finished: TranscriptionFinished) -> dict[str, Any]:
        plan = self.received.plan
        return {
            "task": "translate" if plan.endpoint is Endpoint.TRANSLATIONS else "transcribe",
            "language": finished.language,
            "duration": round(finished.seconds, 3),
            "text": self.text,
            "segments": segments_json(self.windows),
            **({"words": words_json(self.windows)} if plan.words else {}),
            "usage": _usage(finished),
        }


def _usage(finished: TranscriptionFinished) -> dict[str, Any]:
    """OpenAI's usage of whisper-1: the audio's length in whole seconds, rounded up."""
    return {"type": "duration", "seconds": math.ceil(finished.seconds)}


def _sse(obj: Any) -> bytes:
    return b"data: " + dumps(obj) + b"\n\n"


def segments_json(windows: list[WindowTranscribed]) -> list[dict[str, Any]]:
    """verbose_json's segments, numbered across windows; `seek` is where the window
    starts, in the 10 ms frames of Whisper's features (as OpenAI's)."""
    out: list[dict[str, Any]] = []
    for window in windows:
        for segment in window.segments:
            out.append(
                {
                    "id": len(out),
                    "seek": round(window.start * 100),
                    "start": round(segment.start, 3),
                    "end": round(segment.end, 3),
                    "text": segment.text,
                    "tokens": list(segment.tokens),
                    "temperature": window.temperature,
                    "avg_logprob": window.avg_logprob,
                    "compression_ratio": window.compression_ratio,
                    "no_speech_prob": window.no_speech_prob,
                }
            )
    return out


def words_json(windows: list[WindowTranscribed]) -> list[dict[str, Any]]:
    return [
        {"word": w.word, "start": round(w.start, 3), "end": round(w.end, 3)}
        for window in windows
        for w in window.words
    ]


def srt(windows: list[WindowTranscribed]) -> str:
    cues = [
        f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{s.text.strip()}\n"
        for i, s in enumerate((s for w in windows for s in w.segments), start=1)
    ]
    return "\n".join(cues)


def vtt(windows: list[WindowTranscribed]) -> str:
    cues = [
        f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{s.text.strip()}\n"
        for w in windows
        for s in w.segments
    ]
    return "\n".join(["WEBVTT\n", *cues])


def _clock(seconds: float, mark: str) -> str:
    """hh:mm:ss,mmm (SubRip) or hh:mm:ss.mmm (WebVTT)."""
    ms = round(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs, ms = divmod(ms, 1000)
    return f"{hours:02d}:{minutes:02d}:{secs:02d}{mark}{ms:03d}"
