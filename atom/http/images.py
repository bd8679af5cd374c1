"""A conversation's prompt when its messages hold images (or videos, audio clips): each
part read within the media policy (atom/http/media.py, videos.py, audio_parts.py), the
chat rendered by the model's processor template, each part's placeholder expanded
(atom/model/vision/prompter.py). Every endpoint that takes images (chat, Responses,
Messages) plans through here."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from atom.actors.cores import EngineCore
from atom.http.audio_parts import load_audio
from atom.http.media import FetchFirst, MediaPolicy, load_image, web_media_to_fetch
from atom.http.videos import load_video
from atom.model.vision.prompter import ImageRefused, MediaPrompter
from atom.text.prompt import TemplateControls, render_chat
from atom.vocabulary.errors import InvalidRequest
from atom.vocabulary.images import PromptImage
from atom.vocabulary.on_loop import off_loop


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageSource:
    """An image a message points at: its URL and the request field that holds it."""

    url: str
    param: str
    kind: str = "image"  # or "video", "audio"


def image_prompt(
    core: EngineCore,
    policy: MediaPolicy,
    messages: Sequence[dict[str, Any]],
    sources: Sequence[ImageSource],
    *,
    tools: Sequence[dict[str, Any]] | None,
    template_kwargs: dict[str, Any],
    controls: TemplateControls,
) -> tuple[tuple[int, ...], tuple[PromptImage, ...]]:
    """The prompt ids and images of `messages`, whose content lists hold IMAGE_PART where
    each of `sources` goes. 400s name the field: a text-only model, too many images, an
    image the policy refuses or that does not decode, a template that drops images."""
    prompter = _prompter(core, policy, sources)
    to_fetch = web_media_to_fetch([(s.url, s.param, s.kind) for s in sources], policy)
    if to_fetch:  # before anything is read or rendered: atom/http/fetch.py
        raise FetchFirst(to_fetch)
    off_loop()  # media are read and decoded in a worker thread
    loaded = [_load(s, policy, prompter) for s in sources]
    if controls.chat_template is None and prompter.chat_template:
        controls = dataclasses.replace(controls, chat_template=prompter.chat_template)
    try:
        ids = render_chat(
            core.tokenizer,
            messages,
            tools=tools,
            template_kwargs=template_kwargs,
            controls=controls,
        )
        return prompter.expand(ids, loaded)
    except ImageRefused as refused:
        param = sources[refused.index].param
        raise InvalidRequest(f"{param}: {refused}", param=param) from None
    except ValueError as exc:
        raise InvalidRequest(str(exc), param="messages") from None


def _load(source: ImageSource, policy: MediaPolicy, prompter: MediaPrompter) -> Any:
    """The part `source` names, read and decoded (a clip at most as long as the model
    hears and --max-audio-seconds allows)."""
    if source.kind == "video":
        return load_video(source.url, source.param, policy)
    if source.kind == "audio":
        longest = min(policy.max_audio_seconds, prompter.max_audio_seconds or float("inf"))
        return load_audio(source.url, source.param, policy, max_seconds=longest)
    return load_image(source.url, source.param, policy)


def _prompter(
    core: EngineCore, policy: MediaPolicy, sources: Sequence[ImageSource]
) -> MediaPrompter:
    """The model's prompter, when it reads images and these are few enough."""
    if core.images is None:
        param = sources[0].param
        raise InvalidRequest(
            f"{param}: this model takes text only; {sources[0].kind} parts need a multimodal model",
            param=param,
        )
    for kind in ("image", "video", "audio"):
        limit = getattr(policy.limits, kind)
        of_kind = [s for s in sources if s.kind == kind]
        if of_kind and not core.images.takes(kind):
            param = of_kind[0].param
            raise InvalidRequest(f"{param}: this model takes no {kind} parts", param=param)
        if len(of_kind) > limit:
            param = of_kind[limit].param
            noun = "audio clips" if kind == "audio" else f"{kind}s"
            raise InvalidRequest(
                f"{param}: a prompt may hold at most {limit} {noun} (--limit-mm-per-prompt)",
                param=param,
            )
    return core.images


ORIGIN = "origin"  # an image part's key naming the field of the body the client sent


def image_part(url: str, origin: str) -> dict[str, Any]:
    """A chat image part for an image of another API's body (Messages, Responses), with
    the field that held it there."""
    return {"type": "image_url", "image_url": {"url": url}, ORIGIN: origin}


def audio_part(input_audio: dict[str, Any], origin: str) -> dict[str, Any]:
    """A chat `input_audio` part for a clip of another API's body (Responses), with the
    field that held it there."""
    return {"type": "input_audio", "input_audio": input_audio, ORIGIN: origin}


def take_origins(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Remove the ORIGIN keys of a translated chat body's image (and audio) parts: chat
    field → the field of the body the client sent."""
    fields: dict[str, str] = {}
    for m_idx, message in enumerate(messages):
        content = message.get("content")
        for p_idx, part in enumerate(content if isinstance(content, list) else []):
            if ORIGIN in part:
                fields[f"messages.{m_idx}.content.{p_idx}"] = part.pop(ORIGIN)
    return fields


@contextmanager
def named_as(fields: dict[str, str]) -> Iterator[None]:
    """A 400 about an image of a translated chat body names the client's own field."""
    try:
        yield
    except InvalidRequest as error:
        original = fields.get(error.param or "")
        if original is None or error.param is None:
            raise
        message = error.message.replace(error.param, original, 1)
        raise InvalidRequest(message, param=original) from None
