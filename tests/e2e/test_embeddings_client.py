"""The default server's embedding model (all-MiniLM-L6-v2 beside the chat model) with the
official `openai` client, against sentence-transformers' own `encode()`."""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from atom.model.catalog import resolve_source
from tests.e2e.conftest import Server

pytestmark = pytest.mark.slow

MODEL = "all-MiniLM-L6-v2"
SENTENCES = [
    "The capital of France is Paris.",
    "hi",
    "Sentence embeddings map similar meanings to nearby vectors, whatever their length.",
    "Ça marche 🙂",
    " ".join(["a long input of many repeated words"] * 12),
]


def cosine(a: list[float], b: list[float]) -> float:
    dot = math.fsum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(math.fsum(x * x for x in a) * math.fsum(y * y for y in b))


def test_embeddings_equal_sentence_transformers_alone_and_under_concurrent_load(
    server: Server,
) -> None:
    from sentence_transformers import SentenceTransformer

    expected = SentenceTransformer(str(resolve_source(MODEL)), device="cpu").encode(SENTENCES)
    client = server.client()
    alone = client.embeddings.create(model=MODEL, input=SENTENCES)

    def one(i: int) -> list[float]:
        text = SENTENCES[i % len(SENTENCES)]
        return client.embeddings.create(model=MODEL, input=text).data[0].embedding

    with ThreadPoolExecutor(16) as pool:
        loaded = list(pool.map(one, range(48)))
    for want, got in zip(expected, alone.data, strict=True):
        assert cosine(list(want), got.embedding) >= 0.99999
    for i, got_one in enumerate(loaded):
        assert cosine(list(expected[i % len(SENTENCES)]), got_one) >= 0.99999
    assert len(alone.data[0].embedding) == 384


def test_rerank_puts_the_answer_first_and_chat_still_answers(server: Server) -> None:
    documents = ["Bananas are yellow.", "Paris is the capital of France.", "Cats sleep a lot."]
    ranked = httpx.post(
        f"{server.url}/v1/rerank",
        json={"model": MODEL, "query": "What is the capital of France?", "documents": documents},
        timeout=60,
    )
    assert ranked.status_code == 200, ranked.text
    assert ranked.json()["results"][0]["index"] == 1
    models = httpx.get(f"{server.url}/v1/models").json()["data"]
    assert {(m["id"], m["kind"]) for m in models} == {
        ("SmolLM2-135M-Instruct", "generate"),
        (MODEL, "embed"),
        ("whisper-base", "transcribe"),
    }
    wrong = httpx.post(f"{server.url}/v1/embeddings", json={"model": server.model, "input": "x"})
    assert wrong.status_code == 400 and MODEL in wrong.json()["error"]["message"]
