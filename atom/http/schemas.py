"""Request bodies as pydantic models: types and ranges are checked here, before any actor runs."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# Fields OpenAI clients send routinely that do not change generation: accepted, ignored.
IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier", "parallel_tool_calls"})

# Fields accepted only at their neutral value until their feature lands (issue #4 and on).
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "frequency_penalty": (0, 0.0),
    "presence_penalty": (0, 0.0),
    "repetition_penalty": (1, 1.0),
    "min_p": (0, 0.0),
    "logprobs": (False, None, 0),
    "top_logprobs": (0,),
    "logit_bias": ({},),
    "min_tokens": (0,),
    "echo": (False,),
    "best_of": (1,),
    "suffix": ("",),
    "tools": ([],),
    "tool_choice": ("none", "auto"),
    "response_format": ({"type": "text"},),
}


class _Body(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)


class StreamOptions(_Body):
    include_usage: bool = False


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def as_template_message(self) -> dict[str, Any]:
        content = self.content
        if isinstance(content, list):
            content = "".join(part.text for part in content)
        message: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        return message


class _SamplingBody(_Body):
    model: str | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    max_tokens: int | None = Field(default=None, ge=1)
    stop: str | list[str] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    n: int = Field(default=1, ge=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    cache_salt: str | None = None

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(_SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)


class CompletionRequest(_SamplingBody):
    prompt: str | list[int] | list[str]


class TokenizeRequest(_Body):
    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[int]
