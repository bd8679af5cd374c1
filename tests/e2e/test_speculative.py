"""Speculative decoding served for real: the default model answers 8 greedy requests
(stop strings, structured output, logprobs, streams) with drafts exactly as without
them: n-gram drafts in float32, alone and batched, and suffix drafts and a draft model
(the default model again: the only one here with its tokenizer) on the default integer
kernels, alone; the request log records the drafts and replays to the bytes the
clients got."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from typing import Any

import httpx
import pytest

from atom.log.codec import read_log
from atom.vocabulary.events import TokensSampled
from tests.e2e.conftest import Server, running_server
from tests.replay_mix import response_id

pytestmark = pytest.mark.slow

# Each proposer with one weight form (--quantization), so every one is served for real.
SPECULATION = {
    "ngram": ("off", {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 2}),
    "suffix": ("auto", {"method": "suffix", "num_speculative_tokens": 3}),
    "draft": ("auto", {"model": "SmolLM2-135M-Instruct", "num_speculative_tokens": 3}),
}
CODE = "def area(w, h):\n    return w * h\n\n\ndef perimeter(w, h):\n    return 2 * (w + h)\n"
REPEATING = [
    f"Rewrite this code with `area` renamed to `surface`, nothing else changed:\n{CODE}",
    f"Copy this code exactly:\n{CODE}",
    "Repeat exactly: the quick brown fox jumps over the lazy dog, the quick brown fox.",
    "List the numbers from 1 to 30 separated by commas.",
]
FREE = [
    "Write a short poem about the sea.",
    "What is the capital of France?",
    "Explain what a hash map is in two sentences.",
    "Give one tip for learning a language.",
]
PERSON = {
    "type": "json_schema",
    "json_schema": {
        "name": "person",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
            "required": ["name", "age"],
        },
    },
}


def body(i: int, prompt: str) -> dict[str, Any]:
    """Greedy with logprobs; every third with stop strings, every fifth streamed, one
    held to a JSON schema."""
    out: dict[str, Any] = {
        "model": "SmolLM2-135M-Instruct",
        "messages": [{"role": "user", "content": prompt}],
        "temperature": 0,
        "max_tokens": 48,
        "logprobs": True,
        "top_logprobs": 2,
    }
    if i % 3 == 1:
        out["stop"] = ["dog", "\n\n", "10"]
    if i % 5 == 2:
        out["stream"] = True
    if i == len(PROMPTS) - 1:
        out["response_format"] = PERSON
    return out


PROMPTS = REPEATING + FREE  # drafts get accepted, and some answers are free
BODIES = [body(i, p) for i, p in enumerate(PROMPTS)]


def ask(url: str, payload: dict[str, Any]) -> tuple[bytes, list[dict[str, Any]]]:
    """The raw response, and its choice's logprob entries (SSE chunks joined)."""
    r = httpx.post(f"{url}/v1/chat/completions", json=payload, timeout=300)
    assert r.status_code == 200, r.text
    if not payload.get("stream"):
        return r.content, r.json()["choices"][0]["logprobs"]["content"]
    entries: list[dict[str, Any]] = []
    for line in r.text.splitlines():
        if line.startswith("data: {"):
            for choice in json.loads(line[6:])["choices"]:
                entries += (choice.get("logprobs") or {}).get("content") or []
    return r.content, entries


def answers(server: Server, *, together: bool) -> list[tuple[bytes, list[dict[str, Any]]]]:
    if not together:
        return [ask(server.url, b) for b in BODIES]
    with ThreadPoolExecutor(len(BODIES)) as pool:
        return list(pool.map(lambda b: ask(server.url, b), BODIES))


FIRST: dict[str, list[tuple[bytes, list[dict[str, Any]]]]] = {}


def first_answers(server: Server) -> list[tuple[bytes, list[dict[str, Any]]]]:
    """A server's answers the first time it was asked, alone: later ones hit its prefix
    cache, which on the integer kernels can answer differently (docs/user-guide.md)."""
    if server.url not in FIRST:
        FIRST[server.url] = answers(server, together=False)
    return FIRST[server.url]


def visible(raw: bytes) -> tuple[str, str, int | None]:
    """What a client reads: the answer's text, finish reason and completion tokens (a
    step that accepted drafts streams its tokens in one chunk, as vLLM does)."""
    text = raw.decode()
    if not text.startswith("data:"):
        answer = json.loads(text)
        choice = answer["choices"][0]
        return (
            choice["message"]["content"],
            choice["finish_reason"],
            answer["usage"]["completion_tokens"],
        )
    chunks = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: {")]
    choices = [c for chunk in chunks for c in chunk["choices"]]
    content = "".join(c["delta"].get("content") or "" for c in choices)
    return content, next(c["finish_reason"] for c in choices if c["finish_reason"]), None


Pair = tuple[Server, Server]  # the same weights without and with speculation


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Pair]]:
    """A server of the default model without speculation (one per `--quantization`) and
    one with each proposer, started when a test first asks and stopped after the module."""
    plain: dict[str, Server] = {}
    spec: dict[str, Server] = {}
    with ExitStack() as stack:

        def start(name: str, **env: str) -> Server:
            logs = tmp_path_factory.mktemp(f"spec-{name}")
            env |= {"ATOM_MODEL": "SmolLM2-135M-Instruct"}
            return stack.enter_context(running_server(logs / "requests.jsonl", **env))

        def pair(method: str) -> Pair:
            quantization, config = SPECULATION[method]
            if quantization not in plain:
                plain[quantization] = start(quantization, ATOM_QUANTIZATION=quantization)
            if method not in spec:
                spec[method] = start(
                    method,
                    ATOM_QUANTIZATION=quantization,
                    ATOM_SPECULATIVE_CONFIG=json.dumps(config),
                )
            return plain[quantization], spec[method]

        yield pair


def assert_same(
    got: list[tuple[bytes, list[dict[str, Any]]]],
    expected: list[tuple[bytes, list[dict[str, Any]]]],
    quantization: str,
) -> None:
    """Same text, finish reasons and tokens; logprobs equal on the integer kernels, and
    within float32's batch-shape rounding otherwise (docs/speculative-decoding.md)."""
    for (raw, entries), (raw_expected, entries_expected) in zip(got, expected, strict=True):
        assert visible(raw) == visible(raw_expected)
        assert [e["token"] for e in entries] == [e["token"] for e in entries_expected]
        for ours, theirs in zip(entries, entries_expected, strict=True):
            if quantization == "auto":
                assert ours == theirs
            else:
                assert ours["logprob"] == pytest.approx(theirs["logprob"], abs=1e-4)


def accepted_tokens(server: Server) -> int:
    metrics = httpx.get(f"{server.url}/metrics").text
    line = next(x for x in metrics.splitlines() if x.startswith("atom:spec_decode_num_accepted"))
    return int(float(line.rsplit(" ", 1)[1]))


@pytest.mark.parametrize(
    "method",
    # suffix and draft start three more servers: minutes, so in `make test-all` only
    [pytest.param(m, marks=[] if m == "ngram" else [pytest.mark.very_slow]) for m in SPECULATION],
)
def test_alone_the_answers_are_the_same_with_drafts_accepted(
    pairs: Callable[[str], Pair], method: str
) -> None:
    plain, spec = pairs(method)
    before = accepted_tokens(spec)
    got = first_answers(spec)
    assert_same(got, first_answers(plain), SPECULATION[method][0])
    assert accepted_tokens(spec) - before > 30
    assert visible(got[-1][0])[0].startswith("{")  # the structured answer, streamed


def test_batched_the_answers_are_the_same(pairs: Callable[[str], Pair]) -> None:
    """In float32. On the default integer kernels the products are batch-invariant, but
    drafts take part of a step's token budget, so a batched prompt can be cut into
    other chunks, and attention over chunks sums in another order than over the whole
    prompt: two batched runs need not agree there (docs/speculative-decoding.md)."""
    plain, spec = pairs("ngram")
    assert_same(answers(spec, together=True), answers(plain, together=True), "off")


def test_the_log_records_the_drafts_and_replays_to_the_bytes_sent(
    pairs: Callable[[str], Pair],
) -> None:
    _, spec = pairs("ngram")
    received = {response_id(raw): raw for raw, _ in first_answers(spec)}  # already logged
    time.sleep(0.5)  # the logger writes after each burst of events
    command = [sys.executable, "-m", "atom.cli", "replay", str(spec.log_path), "--json"]
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    replayed = {r["request_id"]: r["body"].encode() for r in map(json.loads, out.splitlines())}
    assert all(replayed[request_id] == raw for request_id, raw in received.items())
    steps = [e.event for e in read_log(spec.log_path) if isinstance(e.event, TokensSampled)]
    verified = [s for s in steps if s.drafts is not None]
    assert any(len(s.token_ids) > 1 for s in verified)
    assert all(len(s.token_ids) <= s.drafts.num_accepted_tokens + 1 for s in verified)  # type: ignore[union-attr]
