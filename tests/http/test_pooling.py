"""The pooling endpoints through a real hypercorn server, beside a generation model: a
FakePoolingRunner (vectors from token counts) for the embedding, cross-encoder and
classifier models, the real tokenizer, the official `openai` client."""

from __future__ import annotations

import base64
import json
import math
from array import array
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
import trio

from atom.http.app import create_app
from atom.log.codec import read_log
from atom.log.replay import project
from atom.model.catalog import ModelKind
from atom.model.fake_pooling import FakePoolingRunner
from atom.vocabulary.config import Settings
from atom.vocabulary.events import PoolingInput
from tests.conftest import bert_tokenizer, fake_loader, serving, wait_ready

CHAT_MODEL, EMBED_MODEL = "SmolLM2-135M-Instruct", "all-MiniLM-L6-v2"
BERT = bert_tokenizer()  # the fake pooling models' tokenizer
TEXTS = ["The capital of France is Paris.", "Paris", "bananas are yellow"]


def models_with(tmp_path: Path) -> Settings:
    """The default pair plus a cross-encoder and a classifier (their config.json files
    say what they are; the fake loader stands in for their weights)."""
    sources = [CHAT_MODEL, EMBED_MODEL]
    for name, labels in (("ranker", 1), ("classifier", 3)):
        folder = tmp_path / name
        folder.mkdir()
        config = {"architectures": ["BertForSequenceClassification"], "num_labels": labels}
        (folder / "config.json").write_text(json.dumps(config))
        sources.append(str(folder))
    return Settings(model=tuple(sources), request_log=str(tmp_path / "log.jsonl"))


def expected_vector(bert: Any, text: str) -> list[float]:
    ids = tuple(bert(text)["input_ids"])
    return FakePoolingRunner(num_dimensions=8)._embedding(ids).tolist()


def approx(values: list[float]) -> Any:
    return pytest.approx(values, rel=1e-6)


def cosine(a: list[float], b: list[float]) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


async def test_embeddings_with_the_openai_client_in_both_encodings(
    tokenizer: Any, tmp_path: Path
) -> None:
    app = create_app(models_with(tmp_path), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)
        # The client asks for base64 and decodes it; plain floats come from httpx.
        made = await trio.to_thread.run_sync(
            lambda: client.embeddings.create(model=EMBED_MODEL, input=TEXTS)
        )
        floats = await http.post("/v1/embeddings", json={"model": EMBED_MODEL, "input": TEXTS})
        ids = BERT(TEXTS[0])["input_ids"]
        by_ids = await http.post("/v1/embeddings", json={"input": [ids, ids[:2]]})
        models = await http.get("/v1/models")
    assert [d.embedding for d in made.data] == [d["embedding"] for d in floats.json()["data"]]
    for data, text in zip(made.data, TEXTS, strict=True):
        assert data.embedding == expected_vector(BERT, text)
    num_tokens = sum(len(BERT(t)["input_ids"]) for t in TEXTS)
    assert made.usage.prompt_tokens == made.usage.total_tokens == num_tokens
    assert by_ids.json()["data"][0]["embedding"] == made.data[0].embedding
    assert by_ids.json()["usage"]["prompt_tokens"] == len(ids) + 2
    kinds = {card["id"]: card["kind"] for card in models.json()["data"]}
    assert kinds == {CHAT_MODEL: "generate", EMBED_MODEL: "embed", "ranker": "score",
                     "classifier": "classify"}  # fmt: skip


async def test_rerank_and_score_by_embeddings_and_by_a_cross_encoder(
    tokenizer: Any, tmp_path: Path
) -> None:
    app = create_app(models_with(tmp_path), load=fake_loader(tokenizer))
    query, documents = "Where is Paris?", TEXTS
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        ranked = await http.post(
            "/v1/rerank", json={"model": EMBED_MODEL, "query": query, "documents": documents}
        )
        top = await http.post(
            "/v2/rerank",
            json={"query": query, "documents": documents, "top_n": 1, "return_documents": False},
        )
        scored = await http.post("/v1/score", json={"text_1": query, "text_2": documents})
        crossed = await http.post(
            "/score", json={"model": "ranker", "text_1": [query] * 3, "text_2": documents}
        )
        mismatched = await http.post("/v1/score", json={"text_1": ["a", "b"], "text_2": TEXTS})
    want = [cosine(expected_vector(BERT, query), expected_vector(BERT, d)) for d in documents]
    results = ranked.json()["results"]
    assert [r["index"] for r in results] == sorted(range(3), key=lambda i: -want[i])
    assert [r["document"]["text"] for r in results] == [documents[r["index"]] for r in results]
    assert [r["relevance_score"] for r in results] == approx(sorted(want, reverse=True))
    assert top.json()["results"] == [{k: v for k, v in results[0].items() if k != "document"}]
    assert [d["score"] for d in scored.json()["data"]] == approx(want)
    relevance = []
    for doc in documents:
        pair = BERT(query, doc)
        item = PoolingInput(
            token_ids=tuple(pair["input_ids"]), token_type_ids=tuple(pair["token_type_ids"])
        )
        logit = FakePoolingRunner(kind=ModelKind.SCORE, num_dimensions=1)._logits(item)[0]
        relevance.append(1 / (1 + math.exp(-logit)))
    assert [d["score"] for d in crossed.json()["data"]] == approx(relevance)
    assert len(set(relevance)) > 1  # the pairs' segments reached the model
    assert mismatched.status_code == 400 and mismatched.json()["error"]["param"] == "text_2"


async def test_classify_and_raw_pooling(tokenizer: Any, tmp_path: Path) -> None:
    app = create_app(models_with(tmp_path), load=fake_loader(tokenizer))
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        classified = await http.post("/classify", json={"model": "classifier", "input": TEXTS})
        pooled = await http.post(
            "/pooling", json={"model": "ranker", "input": "x", "encoding_format": "base64"}
        )
    for data in classified.json()["data"]:
        assert data["num_classes"] == 3 and math.isclose(sum(data["probs"]), 1.0)
        assert data["label"] == f"label_{max(range(3), key=data['probs'].__getitem__)}"
    raw = array("f", base64.b64decode(pooled.json()["data"][0]["data"]))
    assert len(raw) == 1 and pooled.json()["data"][0]["object"] == "pooling"


async def test_wrong_kind_unknown_model_and_bad_inputs_are_4xx_naming_the_cause(
    tokenizer: Any, tmp_path: Path
) -> None:
    app = create_app(models_with(tmp_path), load=fake_loader(tokenizer))
    chat = {"messages": [{"role": "user", "content": "hi"}]}
    long_text = "word " * 600  # the fake embedding model takes 512 tokens
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)
        answers = {
            "chat on embed": await http.post(
                "/v1/chat/completions", json={**chat, "model": EMBED_MODEL}
            ),
            "embed on chat": await http.post(
                "/v1/embeddings", json={"model": CHAT_MODEL, "input": "x"}
            ),
            "unknown": await http.post("/v1/embeddings", json={"model": "nope", "input": "x"}),
            "dimensions": await http.post("/v1/embeddings", json={"input": "x", "dimensions": 4}),
            "too long": await http.post("/v1/embeddings", json={"input": ["ok", long_text]}),
            "bad ids": await http.post("/v1/embeddings", json={"input": [[1, 10**9]]}),
            "empty": await http.post("/v1/embeddings", json={"input": []}),
            "classify on embed": await http.post(
                "/classify", json={"model": EMBED_MODEL, "input": "x"}
            ),
        }
        truncated = await http.post(
            "/v1/embeddings", json={"input": long_text, "truncate_prompt_tokens": 10}
        )
        still_chatting = await http.post("/v1/chat/completions", json=chat)
    status = {name: r.status_code for name, r in answers.items()}
    assert status == {"chat on embed": 400, "embed on chat": 400, "unknown": 404,
                      "dimensions": 400, "too long": 400, "bad ids": 400, "empty": 400,
                      "classify on embed": 400}  # fmt: skip
    wrong_kind = answers["chat on embed"].json()["error"]["message"]
    assert "an embedding model" in wrong_kind and CHAT_MODEL in wrong_kind
    assert "classifier" in answers["classify on embed"].json()["error"]["message"]
    assert answers["too long"].json()["error"]["param"] == "input.1"
    assert answers["too long"].json()["error"]["code"] == "context_length_exceeded"
    assert answers["dimensions"].json()["error"]["param"] == "dimensions"
    assert truncated.json()["usage"]["prompt_tokens"] == 10
    assert still_chatting.status_code == 200


async def test_concurrent_requests_share_forwards_and_replay_byte_identical(
    tokenizer: Any, tmp_path: Path
) -> None:
    runner = FakePoolingRunner(num_dimensions=8, step_delay_s=0.05)
    inner = fake_loader(tokenizer)

    def load(settings: Settings, spec: Any) -> Any:
        runtime = inner(settings, spec)
        return replace(runtime, runner=runner) if spec.kind is ModelKind.EMBED else runtime

    log_path = tmp_path / "log.jsonl"
    settings = Settings(model=(CHAT_MODEL, EMBED_MODEL), request_log=str(log_path))
    app = create_app(settings, load=load)
    sent: dict[int, bytes] = {}
    async with serving(app) as url, httpx.AsyncClient(base_url=url) as http:
        await wait_ready(app)

        async def embed(i: int) -> None:
            r = await http.post("/v1/embeddings", json={"input": [f"text {i}", "shared"]})
            sent[i] = r.content

        async with trio.open_nursery() as nursery:
            for i in range(12):
                nursery.start_soon(embed, i)
    assert runner.num_calls < 12  # requests that waited together ran in one forward
    replayed = {bytes(r.body) for r in project(read_log(log_path))}
    assert replayed == set(sent.values())
