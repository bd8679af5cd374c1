from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from atom.log.codec import decode, encode, read_log
from atom.vocabulary.events import (
    Abort,
    ChoiceFinished,
    ClientDisconnected,
    Endpoint,
    Envelope,
    Event,
    FinishReason,
    RequestAborted,
    RequestAccepted,
    RequestCompleted,
    RequestFailed,
    RequestReceived,
    RequestReleased,
    RequestScheduled,
    SamplingParams,
    Submit,
    TextDelta,
    TokensSampled,
)
from atom.vocabulary.plan import RequestPlan, ResponseShape, TextPlan, ToolPlan

PARAMS = SamplingParams(temperature=0.5, top_k=3, stop=("x", "y"), seed=9)
PLAN = RequestPlan(
    shape=ResponseShape(endpoint=Endpoint.COMPLETIONS, num_prompts=2, n=1, best_of=2),
    text=TextPlan(
        tools=ToolPlan(parser="hermes", schemas={"f": {"type": "object"}}, named="f"),
        template_kwargs={"enable_thinking": False},
        echo_texts=("a", "b"),
    ),
    params=PARAMS,
)
EVENTS: list[Event] = [
    Submit(request_id="r", prompt_ids=(1, 2), params=PARAMS, choices_per_prompt=2),
    Abort(request_id="r", choice_idx=1, reason="stop_string"),
    RequestReceived(request_id="r", endpoint=Endpoint.CHAT, model="m", created=5,
                    body={"messages": [{"role": "user", "content": "é🙂"}]}),
    RequestReceived(request_id="p", endpoint=Endpoint.COMPLETIONS, model="m", created=5,
                    body={"prompt": ["a", "b"]}, plan=PLAN),
    RequestAccepted(request_id="r", prompt_ids=(1, 2, 3), num_choices=1),
    RequestScheduled(request_id="r", num_running=3),
    TokensSampled(request_id="r", choice_idx=0, token_ids=(7,), finish_reason=FinishReason.LENGTH),
    TokensSampled(request_id="r", choice_idx=1, token_ids=(8, 9)),
    TextDelta(request_id="r", choice_idx=0, text="hi\n"),
    ChoiceFinished(request_id="r", choice_idx=0, finish_reason=FinishReason.STOP, num_tokens=4),
    RequestCompleted(request_id="r", prompt_tokens=3, completion_tokens=4, ttft_s=0.1,
                     tpot_s=0.02, latency_s=0.3),
    ClientDisconnected(request_id="r"),
    RequestAborted(request_id="r", reason="client_disconnected"),
    RequestFailed(request_id="r", status=429, message="busy", error_type="rate_limit_error",
                  code="server_overloaded"),
    RequestReleased(request_id="r", was_scheduled=True),
]  # fmt: skip


@pytest.mark.parametrize("event", EVENTS, ids=lambda e: e.type)
def test_every_event_round_trips(event: Event) -> None:
    envelope = Envelope(seq=3, at=1.25, event=event)
    line = encode(envelope)
    assert decode(line) == envelope
    assert '"v":1' in line and f'"type":"{event.type}"' in line


def test_type_tags_are_unique_snake_case() -> None:
    tags = [type(e).type for e in EVENTS]
    assert len(set(tags)) == len({type(e) for e in EVENTS})
    assert all(t == t.lower() and " " not in t for t in tags)


def test_unknown_type_or_version_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown event type"):
        decode('{"v":1,"seq":0,"at":0,"type":"nope","request_id":"r"}')
    with pytest.raises(ValueError, match="version"):
        decode('{"v":99,"seq":0,"at":0,"type":"abort","request_id":"r"}')


def test_torn_lines_are_reported_and_skipped_and_the_rest_is_read(tmp_path: Path) -> None:
    """A crash mid-character, then lines a restarted server appended."""
    good = [encode(Envelope(seq=i, at=0.0, event=EVENTS[2])).encode() for i in range(3)]
    cut_in_a_character = good[1][: good[1].index("🙂".encode()) + 2]
    path = tmp_path / "log.jsonl"
    path.write_bytes(good[0] + b"\n" + cut_in_a_character + b"\n" + good[2] + b"\n" + good[0][:9])
    torn: list[tuple[int, str]] = []
    envelopes = list(read_log(path, on_torn=lambda number, reason: torn.append((number, reason))))
    assert [e.seq for e in envelopes] == [0, 2]
    assert [number for number, _ in torn] == [2, 4]
    assert "utf-8" in torn[0][1]


def test_atom_replay_reports_a_torn_line_and_replays_the_rest(tmp_path: Path) -> None:
    line = encode(Envelope(seq=0, at=0.0, event=EVENTS[2]))
    path = tmp_path / "log.jsonl"
    path.write_bytes(line.encode()[:-5] + b"\n" + line.encode() + b"\n")
    done = subprocess.run(
        [sys.executable, "-m", "atom.cli", "replay", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert f"{path}:1: skipped a line" in done.stderr
    assert done.stdout.startswith("### r ")


def replay_cli(path: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "atom.cli", "replay", str(path)]
    return subprocess.run(command, capture_output=True, text=True)


def test_atom_replay_of_what_is_no_log_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """A folder, a binary file and a line nested a million deep each gave a traceback."""
    binary = tmp_path / "binary.jsonl"
    binary.write_bytes(bytes(range(256)) * 64)
    deep = tmp_path / "deep.jsonl"
    deep.write_text("[" * 1_000_000 + "]" * 1_000_000 + "\n")
    for path in (tmp_path, binary, deep):
        done = replay_cli(path)
        assert done.returncode == 2, done.stderr
        assert "Traceback" not in done.stderr
        assert done.stderr.splitlines()[-1].startswith(f"atom replay: {path}")


def test_a_line_past_the_limit_is_skipped_without_holding_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("atom.log.codec.MAX_LINE_BYTES", 1000)
    line = encode(Envelope(seq=0, at=0.0, event=EVENTS[2])).encode()
    path = tmp_path / "log.jsonl"
    path.write_bytes(b"\0" * 5000 + b"\n5\n" + line + b"\n")
    torn: list[tuple[int, str]] = []
    envelopes = list(read_log(path, on_torn=lambda number, reason: torn.append((number, reason))))
    assert [e.seq for e in envelopes] == [0]
    assert [number for number, _ in torn] == [1, 2]
    assert "longer than 1000 bytes" in torn[0][1]


@pytest.mark.parametrize("echoed", [{"store": False, "background": False},
                                    {"store": True, "background": True}, {}])  # fmt: skip
def test_a_shape_logged_before_background_and_store_were_fields_reads_them(
    echoed: dict[str, bool],
) -> None:
    """An older log has a Responses request's `store`/`background` only in the echoed
    `request_fields`: read back, a `store: false` response stays unstored."""
    shape = ResponseShape(endpoint=Endpoint.RESPONSES, request_fields={**echoed, "top_p": 1.0})
    plan = RequestPlan(shape=shape, text=TextPlan(), params=PARAMS)
    received = RequestReceived(request_id="r", endpoint=Endpoint.RESPONSES, model="m",
                               created=5, body={}, plan=plan)  # fmt: skip
    raw = json.loads(encode(Envelope(seq=1, at=0.0, event=received)))
    del raw["plan"]["shape"]["background"], raw["plan"]["shape"]["store"]  # an older line
    got = decode(json.dumps(raw)).event
    assert isinstance(got, RequestReceived) and got.plan is not None
    assert got.plan.shape.store is echoed.get("store", True)
    assert got.plan.shape.background is echoed.get("background", False)
    assert got.plan.shape.request_fields == shape.request_fields
