"""OpenAI Responses API request bodies (`/v1/responses`).

The same strictness as the chat schema: types and ranges checked here, unknown
fields refused by name (atom/http/errors.py); tools other than functions are
refused by the adapter, which names them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator

from atom.http.schemas import InputAudio, JsonSchemaSpec, RoutedBody, _Body


class TextPart(_Body):
    type: Literal["input_text", "output_text"]
    text: str
    annotations: list[Any] | None = None


class ImagePart(_Body):
    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] | None = None


class AudioPart(_Body):
    type: Literal["input_audio"]
    input_audio: InputAudio


class MessageItem(_Body):
    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"]
    content: str | list[TextPart | ImagePart | AudioPart]
    id: str | None = None
    status: str | None = None


class FunctionCallItem(_Body):
    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutputItem(_Body):
    type: Literal["function_call_output"]
    call_id: str
    output: str
    id: str | None = None
    status: str | None = None


class ReasoningItem(_Body):
    type: Literal["reasoning"]
    id: str | None = None
    summary: list[Any] = Field(default_factory=list)
    content: list[Any] | None = None
    encrypted_content: str | None = None
    status: str | None = None


Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem


class NamedFunction(_Body):
    type: Literal["function"]
    name: str


class TextFormat(JsonSchemaSpec):
    type: Literal["text", "json_object", "json_schema"]


class TextConfig(_Body):
    format: TextFormat | None = None
    verbosity: Literal["low", "medium", "high"] | None = None


class ReasoningConfig(_Body):
    effort: Literal["minimal", "low", "medium", "high"] | None = None
    summary: Literal["auto", "concise", "detailed"] | None = None


class ResponsesRequest(RoutedBody):
    input: str | list[Item]
    instructions: str | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["auto", "none", "required"] | NamedFunction | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    reasoning: ReasoningConfig | None = None
    max_output_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    # vLLM's sampling fields on the Responses API (sglang-router writes them into every
    # Responses body it forwards, at their neutral values when the client sent none).
    top_k: int | None = Field(default=None, ge=-1)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    priority: int = 0  # lower first, with --scheduling-policy priority
    metadata: dict[str, str] | None = None
    user: str | None = None
    store: bool = True
    stream: bool = False

    @field_validator("stream", mode="before")
    @classmethod
    def _null_stream_is_false(cls, value: Any) -> Any:
        """`"stream": null` means not streamed (sglang-router sends it so)."""
        return False if value is None else value

    previous_response_id: str | None = None
    background: bool = False
    truncation: Literal["disabled"] | None = None
