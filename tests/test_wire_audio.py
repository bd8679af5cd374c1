"""The audio routes' answers as a projection of their events (atom/projections/wire_audio.py):
every format from the same windows, a stream's deltas and its end, and an error."""

from __future__ import annotations

import json

from openai.types.audio import TranscriptionSegment

from atom.projections.wire_audio import TranscriptionRenderer
from atom.vocabulary.audio_events import (
    AudioRef,
    TimedText,
    TimedWord,
    TranscriptFormat,
    TranscriptionFinished,
    TranscriptionPlan,
    TranscriptionRequested,
    WindowTranscribed,
)
from atom.vocabulary.events import Event, RequestFailed
from atom.vocabulary.plan import Endpoint

ID = "transcription-1"


def requested(
    response_format: TranscriptFormat, *, stream: bool = False, words: bool = False
) -> TranscriptionRequested:
    plan = TranscriptionPlan(
        endpoint=Endpoint.TRANSCRIPTIONS, response_format=response_format, stream=stream,
        words=words,
    )  # fmt: skip
    audio = AudioRef(sha256="0" * 64, num_bytes=10)
    return TranscriptionRequested(
        request_id=ID, endpoint=plan.endpoint, model="w", created=0, audio=audio, plan=plan
    )


def window(index: int, start: float, parts: list[tuple[float, float, str]]) -> WindowTranscribed:
    segments = tuple(TimedText(start=a, end=b, text=t, tokens=(1, 2)) for a, b, t in parts)
    return WindowTranscribed(
        request_id=ID, index=index, start=start, seconds=30.0, language="en",
        text="".join(t for _, _, t in parts), segments=segments, num_tokens=5, avg_logprob=-0.25,
        temperature=0.2 * index, compression_ratio=1.5, no_speech_prob=0.01,
        words=tuple(TimedWord(word=t.strip(), start=a, end=b) for a, b, t in parts),
    )  # fmt: skip


WINDOWS = [
    window(0, 0.0, [(0.0, 2.5, " Hello there."), (3.0, 29.98, " Second one.")]),
    window(1, 30.0, [(3661.5, 3662.25, " Late.")]),
]
END = TranscriptionFinished(request_id=ID, seconds=45.2, language="english", latency_s=1.0)


def rendered(received: TranscriptionRequested, events: list[Event]) -> list[bytes]:
    renderer = TranscriptionRenderer(received)
    return [out.body for e in events if (out := renderer.feed(e)) is not None]


def test_whole_answers_in_every_format() -> None:
    def body(kind: TranscriptFormat) -> str:
        [only] = rendered(requested(kind), [*WINDOWS, END])
        return only.decode()

    text = "Hello there. Second one. Late."
    assert json.loads(body(TranscriptFormat.JSON)) == {
        "text": text, "usage": {"type": "duration", "seconds": 46}
    }  # fmt: skip
    assert body(TranscriptFormat.TEXT) == text + "\n"
    assert body(TranscriptFormat.SRT) == (
        "1\n00:00:00,000 --> 00:00:02,500\nHello there.\n\n"
        "2\n00:00:03,000 --> 00:00:29,980\nSecond one.\n\n"
        "3\n01:01:01,500 --> 01:01:02,250\nLate.\n"
    )
    assert body(TranscriptFormat.VTT) == (
        "WEBVTT\n\n00:00:00.000 --> 00:00:02.500\nHello there.\n\n"
        "00:00:03.000 --> 00:00:29.980\nSecond one.\n\n01:01:01.500 --> 01:01:02.250\nLate.\n"
    )
    verbose = json.loads(body(TranscriptFormat.VERBOSE_JSON))
    assert (verbose["task"], verbose["language"], verbose["duration"]) == (
        "transcribe",
        "english",
        45.2,
    )
    assert [(s["id"], s["seek"], s["start"]) for s in verbose["segments"]] == [
        (0, 0, 0.0), (1, 0, 3.0), (2, 3000, 3661.5)
    ]  # fmt: skip
    assert "words" not in verbose
    late = verbose["segments"][2]
    assert (late["avg_logprob"], late["temperature"], late["no_speech_prob"]) == (-0.25, 0.2, 0.01)
    assert late["compression_ratio"] == 1.5  # each segment shows its window's try
    openai_fields = set(TranscriptionSegment.model_fields)
    assert all(set(segment) == openai_fields for segment in verbose["segments"])
    [timed] = rendered(requested(TranscriptFormat.VERBOSE_JSON, words=True), [*WINDOWS, END])
    assert json.loads(timed)["words"][2] == {"word": "Late.", "start": 3661.5, "end": 3662.25}


def test_a_stream_sends_a_delta_a_window_then_the_text() -> None:
    chunks = rendered(requested(TranscriptFormat.JSON, stream=True), [*WINDOWS, END])
    events = [json.loads(c.removeprefix(b"data: ")) for c in chunks]
    assert [e["type"] for e in events] == ["transcript.text.delta"] * 2 + ["transcript.text.done"]
    assert "".join(e["delta"] for e in events[:2]) == events[2]["text"]
    assert events[2]["text"] == "Hello there. Second one. Late."
    assert all(c.startswith(b"data: ") and c.endswith(b"\n\n") for c in chunks)


def test_an_error_before_a_byte_is_an_error_answer_and_after_it_an_error_event() -> None:
    failed = RequestFailed(
        request_id=ID, status=400, message="bad", error_type="invalid_request_error", param="file"
    )
    renderer = TranscriptionRenderer(requested(TranscriptFormat.JSON, stream=True))
    first = renderer.feed(failed)
    assert first is not None and first.status == 400 and first.content_type == "application/json"
    renderer = TranscriptionRenderer(requested(TranscriptFormat.JSON, stream=True))
    assert renderer.feed(WINDOWS[0]) is not None
    late = renderer.feed(failed)
    assert late is not None and late.is_final and late.content_type == "text/event-stream"
    assert json.loads(late.body.removeprefix(b"data: "))["error"]["param"] == "file"
