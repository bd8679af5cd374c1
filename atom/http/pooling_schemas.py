"""Request bodies of the pooling endpoints: OpenAI's /v1/embeddings, vLLM's /pooling,
/classify and /v1/score, Jina's and Cohere's rerank."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from atom.http.schemas import _Body

# -1 means the model's limit, as vLLM has it; otherwise keep this many tokens.
Truncation = Annotated[int, Field(ge=-1)]
NonEmptyText = Annotated[list[str], Field(min_length=1)]
TokenIds = Annotated[list[int], Field(min_length=1)]


class _PoolingBody(_Body):
    model: str | None = None
    truncate_prompt_tokens: Truncation | None = None
    user: str | None = None


class EmbeddingsRequest(_PoolingBody):
    """OpenAI's body: text, texts, token ids or lists of token ids."""

    input: str | NonEmptyText | TokenIds | Annotated[list[TokenIds], Field(min_length=1)]
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: Annotated[int, Field(ge=1)] | None = None
    add_special_tokens: bool = True


class PoolingRequest(EmbeddingsRequest):
    """vLLM's /pooling: the model's raw output for each input."""


class ClassifyRequest(_PoolingBody):
    input: str | NonEmptyText
    add_special_tokens: bool = True


class ScoreRequest(_PoolingBody):
    """One to one, one to many (`text_1` a string) or many to many (two equal lists)."""

    text_1: str | NonEmptyText
    text_2: str | NonEmptyText


class RerankRequest(_PoolingBody):
    query: str
    documents: Annotated[list[str], Field(min_length=1)]
    top_n: Annotated[int, Field(ge=1)] | None = None
    return_documents: bool = True
