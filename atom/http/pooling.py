"""The pooling endpoints' adapters: a validated body becomes the inputs the model runs
(tokenized) and the `PoolingPlan` that says what to report of their outputs.

Called in a worker thread (tokenizers run off the event loop). Inputs beyond the
model's length are a 400 naming the input, unless `truncate_prompt_tokens` cuts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from atom.actors.cores import PoolingCore
from atom.http.pooling_schemas import (
    ClassifyRequest,
    EmbeddingsRequest,
    RerankRequest,
    ScoreRequest,
    _PoolingBody,
)
from atom.model.catalog import ModelKind
from atom.vocabulary.errors import ContextTooLong, InvalidRequest
from atom.vocabulary.events import PoolingInput
from atom.vocabulary.plan import Activation, Endpoint, PoolingPlan

Planned = tuple[tuple[PoolingInput, ...], PoolingPlan]


def plan_embeddings(core: PoolingCore, body: EmbeddingsRequest, endpoint: Endpoint) -> Planned:
    """/v1/embeddings and /pooling: one output per input, floats or base64."""
    if body.dimensions is not None:
        _check_dimensions(core, body.dimensions)
    texts = [body.input] if isinstance(body.input, str) else body.input
    if texts and isinstance(texts[0], str):
        inputs = encode_texts(core, texts, body, add_special_tokens=body.add_special_tokens)
    else:
        token_lists = [texts] if isinstance(texts[0], int) else texts
        inputs = _given_tokens(core, token_lists, body)
    plan = PoolingPlan(
        endpoint=endpoint, encoding_format=body.encoding_format, dimensions=body.dimensions
    )
    return inputs, plan


def plan_classify(core: PoolingCore, body: ClassifyRequest) -> Planned:
    texts = [body.input] if isinstance(body.input, str) else body.input
    inputs = encode_texts(core, texts, body, add_special_tokens=body.add_special_tokens)
    plan = PoolingPlan(
        endpoint=Endpoint.CLASSIFY, activation=Activation.SOFTMAX, labels=core.labels
    )
    return inputs, plan


def plan_score(core: PoolingCore, body: ScoreRequest) -> Planned:
    """text_1 against each text_2: one to one, one to many, or pairwise."""
    firsts = [body.text_1] if isinstance(body.text_1, str) else body.text_1
    seconds = [body.text_2] if isinstance(body.text_2, str) else body.text_2
    if len(firsts) == 1:
        firsts = firsts * len(seconds)
    if len(firsts) != len(seconds):
        raise InvalidRequest(
            f"text_1 has {len(firsts)} texts and text_2 {len(seconds)}: give one text_1 "
            "or as many as text_2",
            param="text_2",
        )
    return _pairs(core, firsts, seconds, body, Endpoint.SCORE)


def plan_rerank(core: PoolingCore, body: RerankRequest) -> Planned:
    inputs, plan = _pairs(
        core, [body.query] * len(body.documents), body.documents, body, Endpoint.RERANK
    )
    documents = tuple(body.documents) if body.return_documents else ()
    return inputs, replace(plan, documents=documents, top_n=body.top_n)


def _pairs(
    core: PoolingCore,
    firsts: list[str],
    seconds: list[str],
    body: _PoolingBody,
    endpoint: Endpoint,
) -> Planned:
    """A cross-encoder reads each pair at once; an embedding model embeds each distinct
    text once and compares the pairs' vectors (cosine similarity, as vLLM does)."""
    if core.kind is ModelKind.SCORE:
        limit = _limit(core, body.truncate_prompt_tokens)
        encoded = core.tokenizer(firsts, seconds, truncation=limit is not None, max_length=limit)
        types = encoded.get("token_type_ids")
        inputs = tuple(
            _checked(core, ids, None if types is None else types[i], param=f"pair {i}")
            for i, ids in enumerate(encoded["input_ids"])
        )
        return inputs, PoolingPlan(endpoint=endpoint, activation=Activation.SIGMOID)
    texts = list(dict.fromkeys([*firsts, *seconds]))
    position = {text: idx for idx, text in enumerate(texts)}
    comparisons = tuple((position[a], position[b]) for a, b in zip(firsts, seconds, strict=True))
    inputs = encode_texts(core, texts, body, add_special_tokens=True)
    return inputs, PoolingPlan(endpoint=endpoint, comparisons=comparisons)


def encode_texts(
    core: PoolingCore, texts: Sequence[Any], body: _PoolingBody, *, add_special_tokens: bool
) -> tuple[PoolingInput, ...]:
    limit = _limit(core, body.truncate_prompt_tokens)
    encoded = core.tokenizer(
        list(texts),
        add_special_tokens=add_special_tokens,
        truncation=limit is not None,
        max_length=limit,
        verbose=False,  # a too-long input is refused below, not warned about
    )
    return tuple(
        _checked(core, ids, None, param=f"input.{i}") for i, ids in enumerate(encoded["input_ids"])
    )


def _given_tokens(
    core: PoolingCore, token_lists: Sequence[Any], body: _PoolingBody
) -> tuple[PoolingInput, ...]:
    vocab = len(core.tokenizer)
    limit = _limit(core, body.truncate_prompt_tokens)
    inputs = []
    for i, ids in enumerate(token_lists):
        if any(t < 0 or t >= vocab for t in ids):
            raise InvalidRequest(f"input.{i}: token ids must be in [0, {vocab})", param="input")
        kept = ids[-limit:] if limit is not None else ids
        inputs.append(_checked(core, kept, None, param=f"input.{i}"))
    return tuple(inputs)


def _limit(core: PoolingCore, truncate: int | None) -> int | None:
    """How many tokens an input keeps: None (all; longer is an error), or the cut."""
    if truncate is None:
        return None
    if truncate > core.max_model_len:
        raise InvalidRequest(
            f"truncate_prompt_tokens {truncate} exceeds the model's limit of "
            f"{core.max_model_len} tokens",
            param="truncate_prompt_tokens",
        )
    return core.max_model_len if truncate == -1 else truncate


def _checked(
    core: PoolingCore, ids: Sequence[int], types: Sequence[int] | None, *, param: str
) -> PoolingInput:
    if len(ids) > core.max_model_len:
        raise ContextTooLong(
            f"{param} has {len(ids)} tokens, more than this model's limit of "
            f"{core.max_model_len}; send truncate_prompt_tokens to cut it",
            param=param,
        )
    return PoolingInput(
        token_ids=tuple(int(t) for t in ids),
        token_type_ids=None if types is None else tuple(int(t) for t in types),
    )


def _check_dimensions(core: PoolingCore, dimensions: int) -> None:
    if dimensions > core.num_dimensions:
        raise InvalidRequest(
            f"dimensions {dimensions} exceeds the model's {core.num_dimensions}",
            param="dimensions",
        )
    if not core.is_matryoshka and dimensions != core.num_dimensions:
        raise InvalidRequest(
            f"the model `{core.name}` was not trained for fewer dimensions (Matryoshka); "
            f"only {core.num_dimensions} is accepted",
            param="dimensions",
        )
