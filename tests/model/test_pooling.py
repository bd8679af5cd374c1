"""The pooling runner against sentence-transformers itself: the real all-MiniLM-L6-v2
for embeddings, and tiny random cross-encoder and classifier models (built from a
config, with MiniLM's real tokenizer) for scores and labels."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import pytest
import torch

from atom.model.catalog import ModelKind, ModelSpec, kind_of, resolve_source
from atom.model.pooling import PoolingRuntime, load_pooling
from atom.vocabulary.config import Settings
from atom.vocabulary.events import PoolingInput

os.environ.setdefault("HF_HUB_OFFLINE", "1")

# Mixed lengths in one call: padding and sorting must not change a vector.
SENTENCES = [
    "hello",
    "The capital of France is Paris, a city on the Seine.",
    "Embeddings put similar sentences close together.",
    "a",
    " ".join(["many words make a long input"] * 20),
    "Ça marche très bien 🙂",
]


@pytest.fixture(scope="module")
def minilm() -> PoolingRuntime:
    spec = ModelSpec(name="m", source="all-MiniLM-L6-v2", kind=ModelKind.EMBED)
    return load_pooling(Settings(), spec)


def cosine(a: Any, b: Any) -> float:
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def encode(runtime: PoolingRuntime, texts: list[str]) -> list[PoolingInput]:
    ids = runtime.tokenizer(texts, add_special_tokens=True)["input_ids"]
    return [PoolingInput(token_ids=tuple(i)) for i in ids]


def test_embeddings_equal_sentence_transformers_encode(minilm: PoolingRuntime) -> None:
    from sentence_transformers import SentenceTransformer

    reference = SentenceTransformer(str(resolve_source("all-MiniLM-L6-v2")), device="cpu")
    expected = reference.encode(SENTENCES, batch_size=4)
    together = minilm.runner.pool(encode(minilm, SENTENCES))
    alone = [minilm.runner.pool(encode(minilm, [s]))[0] for s in SENTENCES]
    assert minilm.max_model_len == 256 and minilm.num_dimensions == 384
    for want, batched, single in zip(expected, together, alone, strict=True):
        assert cosine(want, batched) >= 0.99999 and cosine(want, single) >= 0.99999
        assert abs(math.fsum(v * v for v in batched) - 1.0) < 1e-5  # the Normalize module


def test_small_padded_groups_give_the_same_vectors(minilm: PoolingRuntime) -> None:
    inputs = encode(minilm, SENTENCES)
    whole = minilm.runner.pool(inputs)
    runner = minilm.runner
    runner.max_padded_tokens, saved = 40, runner.max_padded_tokens  # type: ignore[attr-defined]
    try:
        grouped = runner.pool(inputs)
    finally:
        runner.max_padded_tokens = saved  # type: ignore[attr-defined]
    for a, b in zip(whole, grouped, strict=True):
        assert cosine(a, b) >= 0.99999


def tiny_classifier(folder: Path, num_labels: int) -> Path:
    """A random BertForSequenceClassification saved with MiniLM's tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    torch.manual_seed(0)
    labels = {i: f"label_{i}" for i in range(num_labels)}
    config = BertConfig(
        vocab_size=30522, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=64, max_position_embeddings=128, num_labels=num_labels,
        id2label=labels, label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    BertForSequenceClassification(config).eval().save_pretrained(folder)
    AutoTokenizer.from_pretrained(resolve_source("all-MiniLM-L6-v2")).save_pretrained(folder)
    return folder


PAIRS = [
    ("capital of France", "Paris is the capital of France."),
    ("capital of France", "Bananas are yellow."),
    ("a much longer question about what the weather will be tomorrow", "Sunny."),
]


def test_a_cross_encoder_scores_each_pair_as_sentence_transformers_does(tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    folder = tiny_classifier(tmp_path / "ranker", num_labels=1)
    assert kind_of(str(folder)) is ModelKind.SCORE
    runtime = load_pooling(
        Settings(), ModelSpec(name="r", source=str(folder), kind=ModelKind.SCORE)
    )
    encoded = runtime.tokenizer([q for q, _ in PAIRS], [d for _, d in PAIRS])
    inputs = [
        PoolingInput(token_ids=tuple(ids), token_type_ids=tuple(types))
        for ids, types in zip(encoded["input_ids"], encoded["token_type_ids"], strict=True)
    ]
    logits = [out[0] for out in runtime.runner.pool(inputs)]
    expected = CrossEncoder(str(folder), device="cpu").predict(PAIRS)  # sigmoid of the logit
    for logit, want in zip(logits, expected, strict=True):
        assert abs(1 / (1 + math.exp(-logit)) - float(want)) < 1e-5
    assert len(set(logits)) == len(PAIRS)  # the second segment matters


def test_a_classifier_gives_one_logit_per_label(tmp_path: Path) -> None:
    from transformers import AutoModelForSequenceClassification

    folder = tiny_classifier(tmp_path / "clf", num_labels=3)
    assert kind_of(str(folder)) is ModelKind.CLASSIFY
    spec = ModelSpec(name="c", source=str(folder), kind=ModelKind.CLASSIFY)
    runtime = load_pooling(Settings(), spec)
    assert runtime.labels == ("label_0", "label_1", "label_2")
    ids = runtime.tokenizer(["short", "a somewhat longer input text"])["input_ids"]
    outputs = runtime.runner.pool([PoolingInput(token_ids=tuple(i)) for i in ids])
    model = AutoModelForSequenceClassification.from_pretrained(folder).eval()
    for row, out in zip(ids, outputs, strict=True):
        want = model(input_ids=torch.tensor([row])).logits[0]
        assert torch.allclose(torch.tensor(list(out)), want, atol=1e-5)
