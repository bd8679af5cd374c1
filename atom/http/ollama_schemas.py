"""Ollama's API request bodies (`/api/chat`, `/api/generate`, `/api/embed`,
`/api/embeddings`), as its official client sends them.

The same strictness as the OpenAI schemas for the body itself (types checked, unknown
fields refused by name); `options` is Ollama's bag of model settings, of which the
sampling ones are taken and the rest (hardware and context settings ATOM decides
itself) ignored with a warning, as Ollama ignores options it does not know.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from atom.http.pooling_schemas import NonEmptyText, _PoolingBody
from atom.http.schemas import RoutedBody


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class OllamaFunctionCall(_Body):
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    index: int | None = None


class OllamaToolCall(_Body):
    function: OllamaFunctionCall


class OllamaMessage(_Body):
    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    images: list[str] | None = None  # base64
    thinking: str | None = None  # an earlier answer's reasoning: not sent to the model
    tool_calls: list[OllamaToolCall] | None = None
    tool_name: str | None = None  # a tool message: the function that answered


class OllamaOptions(BaseModel):
    """The options Ollama's `/api/chat` takes that are sampling settings; any other key
    is kept in `model_extra` (ignored, with a warning)."""

    model_config = ConfigDict(extra="allow", strict=False, allow_inf_nan=False)

    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=0)
    min_p: float | None = Field(default=None, ge=0, le=1)
    num_predict: int | None = None  # -1: no limit (the context's); -2: fill the context
    stop: list[str] | str | None = None
    seed: int | None = None
    repeat_penalty: float | None = Field(default=None, gt=0)
    presence_penalty: float | None = None
    frequency_penalty: float | None = None


class OllamaChatRequest(RoutedBody):
    model: str | None = None
    messages: list[OllamaMessage] = Field(default_factory=list)
    tools: list[dict[str, Any]] | None = None  # OpenAI's function shape
    format: Literal["json"] | dict[str, Any] | Literal[""] | None = None
    options: OllamaOptions | None = None
    stream: bool = True  # Ollama streams unless told not to
    think: bool | Literal["low", "medium", "high"] | None = None
    keep_alive: float | str | None = None  # accepted; models stay loaded (--models-max)


class OllamaGenerateRequest(RoutedBody):
    model: str | None = None
    prompt: str = ""
    system: str | None = None
    images: list[str] | None = None  # base64
    format: Literal["json"] | dict[str, Any] | Literal[""] | None = None
    options: OllamaOptions | None = None
    stream: bool = True
    raw: bool = False  # the prompt as it is, without the chat template
    think: bool | Literal["low", "medium", "high"] | None = None
    keep_alive: float | str | None = None
    # Not served: a 400 names them when they are given (atom/http/ollama.py).
    suffix: str | None = None
    template: str | None = None
    context: list[int] | None = None


class OllamaEmbedRequest(_PoolingBody):
    input: str | NonEmptyText
    truncate: bool = True  # inputs past the model's length are cut (else a 400)
    dimensions: int | None = Field(default=None, ge=1)
    options: OllamaOptions | None = None  # no sampling here: ignored, with a warning
    keep_alive: float | str | None = None


class OllamaEmbeddingsRequest(_PoolingBody):
    """The older route: one prompt, one embedding."""

    prompt: str
    options: OllamaOptions | None = None
    keep_alive: float | str | None = None
