"""`atom replay LOG --rerun URL`: the recorded requests re-sent to a live server, greedy
answers compared exactly, seeded sampled ones by shape and unseeded ones not at all,
with a non-zero exit below --min-agreement. Servers with FakeRunner models, recorded in
this test."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest

from atom.cli import main
from atom.http.app import create_app
from atom.log.rerun import Choice, Recorded, compare
from atom.vocabulary.config import Settings
from atom.vocabulary.plan import Endpoint
from tests.conftest import fake_loader, serving_in_thread
from tests.weather import WEATHER

Q = [{"role": "user", "content": "What is the weather?"}]
MIX: list[tuple[str, dict[str, Any]]] = [
    ("/v1/chat/completions", {"messages": Q, "temperature": 0, "max_tokens": 30}),
    ("/v1/chat/completions", {"messages": Q, "temperature": 0, "stream": True, "n": 2}),
    ("/v1/chat/completions", {"messages": Q, "temperature": 0.8, "seed": 3}),
    ("/v1/chat/completions", {"messages": Q, "temperature": 0, "tools": [WEATHER]}),
    ("/v1/completions", {"prompt": "Once upon", "temperature": 0, "max_tokens": 3}),
    ("/v1/completions", {"prompt": ["a", "b"], "temperature": 0.5, "stream": True}),
    ("/v1/messages", {"messages": Q, "max_tokens": 20}),
]


def record(tokenizer: Any, log_path: Path) -> None:
    settings = Settings(request_log=str(log_path))
    with serving_in_thread(create_app(settings, load=fake_loader(tokenizer))) as url:
        for path, body in MIX:
            httpx.post(url + path, json=body, timeout=30)


def rerun(tokenizer: Any, log_path: Path, reply: str, capsys: Any) -> tuple[int, list[Any]]:
    app = create_app(Settings(), load=fake_loader(tokenizer, reply=reply))
    with serving_in_thread(app) as url:
        status = main(["replay", str(log_path), "--rerun", url, "--speed", "max"])
    out = capsys.readouterr().out.splitlines()  # the server's own log lines are there too
    lines = [json.loads(line) for line in out if line.startswith('{"')]
    return status, lines


def test_the_same_server_agrees_and_another_one_does_not(
    tokenizer: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log_path = tmp_path / "log.jsonl"
    record(tokenizer, log_path)
    same, same_lines = rerun(
        tokenizer, log_path, "Hello world, this is a fake reply. Ça marche 🙂!", capsys
    )
    other, other_lines = rerun(tokenizer, log_path, "Something else entirely.", capsys)
    assert same == 0
    *unseeded, summary = same_lines  # the completions sampled without a seed
    assert [(u["compared"], u["divergence"]) for u in unseeded] == [
        ("unseeded", "not comparable (sampled without a seed)")
    ]
    assert summary["requests"] == len(MIX) and summary["agreement"] == 1.0
    assert summary["not_comparable"] == 1
    assert summary["by"] == {
        "greedy": {"agreed": 4, "requests": 4},
        "shape": {"agreed": 1, "requests": 1},
        "status": {"agreed": 1, "requests": 1},
    }
    assert other == 1
    *disagreed, other_summary = other_lines
    assert other_summary["agreed"] == 2  # the seeded one by shape, the Messages status
    assert {d["compared"] for d in disagreed} == {"greedy", "unseeded"}
    disagreed = [d for d in disagreed if d["comparable"]]
    assert all("text differs at character 0" in d["divergence"] for d in disagreed)


def _recorded(**choice: Any) -> Recorded:
    return Recorded(
        request_id="r",
        endpoint=Endpoint.CHAT,
        body={},
        at=0.0,
        status=200,
        is_greedy=False,
        is_seeded=True,
        wants_json=True,
        by_choice=True,
        choices=(Choice(**choice),),
    )


def _answer(content: str, finish: str = "stop", calls: tuple[str, ...] = ()) -> dict[str, Any]:
    tool_calls = [{"function": {"name": n, "arguments": "{}"}} for n in calls]
    message = {"content": content, "tool_calls": tool_calls or None}
    return {"choices": [{"index": 0, "message": message, "finish_reason": finish}]}


def test_sampled_answers_are_compared_by_shape() -> None:
    recorded = _recorded(text='{"a": 1}', finish_reason="stop")
    assert compare(recorded, 200, _answer('{"b": 2}')).agreed  # other JSON: same shape
    assert (
        compare(recorded, 200, _answer("not json")).divergence == "choice 0: the answer is no JSON"
    )
    cut = compare(recorded, 200, _answer('{"b"', finish="length"))
    assert cut.divergence == "choice 0: finish_reason stop → length"
    called = _recorded(calls=(("get_weather", "{}"),), finish_reason="tool_calls")
    other_call = compare(called, 200, _answer("", finish="tool_calls", calls=("get_time",)))
    assert other_call.divergence == "choice 0: tool-call names differ"
    assert compare(recorded, 500, None).divergence == "status 200 → 500"


def test_a_server_that_is_not_there_is_one_line_and_exit_2(tokenizer: Any, tmp_path: Path) -> None:
    """It was an 83-line ExceptionGroup traceback."""
    log_path = tmp_path / "log.jsonl"
    record(tokenizer, log_path)
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    done = subprocess.run(
        [sys.executable, "-m", "atom.cli", "replay", str(log_path), "--rerun", url],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"atom replay: cannot reach {url}")
