"""Request bodies as pydantic models: types and ranges are checked here, before any actor runs."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from atom.text.prompt import AUDIO_PART, IMAGE_PART, VIDEO_PART

# Fields OpenAI clients send routinely that do not change generation: accepted, ignored.
IGNORED_FIELDS = frozenset({"user", "metadata", "store", "service_tier"})

# Fields accepted only at their neutral value until their feature lands (issue #4 and on).
NEUTRAL_VALUES: dict[str, tuple[Any, ...]] = {
    "suffix": ("",),
    # SGLang's fields, which sglang-router writes into every request it forwards, at the
    # values that mean what ATOM does anyway (docs/user-guide.md, "Behind sglang-router").
    "no_stop_trim": (False,),
    "separate_reasoning": (True,),
    "stream_reasoning": (True,),
    "return_hidden_states": (False,),
}

# vLLM's old guided-decoding fields: refused loudly, never silently ignored.
LEGACY_GUIDED = {
    "guided_json": "json",
    "guided_regex": "regex",
    "guided_choice": "choice",
    "guided_grammar": "grammar",
    "guided_decoding_backend": None,
    "guided_whitespace_pattern": None,
}


class _Body(BaseModel):
    # NaN and infinities are refused as "finite number" before any range check.
    model_config = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


class StreamOptions(_Body):
    include_usage: bool = False


class TextPart(_Body):
    type: Literal["text"]
    text: str


class ImageUrl(_Body):
    url: str
    detail: Literal["auto", "low", "high"] | None = None


class ImagePart(_Body):
    type: Literal["image_url"]
    image_url: ImageUrl


class VideoUrl(_Body):
    url: str


class VideoPart(_Body):
    type: Literal["video_url"]
    video_url: VideoUrl


class InputAudio(_Body):
    data: str  # base64 of the file
    # OpenAI's two, and the other containers ATOM decodes (atom/audio/decode.py)
    format: Literal["wav", "mp3", "flac", "ogg", "webm", "m4a"]

    def data_url(self) -> str:
        """The clip as a data: URL, as an `audio_url` part would give it."""
        return f"data:audio/{self.format};base64,{self.data}"


class InputAudioPart(_Body):
    type: Literal["input_audio"]
    input_audio: InputAudio


class AudioUrl(_Body):
    url: str


class AudioUrlPart(_Body):
    type: Literal["audio_url"]
    audio_url: AudioUrl


MediaPart = ImagePart | VideoPart | InputAudioPart | AudioUrlPart
ContentPart = Annotated[TextPart | MediaPart, Field(discriminator="type")]
MEDIA_KINDS: dict[type[_Body], str] = {
    ImagePart: "image",
    VideoPart: "video",
    InputAudioPart: "audio",
    AudioUrlPart: "audio",
}


def _media_url(part: MediaPart) -> str:
    if isinstance(part, ImagePart):
        return part.image_url.url
    if isinstance(part, VideoPart):
        return part.video_url.url
    if isinstance(part, InputAudioPart):
        return part.input_audio.data_url()
    return part.audio_url.url


class FunctionCall(_Body):
    name: str
    arguments: str


class ToolCallIn(_Body):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


_TEMPLATE_PARTS = {"image": IMAGE_PART, "video": VIDEO_PART, "audio": AUDIO_PART}


def _template_part(part: TextPart | MediaPart) -> dict[str, Any]:
    """A content part as a multimodal model's chat template takes it."""
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return _TEMPLATE_PARTS[MEDIA_KINDS[type(part)]]


class ChatMessage(_Body):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCallIn] | None = None
    tool_call_id: str | None = None

    def media_urls(self) -> list[tuple[int, str, str]]:
        """(part index, URL, "image", "video" or "audio") of each media part, in order
        (an `input_audio` part's clip as a data: URL)."""
        parts = self.content if isinstance(self.content, list) else []
        return [
            (i, _media_url(p), MEDIA_KINDS[type(p)])
            for i, p in enumerate(parts)
            if not isinstance(p, TextPart)
        ]

    def as_template_message(self, *, parts: bool = False) -> dict[str, Any]:
        """The message as chat templates expect it; tool-call arguments as objects. With
        `parts` (a vision model's templates) the content is a list of text parts and
        IMAGE_PART entries; else its text parts joined."""
        content: Any = self.content
        if parts:
            given = (
                content
                if isinstance(content, list)
                else [TextPart(type="text", text=content or "")]
            )
            content = [_template_part(p) for p in given]
        elif isinstance(content, list):
            content = "".join(part.text for part in content if isinstance(part, TextPart))
        message: dict[str, Any] = {"role": self.role, "content": content or ""}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.id,
                    "type": "function",
                    "function": {
                        "name": c.function.name,
                        "arguments": _maybe_json(c.function.arguments),
                    },
                }
                for c in self.tool_calls
            ]
        return message


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


class FunctionDef(_Body):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(_Body):
    type: Literal["function"]
    function: FunctionDef


class NamedFunction(_Body):
    name: str


class NamedToolChoice(_Body):
    type: Literal["function"]
    function: NamedFunction


class JsonSchemaSpec(_Body):
    name: str | None = None
    description: str | None = None
    json_schema: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None


class TagStructure(_Body):
    """One structure of a structural tag: `begin`, arguments valid against `schema`,
    `end` (vLLM's and SGLang's shape)."""

    begin: str
    json_schema: dict[str, Any] = Field(alias="schema")
    end: str


class ResponseFormat(_Body):
    type: Literal["text", "json_object", "json_schema", "structural_tag"]
    json_schema: JsonSchemaSpec | None = None
    structures: list[TagStructure] | None = None  # structural_tag
    triggers: list[str] | None = None  # structural_tag


class StructuredOutputs(_Body):
    """vLLM's structured_outputs: exactly one of the fields."""

    json_spec: dict[str, Any] | str | None = Field(default=None, alias="json")
    regex: str | None = None
    choice: list[str] | None = None
    grammar: str | None = None
    json_object: bool | None = None
    structural_tag: str | None = None  # the structural_tag response format, as JSON text


class RoutedBody(_Body):
    """A body the server routes by its `model` (every generation API's)."""

    model: str | None = None


class SamplingBody(RoutedBody):
    """The fields chat and completions share (each endpoint adds its own)."""

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
    priority: int = 0  # lower first, with --scheduling-policy priority (vLLM's field)
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    repetition_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    logit_bias: dict[str, float] | None = None
    min_tokens: int = Field(default=0, ge=0)
    stop_token_ids: list[int] | None = None
    bad_words: list[str] | None = None
    allowed_token_ids: list[int] | None = Field(default=None, min_length=1)
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    spaces_between_special_tokens: bool = True
    truncate_prompt_tokens: int | None = Field(default=None, ge=1)
    prompt_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_token_ids: bool = False  # vLLM's: prompt and output token ids in the answer
    return_tokens_as_token_ids: bool = False  # vLLM's: logprobs tokens as "token_id:N"
    response_format: ResponseFormat | None = None
    structured_outputs: StructuredOutputs | None = None
    # vLLM's beam search: the n choices are the n best beams (transformers' ranking).
    use_beam_search: bool = False
    length_penalty: float = 1.0
    early_stopping: bool | Literal["never"] = False

    def stop_strings(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


class ChatCompletionRequest(SamplingBody):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool = True
    chat_template_kwargs: dict[str, Any] | None = None
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    # Reasoning: the template's `reasoning_effort`; whether the answer carries reasoning.
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = None
    include_reasoning: bool = True
    thinking_token_budget: int | None = Field(default=None, ge=0)  # then the end is forced
    # Template controls (vLLM's): docs/user-guide.md.
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    chat_template: str | None = None  # needs --trust-request-chat-template
    documents: list[dict[str, Any]] | None = None


class CompletionRequest(SamplingBody):
    prompt: str | list[int] | list[str] | list[list[int]]
    logprobs: int | None = Field(default=None, ge=0, le=20)
    echo: bool = False
    best_of: int | None = Field(default=None, ge=1)


class TokenizeRequest(_Body):
    """vLLM's /tokenize: a prompt, or messages rendered as chat renders them."""

    model: str | None = None
    prompt: str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True
    tools: list[Tool] | None = None
    chat_template_kwargs: dict[str, Any] | None = None


class DetokenizeRequest(_Body):
    model: str | None = None
    tokens: list[int]
